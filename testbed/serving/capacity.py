"""Capacity at an SLO: the highest offered per-GPU request rate that still meets DistServe's goodput.

Why bisection per repeat: DistServe and Vidur both bisect the rate; a repeat (its own seed: its
arrivals, rank mapping draws and QP source ports) gives one capacity, and the spread over repeats is
the confidence interval -- the same "repeats are draws" rule as the rest of zlab. The search assumes
attainment falls with load; the two ends are checked first, so a range that never passes (capacity
below it) or always passes (capacity at least its top) is reported as such, not bisected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..measure.stats import ci95


@dataclass
class Search:
    capacity: float  # highest passing rate found (0.0 when even the lowest fails)
    bound: str  # "found" | "below-range" | "at-least-max"
    points: list[tuple[float, bool]] = field(default_factory=list)  # (rate, passed) in evaluation order


def bisect(passes: Callable[[float], bool], lo: float, hi: float, iterations: int) -> Search:
    """Highest rate in [lo, hi] for which passes(rate) holds, to (hi - lo) / 2**iterations."""
    if not 0 < lo < hi:
        raise ValueError(f"the load range must satisfy 0 < min < max (got {lo:g}..{hi:g})")
    s = Search(0.0, "found")

    def check(rate: float) -> bool:
        ok = passes(rate)
        s.points.append((rate, ok))
        return ok

    if not check(lo):
        s.bound = "below-range"
        return s
    if check(hi):
        s.capacity, s.bound = hi, "at-least-max"
        return s
    good, bad = lo, hi
    for _ in range(iterations):
        mid = (good + bad) / 2
        if check(mid):
            good = mid
        else:
            bad = mid
    s.capacity = good
    return s


def summarise(capacities: dict[str, list[float]], order: list[str]) -> dict:
    """Mean +- 95 % CI of each fabric's capacity over repeats, and the paired ratio of the first
    fabric to the second (per repeat: same seed, same arrivals)."""
    out = {"capacity_per_gpu_rps": {label: ci95(capacities[label]) for label in order}}
    if len(order) >= 2:
        a, b = capacities[order[0]], capacities[order[1]]
        ratios = [x / y for x, y in zip(a, b) if y > 0]
        out["ratio"] = {"of": f"{order[0]}/{order[1]}", **ci95(ratios)}
    return out


@dataclass(frozen=True)
class Options:
    """What a capacity search needs besides the spec (flags of `zlab capacity`)."""

    engines: tuple[str, ...]
    gpu: str
    slo_s: dict  # metric (metrics.SLO_METRICS) -> seconds
    rate_min: float  # offered requests/s per serving GPU
    rate_max: float
    iterations: int
    repeats: int
    requests: int  # the fewest requests a simulation gets
    start_index: int
    seed: int
    window_slos: float = 20.0  # each load's arrivals span at least this many TTFT SLOs


def requests_for(opts: Options, rate_per_gpu: float, n_gpus: int) -> int:
    """Requests one simulation at this load needs so that an overloaded load fails.

    Why: a run starts empty, so a load above capacity by a fraction d builds a queue only at d x the
    arrival rate; its 90th-percentile TTFT reaches about 0.9 x window x d. With a fixed request
    count a short window passes loads far above what the service sustains (measured: 150 requests
    on 32 GPUs passed 3.7 req/s/GPU where 2,400 requests give 1.6). Arrivals spanning W TTFT SLOs
    fail every overload above about 1 / (0.9 W): 5.6 % at the default W = 20.
    """
    need = math.ceil(opts.window_slos * opts.slo_s["ttft"] * rate_per_gpu * n_gpus)
    return max(opts.requests, need)


def overload_resolution(opts: Options) -> float:
    """The smallest overload (fraction above capacity) a window of opts.window_slos TTFT SLOs fails."""
    return 1.0 / (0.9 * opts.window_slos)


def search(
    scenarios: dict,
    opts: Options,
    progress: Callable[[str], None] | None = None,
    make_engine: Callable | None = None,
) -> dict:
    """Every (engine, fabric, repeat) bisected; the document `zlab capacity` writes as capacity.json.
    make_engine(name, scenario): a fresh engine per simulation (default engines.make_engine; the
    CLI passes one that also builds the live emulation's)."""
    from . import engines, metrics, model

    make_engine = make_engine or engines.make_engine

    series: list[dict] = []  # one per (engine, fabric, repeat)
    summaries: list[dict] = []  # one per engine
    total = len(opts.engines) * len(scenarios) * opts.repeats
    done = 0
    for engine in opts.engines:
        caps: dict[str, list[float]] = {}
        for label, sc in scenarios.items():
            for k in range(opts.repeats):
                seed = opts.seed + k
                points: list[dict] = []

                def passes(
                    rate: float, sc=sc, seed=seed, points=points, k=k, label=label, engine=engine, n=done
                ) -> bool:
                    n_req = requests_for(opts, rate, sc.n_gpus)
                    reqs = sc.requests(rate, n_req, opts.start_index, seed)
                    eng = make_engine(engine, sc)
                    try:
                        res = model.simulate(
                            reqs, sc.deployment, sc.compute, sc.compute, eng, sc.flow_planner(seed), sc.scheduler
                        )
                    finally:  # an engine with a child process (ns3) or a live agent stops it now, also on failure
                        if hasattr(eng, "close"):
                            eng.close()
                    m = metrics.summarise(res, sc.n_gpus, opts.slo_s)
                    fid = eng.fidelity() if hasattr(eng, "fidelity") else None
                    if fid is not None:  # a live engine: a point whose model fell behind the wall is void
                        m["fidelity"] = fid
                    m["rate_per_gpu"] = rate
                    m["requests"] = n_req
                    if k == 0:  # one repeat's occupancy over time is enough to look at
                        m["occupancy_series"] = metrics.occupancy_series(res)
                    points.append(m)
                    if progress:
                        progress(
                            f"{engine} {label} repeat {k + 1}/{opts.repeats} ({n + 1}/{total}): "
                            f"{rate:.4g} req/s/GPU, {n_req} requests: "
                            f"{'meets' if m['meets_slo'] else 'misses'} the SLOs"
                            + (
                                f" (worst lag {fid['worst_lag_wall_ms']:.3g} ms wall{', VOID' if fid['void'] else ''})"
                                if fid
                                else ""
                            )
                        )
                    return m["meets_slo"]

                s = bisect(passes, opts.rate_min, opts.rate_max, opts.iterations)
                at = next((p for p in points if p["rate_per_gpu"] == s.capacity), None)
                caps.setdefault(label, []).append(s.capacity)
                series.append(
                    {
                        "engine": engine,
                        "fabric": label,
                        "repeat": k,
                        "seed": seed,
                        "capacity_per_gpu_rps": s.capacity,
                        "bound": s.bound,
                        "ttft_p99_at_capacity_s": at["ttft_s"]["p99"] if at else None,
                        "void_points": sum(1 for p in points if p.get("fidelity", {}).get("void")),
                        "points": points,
                    }
                )
                done += 1
        summary = summarise(caps, list(scenarios))
        summary["ttft_p99_at_capacity_s"] = {
            label: ci95([r["ttft_p99_at_capacity_s"] for r in series if r["engine"] == engine and r["fabric"] == label])
            for label in scenarios
        }
        summaries.append({"engine": engine, **summary})
    return {"runs": series, "summaries": summaries}
