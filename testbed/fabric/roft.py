"""Rail-optimized fat-tree (ROFT): rail leaves per segment, spines, and a third tier at scale.

A segment holds `servers_per_segment` servers; local GPU rank r of each of them connects to
leaf r of that segment. Two tiers: every leaf has an equal share of uplinks to every spine.
Three tiers (pods of radix/2 leaves, aggregation, core) when the spine radix cannot hold
every leaf — which reproduces the published 1,024- and 16,384-GPU inventories.
"""

from __future__ import annotations

import math

from .builder import FabricBuilder, gbps_to_bps
from .spec import FabricKind, Param, SpecError, canonical_spec, register, require

PARAMS = (
    Param("gpus", int, None, "total GPUs (one 1xR NIC port each)"),
    Param("gpus_per_server", int, 8, "GPUs per server = rails = leaves per segment"),
    Param("segments", int, 0, "segments (scalable units); 0 = as few as the radix allows (1 without radix)"),
    Param("spines", int, 0, "two-tier spine count; 0 = one per leaf uplink"),
    Param("oversubscription", float, 1.0, "leaf downlink:uplink capacity ratio"),
    Param("gpu_gbps", float, 400.0, "bandwidth per GPU = every port's rate"),
    Param("radix", int, 0, "switch port budget; 0 = exactly the ports a two-tier build uses"),
    Param("tiers", str, "auto", "auto = two tiers when a spine can hold every leaf, else three", ("auto", "2", "3")),
    Param("copper", str, "none", "cable medium rule: none = all fibre, nic-leaf = NIC->leaf links copper",
          ("none", "nic-leaf")),
)


def _resolve(given: dict) -> dict:
    p = {prm.name: given.get(prm.name, prm.default) for prm in PARAMS}
    require(p["gpus"] is not None, "roft", "parameter gpus is required, e.g. roft:gpus=16,gpus_per_server=4")
    gpus, s = p["gpus"], p["gpus_per_server"]
    require(s >= 1, "roft", f"gpus_per_server must be >= 1 (got {s})")
    require(gpus >= 2 * s and gpus % s == 0, "roft", f"gpus={gpus} must be a multiple of gpus_per_server={s}, "
            "with at least 2 servers")
    require(p["oversubscription"] >= 1.0, "roft", "oversubscription must be >= 1 (1 = non-blocking)")
    require(p["gpu_gbps"] > 0, "roft", "gpu_gbps must be positive")
    servers = gpus // s
    radix, ratio = p["radix"], p["oversubscription"]
    segments = p["segments"]
    if not segments:
        if radix:
            d_max = int(radix * ratio // (1 + ratio))
            require(d_max >= 1, "roft", f"radix {radix} too small for one downlink")
            segments = math.ceil(servers / d_max)
        else:
            segments = 1
    require(servers % segments == 0, "roft",
            f"{servers} servers do not split into {segments} equal segments; give segments= explicitly")
    d = servers // segments
    u = d / ratio
    require(u.is_integer() and u >= 1, "roft", f"{d} downlinks per leaf / oversubscription {ratio} "
            "is not a whole number of uplinks")
    u = int(u)
    p.update(segments=segments, servers_per_segment=d, uplinks_per_leaf=u, leaves=segments * s)
    return p


def build(given: dict):
    p = _resolve(given)
    leaves, d, u, s = p["leaves"], p["servers_per_segment"], p["uplinks_per_leaf"], p["gpus_per_server"]
    radix = p["radix"]
    spines = p["spines"] or _default_spines(leaves, u, radix)
    require(u % spines == 0, "roft", f"{u} uplinks per leaf do not split evenly over spines={spines}")
    lps = u // spines
    spine_ports = leaves * lps
    tiers = p["tiers"]
    if tiers == "auto":
        tiers = "2" if not radix or spine_ports <= radix else "3"
    if tiers == "2":
        radix = radix or max(d + u, spine_ports)
        require(d + u <= radix, "roft", f"port budget exceeded: leaf needs {d}+{u} ports > radix {radix}")
        require(spine_ports <= radix, "roft", f"port budget exceeded: spine needs {spine_ports} ports > radix "
                f"{radix} (use tiers=auto or 3)")
        p.update(tiers=2, spines=spines, radix=radix)
        return _build_two_tier(p, lps)
    require(radix > 0, "roft", "three tiers need an explicit radix")
    p.update(tiers=3, spines=0)
    return _build_three_tier(p)


def _default_spines(leaves: int, u: int, radix: int) -> int:
    """One spine per leaf uplink; with a radix, as few spines as fill their ports exactly."""
    if radix and (leaves * u) % radix == 0:
        k = leaves * u // radix
        if k >= 1 and u % k == 0:
            return k
    return u


def _gpus(b: FabricBuilder, p: dict, rate: int):
    s, d = p["gpus_per_server"], p["servers_per_segment"]
    for g in range(p["gpus"]):
        server = g // s
        b.gpu(g, server=server, local_rank=g % s, roles=("nic",), rate_bps=rate,
              segment=server // d, rail=g % s)


def _leaves(b: FabricBuilder, p: dict, radix: int, rate: int, up: int):
    """Create leaves with ports 1..d (down, per server) and d+1..d+up (up); cable the NICs."""
    s, d = p["gpus_per_server"], p["servers_per_segment"]
    medium = "copper" if p["copper"] == "nic-leaf" else "fibre"
    leaf_nodes, leaf_ports = [], {}
    for seg in range(p["segments"]):
        for r in range(s):
            sw = b.switch("leaf", 1, r, radix, segment=seg, rail=r)
            leaf_nodes.append(sw)
            for num in range(1, d + up + 1):
                leaf_ports[(sw, num)] = b.switch_port(sw, num, "down" if num <= d else "up", rate)
    for g in range(p["gpus"]):
        server = g // s
        seg, t = divmod(server, d)
        b.link(g, leaf_ports[(leaf_nodes[seg * s + g % s], t + 1)], rate, "nic", medium)
    return leaf_nodes, leaf_ports


def _build_two_tier(p: dict, lps: int):
    rate = gbps_to_bps(p["gpu_gbps"])
    radix, d, u = p["radix"], p["servers_per_segment"], p["uplinks_per_leaf"]
    b = FabricBuilder("roft")
    _gpus(b, p, rate)
    leaf_nodes, leaf_ports = _leaves(b, p, radix, rate, u)
    spine_nodes = [b.switch("spine", 2, k, radix) for k in range(p["spines"])]
    spine_ports = {}
    for sw in spine_nodes:
        for num in range(1, len(leaf_nodes) * lps + 1):
            spine_ports[(sw, num)] = b.switch_port(sw, num, "down", rate)
    for li, leaf in enumerate(leaf_nodes):
        for k, spine in enumerate(spine_nodes):
            for l in range(lps):
                b.link(leaf_ports[(leaf, d + 1 + k * lps + l)], spine_ports[(spine, li * lps + l + 1)],
                       rate, "fabric", "fibre")
    return b.finish(canonical_spec(KIND, p), dict(p, links_per_leaf_spine=lps, pods=1))


def _build_three_tier(p: dict):
    rate = gbps_to_bps(p["gpu_gbps"])
    radix, d, u, leaves = p["radix"], p["servers_per_segment"], p["uplinks_per_leaf"], p["leaves"]
    half = radix // 2
    require(d + u <= radix, "roft", f"port budget exceeded: leaf needs {d}+{u} ports > radix {radix}")
    require(u <= half, "roft", f"{u} leaf uplinks exceed the {half} aggregation switches a pod can have")
    per_pod = min(half, leaves)
    require(leaves % per_pod == 0, "roft", f"{leaves} leaves do not fill pods of {per_pod}")
    pods = leaves // per_pod
    agg_up = per_pod  # aggregation is non-blocking: as many uplinks as leaves below it
    total_up = pods * u * agg_up
    require(total_up % radix == 0, "roft", f"{total_up} aggregation uplinks do not fill whole cores of radix {radix}")
    cores = total_up // radix
    require(cores % u == 0, "roft", f"{cores} cores do not split into {u} planes")
    per_plane = cores // u
    require(agg_up % per_plane == 0 and radix % pods == 0, "roft",
            f"aggregation uplinks ({agg_up}) or core ports ({radix}) do not divide evenly "
            f"({pods} pods, {per_plane} cores per plane)")
    links_agg_core = agg_up // per_plane
    if links_agg_core * pods != radix:
        raise SpecError(f"roft: core wiring does not close ({links_agg_core} x {pods} pods != radix {radix})")
    b = FabricBuilder("roft")
    _gpus(b, p, rate)
    leaf_nodes, leaf_ports = _leaves(b, p, radix, rate, u)
    agg_nodes, agg_ports = [], {}
    for pod in range(pods):
        for j in range(u):
            sw = b.switch("agg", 2, pod * u + j, radix, pod=pod, rail=j)
            agg_nodes.append(sw)
            for num in range(1, per_pod + agg_up + 1):
                agg_ports[(sw, num)] = b.switch_port(sw, num, "down" if num <= per_pod else "up", rate)
    core_nodes, core_ports = [], {}
    for c in range(cores):
        sw = b.switch("core", 3, c, radix, rail=c // per_plane)
        core_nodes.append(sw)
        for num in range(1, radix + 1):
            core_ports[(sw, num)] = b.switch_port(sw, num, "down", rate)
    for li, leaf in enumerate(leaf_nodes):
        pod, local = divmod(li, per_pod)
        for j in range(u):
            b.link(leaf_ports[(leaf, d + 1 + j)], agg_ports[(agg_nodes[pod * u + j], local + 1)],
                   rate, "fabric", "fibre")
    for pod in range(pods):
        for j in range(u):
            agg = agg_nodes[pod * u + j]
            for c in range(per_plane):
                core = core_nodes[j * per_plane + c]
                for l in range(links_agg_core):
                    b.link(agg_ports[(agg, per_pod + 1 + c * links_agg_core + l)],
                           core_ports[(core, pod * links_agg_core + l + 1)], rate, "fabric", "fibre")
    return b.finish(canonical_spec(KIND, p), dict(p, pods=pods, leaves_per_pod=per_pod, cores=cores,
                                                  links_agg_core=links_agg_core))


KIND = FabricKind("roft", "rail-optimized fat-tree: rail leaves per segment, spines (or agg+core at scale)",
                  PARAMS, build)
register(KIND)
