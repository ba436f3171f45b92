"""Rail-optimized fat-tree (ROFT): rail leaves per segment, spines, and a third tier at scale.

A segment holds `servers_per_segment` servers; local GPU rank r of each of them connects to
leaf r of that segment. Two tiers: every leaf has an equal share of uplinks to every spine.
Three tiers (pods of radix/2 leaves, aggregation, core) when the spine radix cannot hold
every leaf — which reproduces the published 1,024- and 16,384-GPU inventories. Everything
ROFT-specific lives here: generator, rail-local + ECMP tables, diameter, drawing hints.
"""

from __future__ import annotations

import math

import numpy as np

from . import ids
from .builder import FabricBuilder, gbps_to_bps
from .kind import FabricKind
from .model import Fabric
from .params import Param, SpecError, canonical_spec, require, resolve_params
from .tables import GroupIndex, Tables, port_peer, ports_between

NAME = "roft"
# the kind's switch groups (dpid code, name format, drawing colour); one NIC port per GPU: plane 0
GROUPS = (
    ids.SwitchGroup("leaf", 0x1, "l{segment}r{index}", "#fdae6b"),
    ids.SwitchGroup("spine", 0x2, "sp{index}", "#bcbddc"),
    ids.SwitchGroup("agg", 0x3, "ag{index}", "#a1d99b"),
    ids.SwitchGroup("core", 0x4, "co{index}", "#bcbddc"),
)

PARAMS = (
    Param("gpus", int, None, "total GPUs (one 1xR NIC port each)"),
    Param("gpus_per_server", int, 8, "GPUs per server = rails = leaves per segment"),
    Param("segments", int, 0, "segments (scalable units); 0 = as few as the radix allows (1 without radix)"),
    Param("spines", int, 0, "two-tier spine count; 0 = one per leaf uplink"),
    Param("oversubscription", float, 1.0, "leaf downlink:uplink capacity ratio"),
    Param("gpu_gbps", float, 400.0, "bandwidth per GPU = every port's rate"),
    Param("radix", int, 0, "switch port budget; 0 = exactly the ports a two-tier build uses"),
    Param("tiers", str, "auto", "auto = two tiers when a spine can hold every leaf, else three", ("auto", "2", "3")),
    Param(
        "copper",
        str,
        "none",
        "cable medium rule: none = all fibre, nic-leaf = NIC->leaf links copper",
        ("none", "nic-leaf"),
    ),
)


def _resolve(given: dict) -> dict:
    p = resolve_params(NAME, PARAMS, given)
    require(p["gpus"] is not None, NAME, "parameter gpus is required, e.g. roft:gpus=16,gpus_per_server=4")
    gpus, s = p["gpus"], p["gpus_per_server"]
    require(gpus <= ids.MAX_GPUS, NAME, f"gpus={gpus} exceeds the address plan's {ids.MAX_GPUS} GPUs")
    require(s >= 1, NAME, f"gpus_per_server must be >= 1 (got {s})")
    require(
        gpus >= 2 * s and gpus % s == 0,
        NAME,
        f"gpus={gpus} must be a multiple of gpus_per_server={s}, with at least 2 servers",
    )
    require(p["oversubscription"] >= 1.0, NAME, "oversubscription must be >= 1 (1 = non-blocking)")
    require(p["gpu_gbps"] > 0, NAME, "gpu_gbps must be positive")
    servers = gpus // s
    radix, ratio = p["radix"], p["oversubscription"]
    segments = p["segments"]
    if not segments:
        if radix:
            d_max = int(radix * ratio // (1 + ratio))
            require(d_max >= 1, NAME, f"radix {radix} too small for one downlink")
            segments = math.ceil(servers / d_max)
        else:
            segments = 1
    require(
        servers % segments == 0,
        NAME,
        f"{servers} servers do not split into {segments} equal segments; give segments= explicitly",
    )
    d = servers // segments
    u = d / ratio
    require(
        u.is_integer() and u >= 1,
        NAME,
        f"{d} downlinks per leaf / oversubscription {ratio} is not a whole number of uplinks",
    )
    u = int(u)
    p.update(segments=segments, servers_per_segment=d, uplinks_per_leaf=u, leaves=segments * s)
    return p


def build(given: dict):
    p = _resolve(given)
    leaves, d, u = p["leaves"], p["servers_per_segment"], p["uplinks_per_leaf"]
    radix = p["radix"]
    spines = p["spines"] or _default_spines(leaves, u, radix)
    require(u % spines == 0, NAME, f"{u} uplinks per leaf do not split evenly over spines={spines}")
    lps = u // spines
    spine_ports = leaves * lps
    tiers = p["tiers"]
    if tiers == "auto":
        tiers = "2" if not radix or spine_ports <= radix else "3"
    if tiers == "2":
        radix = radix or max(d + u, spine_ports)
        require(d + u <= radix, NAME, f"port budget exceeded: leaf needs {d}+{u} ports > radix {radix}")
        require(
            spine_ports <= radix,
            NAME,
            f"port budget exceeded: spine needs {spine_ports} ports > radix {radix} (use tiers=auto or 3)",
        )
        p.update(tiers=2, spines=spines, radix=radix)
        return _build_two_tier(p, lps)
    require(radix > 0, NAME, "three tiers need an explicit radix")
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
        b.gpu(g, server=server, local_rank=g % s, roles=("nic",), rate_bps=rate, segment=server // d, rail=g % s)


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
    b = FabricBuilder(NAME, GROUPS)
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
                b.link(
                    leaf_ports[(leaf, d + 1 + k * lps + l)],
                    spine_ports[(spine, li * lps + l + 1)],
                    rate,
                    "fabric",
                    "fibre",
                )
    return b.finish(canonical_spec(NAME, PARAMS, p), dict(p, links_per_leaf_spine=lps, pods=1))


def _build_three_tier(p: dict):
    rate = gbps_to_bps(p["gpu_gbps"])
    radix, d, u, leaves = p["radix"], p["servers_per_segment"], p["uplinks_per_leaf"], p["leaves"]
    half = radix // 2
    require(d + u <= radix, NAME, f"port budget exceeded: leaf needs {d}+{u} ports > radix {radix}")
    require(u <= half, NAME, f"{u} leaf uplinks exceed the {half} aggregation switches a pod can have")
    per_pod = min(half, leaves)
    require(leaves % per_pod == 0, NAME, f"{leaves} leaves do not fill pods of {per_pod}")
    pods = leaves // per_pod
    agg_up = per_pod  # aggregation is non-blocking: as many uplinks as leaves below it
    total_up = pods * u * agg_up
    require(total_up % radix == 0, NAME, f"{total_up} aggregation uplinks do not fill whole cores of radix {radix}")
    cores = total_up // radix
    require(cores % u == 0, NAME, f"{cores} cores do not split into {u} planes")
    per_plane = cores // u
    require(
        agg_up % per_plane == 0 and radix % pods == 0,
        NAME,
        f"aggregation uplinks ({agg_up}) or core ports ({radix}) do not divide evenly "
        f"({pods} pods, {per_plane} cores per plane)",
    )
    links_agg_core = agg_up // per_plane
    if links_agg_core * pods != radix:
        raise SpecError(f"roft: core wiring does not close ({links_agg_core} x {pods} pods != radix {radix})")
    b = FabricBuilder(NAME, GROUPS)
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
            b.link(
                leaf_ports[(leaf, d + 1 + j)], agg_ports[(agg_nodes[pod * u + j], local + 1)], rate, "fabric", "fibre"
            )
    for pod in range(pods):
        for j in range(u):
            agg = agg_nodes[pod * u + j]
            for c in range(per_plane):
                core = core_nodes[j * per_plane + c]
                for l in range(links_agg_core):
                    b.link(
                        agg_ports[(agg, per_pod + 1 + c * links_agg_core + l)],
                        core_ports[(core, pod * links_agg_core + l + 1)],
                        rate,
                        "fabric",
                        "fibre",
                    )
    return b.finish(
        canonical_spec(NAME, PARAMS, p),
        dict(p, pods=pods, leaves_per_pod=per_pod, cores=cores, links_agg_core=links_agg_core),
    )


def tables(fab: Fabric) -> Tables:
    """Leaves deliver their rail's GPUs and send the rest up (ECMP); upper tiers send each
    address down toward its leaf (ECMP over parallel links), or up (ECMP) if not below."""
    N = fab.n_gpus
    peer = port_peer(fab)
    between = ports_between(fab)
    rows = {sw.id: r for r, sw in enumerate(fab.switches)}
    ng = np.full((len(fab.switches), N), -1, dtype=np.int64)
    group = GroupIndex(fab)

    g = np.arange(N)
    leaf_of = fab.port_node[peer[g]]  # GPU -> its leaf node id
    order = np.argsort(leaf_of, kind="stable")
    cuts = np.searchsorted(leaf_of[order], np.unique(leaf_of))
    gpus_below = dict(zip(np.unique(leaf_of).tolist(), np.split(order, cuts[1:])))
    neighbours: dict[int, set[int]] = {}
    up_ports: dict[int, list[int]] = {}
    for (x, y), ps in between.items():
        neighbours.setdefault(x, set()).add(y)
        if fab.nodes[y].tier > fab.nodes[x].tier:
            up_ports.setdefault(x, []).extend(ps)
    by_number = lambda p: fab.ports[p].number  # noqa: E731
    leaves = [sw for sw in fab.switches if sw.group == "leaf"]
    for sw in fab.switches:
        r = rows[sw.id]
        if sw.id in up_ports:  # not below: up, ECMP over every uplink
            ng[r, :] = group(sorted(up_ports[sw.id], key=by_number))
        if sw.group == "leaf":
            local = gpus_below[sw.id]
            ng[r, local] = peer[local]
        elif sw.tier == 2:  # spine, or aggregation inside its pod: down toward the GPU's leaf
            for leaf in neighbours[sw.id]:
                if fab.nodes[leaf].group == "leaf":
                    ng[r, gpus_below[leaf]] = group(between[(sw.id, leaf)])
        else:  # core: down toward the aggregation switch of the GPU's pod in this core's plane
            for leaf in leaves:
                aggs = neighbours[leaf.id] & neighbours[sw.id]
                if aggs:
                    (agg,) = aggs
                    ng[r, gpus_below[leaf.id]] = group(between[(sw.id, agg)])
    return Tables(fab, ng, group.multi)


def expected_diameter(fab: Fabric) -> int:
    """Leaf -> spine -> leaf (two tiers); leaf -> agg -> core -> agg -> leaf (three)."""
    return {2: 3, 3: 5}[int(fab.params["tiers"])]


KIND = FabricKind(
    NAME,
    "rail-optimized fat-tree: rail leaves per segment, spines (or agg+core at scale)",
    PARAMS,
    build=build,
    tables=tables,
    expected_diameter=expected_diameter,
    switch_groups=GROUPS,
    row_labels={0: "GPUs", 1: "leaf", 2: "spine/agg", 3: "core"},
    # ECMP member removal: withdrawal (failures.py) drops dead next hops from every group
    repair_policies=("ecmp",),
)
