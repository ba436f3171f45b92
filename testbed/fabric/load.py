"""Flow-level load estimator: traffic patterns -> per-link load, utilisation, max-min rates.

Why: it predicts what the emulation should show (and what the end-to-end tests assert) at
sizes no emulator reaches — ZCube(128,2) and a 16,384-GPU ROFT — in seconds, because flows
are routed by walking the same forwarding tables the controller installs, vectorised.

Patterns follow PD disaggregation: the first half of the servers prefill, the second half
decode; prefill server i sends to decode server i.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np

from ..errors import UserInputError
from .model import Fabric
from .paths import dst_address, split_fractions, src_port_id, walk

PATTERNS = ("rail-aligned", "rank-shifted", "random", "incast", "all-to-all")
MAX_ALL_TO_ALL_GPUS = 1024  # N*(N-1) flows; above this the matrix alone is too large


class PatternError(UserInputError):
    """A traffic pattern or matrix that cannot be used, with what is allowed."""


@dataclass
class Traffic:
    """A traffic matrix as flows: source GPU, destination GPU, offered demand (bit/s)."""

    name: str
    src: np.ndarray
    dst: np.ndarray
    demand_bps: np.ndarray

    def __len__(self) -> int:
        return int(self.src.size)


def per_gpu_bps(fab: Fabric) -> float:
    return float(fab.params["gpu_gbps"]) * 1e9


def pattern(fab: Fabric, name: str, fraction: float = 1.0, seed: int = 0, fan_in: int = 4) -> Traffic:
    """Named pattern; every sender offers `fraction` of its per-GPU bandwidth."""
    if name not in PATTERNS:
        raise PatternError(f"unknown pattern {name!r}; valid patterns: {', '.join(PATTERNS)}")
    if not 0 < fraction:
        raise PatternError(f"fraction must be > 0 (got {fraction})")
    N = fab.n_gpus
    s = int(fab.params["gpus_per_server"])
    servers = N // s
    if servers < 2:
        raise PatternError("patterns need at least 2 servers")
    half = servers // 2
    g = np.arange(half * s)  # prefill GPUs
    server, rank = g // s, g % s
    rate = per_gpu_bps(fab) * fraction
    if name == "rail-aligned":
        src, dst = g, (server + half) * s + rank
    elif name == "rank-shifted":
        src, dst = g, (server + half) * s + (rank + 1) % s
    elif name == "random":
        rng = np.random.default_rng(seed)
        src, dst = g, half * s + rng.permutation(half * s)
    elif name == "incast":
        if fan_in < 1 or fan_in > g.size:
            raise PatternError(f"fan_in must be between 1 and {g.size} (got {fan_in})")
        src = g[: (g.size // fan_in) * fan_in]
        dst = half * s + src // fan_in
    else:  # all-to-all
        if N > MAX_ALL_TO_ALL_GPUS:
            raise PatternError(
                f"all-to-all on {N} GPUs is {N * (N - 1):,} flows; the estimator caps it at {MAX_ALL_TO_ALL_GPUS} GPUs"
            )
        a, b = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
        keep = a != b
        src, dst = a[keep], b[keep]
        rate = rate / (N - 1)
    return Traffic(name, np.asarray(src), np.asarray(dst), np.full(np.asarray(src).size, rate))


def from_file(fab: Fabric, path: str) -> Traffic:
    """CSV with header src_gpu,dst_gpu,demand_gbps (GPU index or name like g12)."""
    src, dst, dem = [], [], []
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise PatternError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PatternError(f"{path}: not a UTF-8 text (CSV) file") from None
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"src_gpu", "dst_gpu", "demand_gbps"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise PatternError(f"{path}: header must contain {', '.join(sorted(need))}; got {reader.fieldnames}")
        for line, row in enumerate(reader, start=2):
            try:
                s, d = _gpu_ref(fab, row["src_gpu"]), _gpu_ref(fab, row["dst_gpu"])
                v = float(row["demand_gbps"])
                if v <= 0 or s == d:
                    raise ValueError("demand must be > 0 and src != dst")
            except (ValueError, KeyError) as exc:
                raise PatternError(f"{path}:{line}: {exc}") from None
            src.append(s), dst.append(d), dem.append(v * 1e9)
    if not src:
        raise PatternError(f"{path}: no flows")
    return Traffic(path, np.array(src), np.array(dst), np.array(dem))


def _gpu_ref(fab: Fabric, ref: str) -> int:
    ref = ref.strip()
    if ref in fab.node_by_name and fab.node_by_name[ref].role == "gpu":
        return fab.node_by_name[ref].id
    i = int(ref)
    if not 0 <= i < fab.n_gpus:
        raise ValueError(f"GPU {i} out of range 0..{fab.n_gpus - 1}")
    return i


@dataclass
class LoadResult:
    load_bps: np.ndarray  # per directed link
    util: np.ndarray  # per directed link
    flow_rate_bps: np.ndarray  # max-min fair rate per transfer (sum of its subflows)
    demand_bps: np.ndarray
    subflows: int
    lost_subflows: int = 0  # degraded fabrics: subflows with no path left (rate 0)
    lost_transfers: int = 0  # transfers none of whose subflows has a path
    failed_over_subflows: int = 0  # moved to the GPU's other port (host-side failover)

    def summary(self, fab: Fabric) -> dict:
        loaded = self.util[self.util > 0]
        worst = int(np.argmax(self.util))
        link = fab.links[worst // 2]
        a, b = (link.a, link.b) if worst % 2 == 0 else (link.b, link.a)
        achieved = self.flow_rate_bps / self.demand_bps
        return {
            "transfers": int(self.demand_bps.size),
            "subflows": self.subflows,
            "max_link_util": float(self.util.max()),
            "p99_link_util": float(np.percentile(loaded, 99)) if loaded.size else 0.0,
            "mean_loaded_link_util": float(loaded.mean()) if loaded.size else 0.0,
            "loaded_directed_links": int(loaded.size),
            "hottest_link": f"{fab.ports[a].name} -> {fab.ports[b].name}",
            "maxmin_min_fraction_of_demand": float(achieved.min()),
            "maxmin_p50_fraction_of_demand": float(np.median(achieved)),
            "maxmin_mean_fraction_of_demand": float(achieved.mean()),
            "aggregate_throughput_fraction": float(self.flow_rate_bps.sum() / self.demand_bps.sum()),
            "lost_transfers": self.lost_transfers,
            "lost_subflows": self.lost_subflows,
            "failed_over_subflows": self.failed_over_subflows,
        }


def estimate(fab: Fabric, traffic: Traffic, split: str | None = None, seed: int = 0, degraded=None) -> LoadResult:
    """Route every transfer (split over ports per policy), add its demand to each directed
    link on its path, and compute max-min fair rates. UDP source ports (ECMP entropy) are
    drawn per subflow from `seed`, as a RoCE NIC draws one per QP.

    degraded: a failures.Degraded — walk its tables; a subflow without a path moves to the GPU's
    other port when its policy fails over (else, and if that has none either, it is lost: rate 0).
    Without it an unroutable flow is a bug and raises."""
    rng = np.random.default_rng(seed + 1)
    parts = split_fractions(fab, split)
    tables = degraded.tables if degraded is not None else None
    L2 = 2 * len(fab.links)
    load = np.zeros(L2)
    sub_links, sub_demand, owner = [], [], []
    lost_sub = moved = 0
    delivered = np.zeros(traffic.src.size, dtype=bool)
    for role, frac in parts:
        sp = src_port_id(fab, traffic.src, role)
        da = dst_address(fab, traffic.src, role, traffic.dst)
        sport = rng.integers(49152, 65536, size=sp.size)
        w = walk(fab, sp, da, sport, tables=tables)
        bad = w.n_hops < 0
        if degraded is not None:
            bad |= _crosses(w.dlinks, degraded.link_down)  # e.g. the source's own NIC cable is down
        if bad.any() and degraded is None:
            i = int(np.argmax(bad))
            raise RuntimeError(f"flow {traffic.src[i]}->{traffic.dst[i]} is not routable ({w.n_hops[i]})")
        dl, ok = w.dlinks.copy(), ~bad
        if bad.any() and degraded.failover:
            roles = fab.gpu_port_roles
            # the other source port with the address rule; then any source port to any port of the
            # destination (a destination whose rule address is dead is reachable only at its other port)
            tries = [(r, None) for r in roles if r != role] + [(r, q) for r in roles for q in roles]
            for other, dst_role in tries:
                idx = np.nonzero(~ok)[0]
                if idx.size == 0:
                    break
                da2 = (
                    dst_address(fab, traffic.src[idx], other, traffic.dst[idx])
                    if dst_role is None
                    else src_port_id(fab, traffic.dst[idx], dst_role)
                )
                w2 = walk(fab, src_port_id(fab, traffic.src[idx], other), da2, sport[idx], tables=tables)
                good = (w2.n_hops >= 0) & ~_crosses(w2.dlinks, degraded.link_down)
                width = max(dl.shape[1], w2.dlinks.shape[1])
                dl = np.pad(dl, ((0, 0), (0, width - dl.shape[1])), constant_values=-1)
                dl[idx[good]] = np.pad(w2.dlinks[good], ((0, 0), (0, width - w2.dlinks.shape[1])), constant_values=-1)
                ok[idx[good]] = True
                moved += int(good.sum())
        dl[~ok] = -1
        lost_sub += int((~ok).sum())
        delivered |= ok
        d = traffic.demand_bps * frac
        valid = dl >= 0
        np.add.at(load, dl[valid], np.broadcast_to(d[:, None], dl.shape)[valid])
        sub_links.append(dl)
        sub_demand.append(np.where(ok, d, 0.0))
        owner.append(np.arange(traffic.src.size))
    cap = np.repeat(fab.link_rate_bps, 2)
    width = max(x.shape[1] for x in sub_links)
    links = np.vstack([np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=-1) for x in sub_links])
    demand = np.concatenate(sub_demand)
    rates = max_min_fair(links, demand, cap)
    per_transfer = np.bincount(np.concatenate(owner), weights=rates, minlength=traffic.src.size)
    return LoadResult(
        load, load / cap, per_transfer, traffic.demand_bps, int(demand.size), lost_sub, int((~delivered).sum()), moved
    )


def _crosses(dlinks: np.ndarray, link_down: np.ndarray) -> np.ndarray:
    """Per walk: does it use a directed link whose cable is down."""
    valid = dlinks >= 0
    return (valid & link_down[np.where(valid, dlinks, 0) // 2]).any(axis=1)


def max_min_fair(links: np.ndarray, demand: np.ndarray, cap: np.ndarray, eps: float = 1e-9) -> np.ndarray:
    """Progressive filling: raise every unfrozen flow's rate together until a link saturates
    or a flow meets its demand; freeze those flows; repeat. links: (F, H) directed ids, -1 pad."""
    F = demand.size
    rate = np.zeros(F)
    frozen = np.zeros(F, dtype=bool)
    rem = cap.astype(float).copy()
    valid = links >= 0
    safe = np.where(valid, links, 0)
    for _ in range(F + 1):
        live = ~frozen
        if not live.any():
            break
        n = np.bincount(safe[live][valid[live]], minlength=cap.size)
        share = np.where(n > 0, rem / np.maximum(n, 1), np.inf)
        bottleneck = np.where(valid, share[safe], np.inf).min(axis=1)
        inc = np.minimum(bottleneck, demand - rate)
        delta = inc[live].min()
        rate[live] += delta
        rem -= delta * n
        saturated = rem <= eps * cap
        hit = (valid & saturated[safe]).any(axis=1)
        frozen |= live & (hit | (rate >= demand * (1 - 1e-12)))
    return rate
