"""Multi-plane ZCube: P independent ZCube(n,2) planes, for clusters beyond one plane's n*n GPUs.

Why a composite and not one flat Fabric: the planes are identical and share no switch or cable,
so one plane model serves all P (memory stays that of one plane at 128k GPUs), and the
estimator runs plane by plane on the traffic each plane receives.

Two assignment rules (spec `zcube-planes:planes=P,n=N,gpus_per_server=S,assign=...`):

* `assign=rank` — GPU local rank r of every server joins plane r mod P (P must divide S); a plane
  is ZCube(n,2) over S/P GPUs per server, so P planes hold P*n*n GPUs. Traffic between planes
  takes a host-side relay: the sender hands the data over the server's scale-up link (NVLink) to
  its peer GPU in the destination's plane (rank (r // P) * P + plane(dst)), which sends it in
  that plane (PXN-style). No inter-plane fabric links exist; the relayed bytes are reported.
* `assign=nic` — every GPU has P dual-port NICs and NIC k joins plane k; every plane is a
  ZCube(n,2) over all n*n GPUs at 1/P of the GPU's bandwidth (a 512-port 100G switch gives
  ZCube(256,2) = 65,536 GPUs per plane); the host sprays each transfer evenly over the planes.

Explicit inter-plane links (switch-to-switch between planes) are not modelled: with them a
pair in different planes would lose ZCube's unique two-switch path.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .cost import inventory
from .kinds import build_fabric
from .load import PATTERNS, Traffic, estimate, pattern
from .model import Fabric
from .params import SpecError
from .validate import validate

KIND = "zcube-planes"
ASSIGNMENTS = ("rank", "nic")
PARAMS = {"planes": int, "n": int, "gpus_per_server": int, "gpu_gbps": float, "assign": str}
DEFAULTS = {"gpus_per_server": 8, "gpu_gbps": 400.0, "assign": "rank"}


@dataclass(frozen=True)
class MultiPlane:
    spec: str
    planes: int
    n: int
    gpus_per_server: int
    gpu_gbps: float
    assign: str
    plane: Fabric  # the one plane model every plane instantiates

    @property
    def n_gpus(self) -> int:
        return self.planes * self.plane.n_gpus if self.assign == "rank" else self.plane.n_gpus

    @property
    def n_servers(self) -> int:
        return self.n_gpus // self.gpus_per_server

    def plane_of(self, gpu: np.ndarray) -> np.ndarray:
        """rank assignment: the plane of each global GPU id."""
        return (gpu % self.gpus_per_server) % self.planes

    def plane_index(self, gpu: np.ndarray) -> np.ndarray:
        """rank assignment: a GPU's index inside its plane (servers keep their order)."""
        per = self.gpus_per_server // self.planes
        return (gpu // self.gpus_per_server) * per + (gpu % self.gpus_per_server) // self.planes

    def relay_gpu(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """rank assignment: the GPU on the source's server in the destination's plane."""
        s = self.gpus_per_server
        rank = src % s
        return (src // s) * s + (rank // self.planes) * self.planes + self.plane_of(dst)

    def counts(self) -> dict:
        c = self.plane.counts()
        mult = self.planes
        return {
            "planes": self.planes,
            "gpus": self.n_gpus,
            "switches": mult * c["switches"],
            "nic_links": mult * c["nic_links"],
            "fabric_links": mult * c["fabric_links"],
            "cables": mult * c["cables"],
            "nic_ports_per_gpu": 2 * self.planes if self.assign == "nic" else 2,
        }


def parse(spec: str) -> dict:
    name, _, rest = spec.strip().partition(":")
    if name != KIND:
        raise SpecError(
            f"not a multi-plane spec: {spec!r}; expected {KIND}:planes=P,n=N[,gpus_per_server=S,"
            f"gpu_gbps=G,assign=rank|nic]"
        )
    given = dict(DEFAULTS)
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, raw = item.partition("=")
        if not eq or key not in PARAMS:
            raise SpecError(f"{KIND}: {item!r}: parameters are {', '.join(PARAMS)}")
        try:
            given[key] = PARAMS[key](raw)
        except ValueError:
            raise SpecError(f"{KIND}: {key}={raw!r} is not a {PARAMS[key].__name__}") from None
    missing = [k for k in PARAMS if k not in given]
    if missing:
        raise SpecError(f"{KIND}: missing {', '.join(missing)} (e.g. {KIND}:planes=4,n=128)")
    if given["assign"] not in ASSIGNMENTS:
        raise SpecError(f"{KIND}: assign={given['assign']!r}; valid: {', '.join(ASSIGNMENTS)}")
    if given["planes"] < 1:
        raise SpecError(f"{KIND}: planes must be >= 1")
    if given["assign"] == "rank" and given["gpus_per_server"] % given["planes"]:
        raise SpecError(
            f"{KIND}: assign=rank needs planes ({given['planes']}) to divide gpus_per_server "
            f"({given['gpus_per_server']}): every server needs a GPU in every plane for the relay"
        )
    return given


def build(spec: str) -> MultiPlane:
    p = parse(spec)
    P, s = p["planes"], p["gpus_per_server"]
    if p["assign"] == "rank":
        plane_spec = f"zcube:n={p['n']},gpus_per_server={s // P},gpu_gbps={p['gpu_gbps']:g}"
    else:
        plane_spec = f"zcube:n={p['n']},gpus_per_server={s},gpu_gbps={p['gpu_gbps'] / P:g}"
    plane = build_fabric(plane_spec)
    canon = f"{KIND}:planes={P},n={p['n']},gpus_per_server={s},gpu_gbps={p['gpu_gbps']:g},assign={p['assign']}"
    return MultiPlane(canon, P, p["n"], s, p["gpu_gbps"], p["assign"], plane)


def validate_planes(mp: MultiPlane) -> dict:
    """The plane model's own validation, the count identities across planes, and reachability
    of every GPU pair (in-plane, or through a relay GPU that exists on every server)."""
    rep = validate(mp.plane)
    checks = {f"plane: {k}": v for k, v in rep.checks.items()}
    pc = mp.plane.counts()  # the built plane's counts against the formulas
    P, n = mp.planes, mp.n
    for label, got, want in (
        ("plane GPUs = n^2", pc["gpus"], n * n),
        ("plane switches = 2n", pc["switches"], 2 * n),
        ("plane cables = 3n^2", pc["cables"], 3 * n * n),
        (
            "plane GPUs per server",
            int(mp.plane.params["gpus_per_server"]),
            mp.gpus_per_server // P if mp.assign == "rank" else mp.gpus_per_server,
        ),
    ):
        checks[label] = "ok" if got == want else f"{got} != {want}"
    if mp.assign == "rank":
        # every (server, rank) has a relay peer in every plane, and the peer is in that plane
        g = np.arange(mp.n_gpus)
        bad = 0
        for q in range(P):
            dst_in_q = np.full(g.size, q)  # any GPU of plane q: rank q
            relay = mp.relay_gpu(g, dst_in_q)
            bad += int(
                ((relay // mp.gpus_per_server) != (g // mp.gpus_per_server)).sum() + (mp.plane_of(relay) != q).sum()
            )
        plane_ids = mp.plane_index(g)
        per_plane = [np.sort(plane_ids[mp.plane_of(g) == q]) for q in range(P)]
        onto = all(np.array_equal(x, np.arange(mp.plane.n_gpus)) for x in per_plane)
        checks["every GPU pair reachable (in plane, or via a same-server relay)"] = (
            "ok" if bad == 0 and onto and rep.ok else f"{bad} relays leave their server or plane; planes onto: {onto}"
        )
    else:
        checks["every GPU pair reachable (in every plane)"] = "ok" if rep.ok else "plane validation failed"
    ok = all(v == "ok" for v in checks.values())
    return {
        "ok": ok,
        "checks": checks,
        "diameter_switches": rep.diameter_switches,
        "max_scale_up_hops": 1 if (mp.assign == "rank" and P > 1) else 0,
    }


def estimate_planes(mp: MultiPlane, name: str, fraction: float = 1.0, seed: int = 0) -> dict:
    """A named pattern over the whole cluster, split into per-plane traffic, estimated plane by
    plane; max-min rates of a transfer are summed over the planes it uses."""
    if name not in PATTERNS or name == "all-to-all":
        raise SpecError(f"multi-plane patterns: {', '.join(p for p in PATTERNS if p != 'all-to-all')}")
    view = SimpleNamespace(n_gpus=mp.n_gpus, params={"gpus_per_server": mp.gpus_per_server, "gpu_gbps": mp.gpu_gbps})
    tr = pattern(view, name, fraction=fraction, seed=seed)
    rates = np.zeros(len(tr))
    worst_util, p99s, relayed = 0.0, [], 0.0
    for q in range(mp.planes):
        if mp.assign == "rank":
            sender = np.where(mp.plane_of(tr.src) == mp.plane_of(tr.dst), tr.src, mp.relay_gpu(tr.src, tr.dst))
            mine = np.flatnonzero(mp.plane_of(tr.dst) == q)
            src, dst = mp.plane_index(sender[mine]), mp.plane_index(tr.dst[mine])
            demand = tr.demand_bps[mine]
            if q == 0:
                relayed = float(tr.demand_bps[sender != tr.src].sum() / tr.demand_bps.sum())
        else:
            mine = np.arange(len(tr))
            src, dst, demand = tr.src, tr.dst, tr.demand_bps / mp.planes
        if mine.size == 0:
            continue
        res = estimate(mp.plane, Traffic(f"{name}@plane{q}", src, dst, demand), seed=seed + 1000 * q)
        rates[mine] += res.flow_rate_bps
        worst_util = max(worst_util, float(res.util.max()))
        loaded = res.util[res.util > 0]
        p99s.append(float(np.percentile(loaded, 99)) if loaded.size else 0.0)
    achieved = rates / tr.demand_bps
    return {
        "pattern": name,
        "transfers": len(tr),
        "max_link_util": worst_util,
        "p99_link_util_max_plane": max(p99s),
        "relayed_fraction_of_bytes": relayed,
        "maxmin_min_fraction_of_demand": float(achieved.min()),
        "aggregate_throughput_fraction": float(rates.sum() / tr.demand_bps.sum()),
    }


def inventory_planes(mp: MultiPlane) -> dict:
    inv = inventory(mp.plane)
    P = mp.planes
    return {
        "switches": P * inv["switches"],
        "switch_models": [{**m, "count": P * m["count"]} for m in inv["switch_models"]],
        "cables": P * inv["cables"],
        "transceivers": P * inv["transceivers"],
        "switch_tbps_per_gpu": P * inv["switch_tbps_per_gpu"] * mp.plane.n_gpus / mp.n_gpus,
        "optics_tbps_per_gpu": P * inv["optics_tbps_per_gpu"] * mp.plane.n_gpus / mp.n_gpus,
    }


def run(spec: str, patterns: list[str], fraction: float = 1.0, seeds: int = 1) -> dict:
    """Build, validate, estimate and cost, with the wall time and peak memory each step took."""
    t0 = time.perf_counter()
    mp = build(spec)
    t_build = time.perf_counter() - t0
    val = validate_planes(mp)
    t_val = time.perf_counter() - t0 - t_build
    loads = {}
    t1 = time.perf_counter()
    for name in patterns:
        draws = [estimate_planes(mp, name, fraction, seed) for seed in range(seeds)]
        loads[name] = {k: ([d[k] for d in draws] if isinstance(draws[0][k], float) else draws[0][k]) for k in draws[0]}
    t_load = time.perf_counter() - t1
    return {
        "spec": mp.spec,
        "plane_spec": mp.plane.spec,
        "counts": mp.counts(),
        "validation": val,
        "inventory": inventory_planes(mp),
        "loads": loads,
        "build_s": t_build,
        "validate_s": t_val,
        "load_s": t_load,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gpus_per_plane": mp.plane.n_gpus,
        "plane_switch_radix": mp.plane.switches[0].radix,
        "plane_port_gbps": mp.plane.gpu_port(0, 0).rate_bps / 1e9,
    }
