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
    jobs: int = 1  # worker processes for the bisections (search(); 1: in this process)
    retakes: int = 0  # a live engine's void point is simulated again, same seed, up to this many times


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


def bisection(
    sc,
    opts: Options,
    engine: str,
    label: str,
    k: int,
    index: int = 0,
    total: int = 1,
    progress: Callable[[str], None] | None = None,
    make_engine: Callable | None = None,
) -> dict:
    """One (engine, fabric, repeat) bisection: capacity.json's entry under "runs".

    Top level and given only picklable pieces (a setup.Scenario, Options, names, ints; make_engine a
    module-level callable) so that search() can run it in a worker process; index is its place among
    search()'s `total` tasks, for progress lines."""
    from . import engines, metrics, model

    make_engine = make_engine or engines.make_engine
    seed = opts.seed + k
    points: list[dict] = []

    def simulate(rate: float, n_req: int):
        """One simulation at this load: its result and the engine's fidelity (None: not a live engine)."""
        reqs = sc.requests(rate, n_req, opts.start_index, seed)
        eng = make_engine(engine, sc)
        try:
            res = model.simulate(reqs, sc.deployment, sc.compute, sc.compute, eng, sc.flow_planner(seed), sc.scheduler)
        finally:  # an engine with a child process (ns3) or a live agent stops it now, also on failure
            if hasattr(eng, "close"):
                eng.close()
        fid = eng.fidelity() if hasattr(eng, "fidelity") else None
        return res, fid

    def passes(rate: float) -> bool:
        n_req = requests_for(opts, rate, sc.n_gpus)
        retaken: list[dict] = []  # the void attempts' fidelity, in order (the point says it was retaken)
        while True:
            res, fid = simulate(rate, n_req)
            if fid is None or not fid["void"] or len(retaken) >= opts.retakes:
                break
            retaken.append(fid)
            if progress:
                progress(
                    f"{_task_name(opts, engine, label, k, index, total)}: {rate:.4g} req/s/GPU void "
                    f"(worst lag {fid['worst_lag_wall_ms']:.3g} ms wall): retake {len(retaken)}/{opts.retakes}"
                )
        m = metrics.summarise(res, sc.n_gpus, opts.slo_s)
        if fid is not None:  # a live engine: a point whose model fell behind the wall is void
            m["fidelity"] = {**fid, "retaken": retaken}
        m["rate_per_gpu"] = rate
        m["requests"] = n_req
        if k == 0:  # one repeat's occupancy over time is enough to look at
            m["occupancy_series"] = metrics.occupancy_series(res)
        points.append(m)
        if progress:
            progress(
                f"{_task_name(opts, engine, label, k, index, total)}: "
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
    return {
        "engine": engine,
        "fabric": label,
        "repeat": k,
        "seed": seed,
        "capacity_per_gpu_rps": s.capacity,
        "bound": s.bound,
        "ttft_p99_at_capacity_s": at["ttft_s"]["p99"] if at else None,
        "void_points": sum(1 for p in points if p.get("fidelity", {}).get("void")),
        "retaken_points": sum(1 for p in points if p.get("fidelity", {}).get("retaken")),
        "points": points,
    }


def _task_name(opts: Options, engine: str, label: str, k: int, index: int, total: int) -> str:
    return f"{engine} {label} repeat {k + 1}/{opts.repeats} ({index + 1}/{total})"


def search(
    scenarios: dict,
    opts: Options,
    progress: Callable[[str], None] | None = None,
    make_engine: Callable | None = None,
) -> dict:
    """Every (engine, fabric, repeat) bisected; the document `zlab capacity` writes as capacity.json.
    make_engine(name, scenario): a fresh engine per simulation (default engines.make_engine; the
    CLI passes one that also builds the live emulation's).

    opts.jobs > 1 runs the bisections in that many worker processes (_parallel); the document is the
    same as with one job, its runs in the same order."""
    from . import engines

    tasks = [(engine, label, k) for engine in opts.engines for label in scenarios for k in range(opts.repeats)]
    if opts.jobs < 1:
        raise ValueError(f"jobs must be >= 1 (got {opts.jobs})")
    if opts.jobs > 1 and any(e in engines.LIVE for e in opts.engines):
        raise ValueError("a live engine shares one fabric and needs the CPU to itself: it runs with jobs=1")
    if opts.jobs == 1:
        series = [
            bisection(scenarios[label], opts, engine, label, k, i, len(tasks), progress, make_engine)
            for i, (engine, label, k) in enumerate(tasks)
        ]
    else:
        series = _parallel(scenarios, opts, tasks, progress, make_engine)
    summaries: list[dict] = []  # one per engine
    for engine in opts.engines:
        caps: dict[str, list[float]] = {}
        for r in series:
            if r["engine"] == engine:
                caps.setdefault(r["fabric"], []).append(r["capacity_per_gpu_rps"])
        summary = summarise(caps, list(scenarios))
        summary["ttft_p99_at_capacity_s"] = {
            label: ci95([r["ttft_p99_at_capacity_s"] for r in series if r["engine"] == engine and r["fabric"] == label])
            for label in scenarios
        }
        runs = [r for r in series if r["engine"] == engine]
        summary["void_points"] = sum(r["void_points"] for r in runs)  # still void after the retakes
        summary["valid"] = summary["void_points"] == 0  # fail closed: a void point may have flipped a verdict
        summaries.append({"engine": engine, **summary})
    return {"runs": series, "summaries": summaries}


_worker_queue = None  # in a worker process: where its progress lines go (_init_worker)


def _init_worker(queue) -> None:
    """A worker's start: progress lines to the parent's queue; Ctrl-C is the parent's to handle (it
    stops the workers), so a worker does not print a traceback of its own."""
    import signal

    global _worker_queue
    _worker_queue = queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_progress(line: str) -> None:
    _worker_queue.put(line)


def _task(sc, opts: Options, engine: str, label: str, k: int, index: int, total: int, make_engine, talk: bool):
    return bisection(sc, opts, engine, label, k, index, total, _worker_progress if talk else None, make_engine)


def _parallel(scenarios: dict, opts: Options, tasks: list, progress, make_engine) -> list[dict]:
    """The bisections in opts.jobs worker processes, assembled in the tasks' order (the sequential one).

    Why processes: a bisection is pure Python on one core (the GIL rules threads out), and the
    bisections are independent: each task gets its scenario and options pickled, builds its engines
    itself, and returns its run entry; its points are evaluated in the same order as in one process, so
    the document does not depend on jobs. Each worker holds its own fabric model and engine (memory
    grows with jobs). Why "spawn": a worker starts from a fresh interpreter, not a copy of the parent,
    so it inherits no threads, locks or open pipes (an engine's child process, a progress thread) that
    fork would copy in whatever state they were; the import it costs is small against a bisection.
    Progress: each worker's lines come through a SimpleQueue (written synchronously, so a task's lines
    are in the pipe before its result), and the parent prints one line per finished bisection."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()

    def drain() -> None:
        while not queue.empty():
            line = queue.get()
            if progress:
                progress(line)

    total = len(tasks)
    ex = ProcessPoolExecutor(min(opts.jobs, total), mp_context=ctx, initializer=_init_worker, initargs=(queue,))
    try:
        futures = {
            ex.submit(_task, scenarios[label], opts, engine, label, k, i, total, make_engine, progress is not None): i
            for i, (engine, label, k) in enumerate(tasks)
        }
        results: list[dict | None] = [None] * total
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            drain()
            for f in sorted(finished, key=futures.get):
                i = futures[f]
                r = results[i] = f.result()
                if progress:
                    engine, label, k = tasks[i]
                    progress(
                        f"{_task_name(opts, engine, label, k, i, total)} done: capacity "
                        f"{r['capacity_per_gpu_rps']:.4g} req/s/GPU ({r['bound']}, {len(r['points'])} points)"
                    )
    except BaseException:  # a failed task or Ctrl-C: the others stop now, not when they finish
        for proc in list((getattr(ex, "_processes", None) or {}).values()):
            proc.terminate()
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    ex.shutdown(wait=True)
    drain()
    return results
