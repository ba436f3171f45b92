"""Benchmark: `zlab capacity`'s search on the flow engine at 1,024 GPUs (ZCube and ROFT): wall time,
peak memory, and the capacity each fabric's search found.

Serving settings as in the 32-GPU experiment (glm-4.5, tp=8, the built-in spec otherwise); the spec's
instance counts do not scale with the fabric, so every GPU serves: GPUs / tp / 2 P and as many D
instances. Each fabric's search runs in a child process of its own (its peak RSS is its own), through
capacity.search, the code path of `zlab capacity --network flow`. The interval is the search's last
bracket: the highest load that met the SLOs and the lowest above it that did not (repeat 0).

--jobs N instead runs every fabric's search in one capacity.search call with N worker processes
(`zlab capacity --jobs N`'s path) and reports the total wall time, this process's peak RSS and each
worker's (VmHWM sampled from /proc while they live; RUSAGE_CHILDREN's ru_maxrss, the largest child's,
as a check), their sum an upper bound of the memory the run held at once.
Run: .venv/bin/python scripts/bench/capacity_1024.py [--repeats 1 --iterations 7] [--jobs N] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FABRICS = {
    64: {"zcube": "zcube:n=8,gpus_per_server=8", "roft": "roft:gpus=64,gpus_per_server=8"},
    1024: {"zcube": "zcube:n=32,gpus_per_server=8", "roft": "roft:gpus=1024,gpus_per_server=8,radix=32,tiers=3"},
}
TP = 8
SLO_S = {"ttft": 2.0, "tpot": 0.2}  # `zlab capacity`'s defaults


def settings(gpus: int) -> list[str]:
    """The spec overrides: the 32-GPU experiment's serving settings, every GPU in a P or D instance."""
    inst = gpus // TP // 2
    return [
        f"deployment.tp={TP}",
        "workload.model=glm-4.5",
        f"deployment.prefill_instances={inst}",
        f"deployment.decode_instances={inst}",
        *(f"fabrics.{label}={spec}" for label, spec in FABRICS[gpus].items()),
    ]


def flow_engine(_name: str, sc, solver: str):
    """The flow engine with the chosen max-min solver; module level, so a worker process can unpickle it."""
    from testbed.flowsim.engine import FlowEngine

    return FlowEngine(sc.fabric, solver=solver)


def _options(sp: dict, a, jobs: int = 1):
    from testbed.serving import capacity

    w = sp["workload"]
    return capacity.Options(
        ("flow",), "h100", SLO_S, a.rate_min, a.rate_max, a.iterations, a.repeats, w["requests"],
        w["start_index"], sp["seed"], a.window_slos, jobs,
    )  # fmt: skip


def _row(sp: dict, sc, label: str, a, doc: dict, keep_points: bool) -> dict:
    """What one fabric's search found (its runs in doc), as a row of the benchmark's output."""
    runs = [r for r in doc["runs"] if r["fabric"] == label]
    run0 = runs[0]
    above = [p["rate_per_gpu"] for p in run0["points"] if p["rate_per_gpu"] > run0["capacity_per_gpu_rps"]]
    c = doc["summaries"][0]["capacity_per_gpu_rps"][label]
    return {
        "spec": sp["fabrics"][label],
        "gpus": sc.n_gpus,
        "solver": a.solver,
        "repeats": a.repeats,
        "points": sum(len(r["points"]) for r in runs),
        "requests": sum(p["requests"] for r in runs for p in r["points"]),
        "capacity": round(c["mean"], 4),
        "ci95": None if c["ci95"] is None else round(c["ci95"], 4),
        "interval": [round(run0["capacity_per_gpu_rps"], 4), round(min(above), 4) if above else None],
        "bound": run0["bound"],
        "capacities": [r["capacity_per_gpu_rps"] for r in runs],
        **({"runs": runs} if keep_points else {}),
    }


def _peak_rss_mb(pid: int) -> int | None:
    """A live process's peak RSS (VmHWM), MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024)
    except OSError:
        return None
    return None


def parallel(gpus: int, labels: list[str], a) -> dict:
    """Every fabric's search in one capacity.search call with a.jobs workers: what it cost, what it found."""
    from testbed.experiment import spec as especs
    from testbed.serving import capacity, setup

    peaks: dict[int, int] = {}  # worker pid -> its VmHWM, last seen
    stop = threading.Event()

    def sample() -> None:
        me = os.getpid()
        while not stop.wait(0.5):
            try:
                kids = Path(f"/proc/{me}/task/{me}/children").read_text().split()
            except OSError:
                continue
            for pid in map(int, kids):
                if (mb := _peak_rss_mb(pid)) is not None:
                    peaks[pid] = max(peaks.get(pid, 0), mb)

    sampler = threading.Thread(target=sample, daemon=True)
    t0 = time.perf_counter()
    sp = especs.load(None, settings(gpus))
    scenarios = {label: setup.scenario(sp, label, "h100") for label in labels}
    sampler.start()
    doc = capacity.search(
        scenarios,
        _options(sp, a, a.jobs),
        progress=None if a.json else lambda line: print(f"[bench] {line}", file=sys.stderr, flush=True),
        make_engine=functools.partial(flow_engine, solver=a.solver),
    )
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    return {
        "jobs": a.jobs,
        "wall_s": round(wall, 1),
        "parent_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "largest_child_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
        "child_peak_rss_mb": sorted(peaks.values(), reverse=True),
        "fabrics": [_row(sp, scenarios[label], label, a, doc, False) for label in labels],
    }


def search(gpus: int, label: str, a, keep_points: bool = False) -> dict:
    """One fabric's capacity search, in this process; what it cost and what it found (with every
    evaluated point's metrics under "runs" if keep_points)."""
    from testbed.experiment import spec as especs
    from testbed.serving import capacity, setup

    t0 = time.perf_counter()
    sp = especs.load(None, settings(gpus))
    sc = setup.scenario(sp, label, "h100")
    doc = capacity.search({label: sc}, _options(sp, a), make_engine=functools.partial(flow_engine, solver=a.solver))
    wall = time.perf_counter() - t0
    row = _row(sp, sc, label, a, doc, keep_points)
    return {
        **{k: row[k] for k in ("spec", "gpus", "solver", "repeats", "points", "requests")},
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        **{k: v for k, v in row.items() if k not in ("spec", "gpus", "solver", "repeats", "points", "requests")},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=1024, choices=sorted(FABRICS), help="fabric size (default 1024)")
    ap.add_argument("--fabrics", default="zcube,roft", help="labels to run (default zcube,roft)")
    ap.add_argument("--repeats", type=int, default=1, help="seeds per fabric (default 1)")
    ap.add_argument("--iterations", type=int, default=7, help="bisection steps (default 7, as zlab capacity)")
    ap.add_argument("--rate-min", type=float, default=0.02)
    ap.add_argument("--rate-max", type=float, default=4.0)
    ap.add_argument("--window-slos", type=float, default=20.0)
    ap.add_argument("--solver", default="incremental", choices=("incremental", "global"), help="max-min re-solve")
    ap.add_argument("--jobs", type=int, help="every fabric in one capacity.search with this many workers")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # run one fabric here and print its JSON line
    ap.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    a = ap.parse_args(argv)
    labels = a.fabrics.split(",")
    if (
        any(x not in FABRICS[a.gpus] for x in labels)
        or a.repeats < 1
        or a.iterations < 1
        or (a.jobs is not None and a.jobs < 1)
    ):
        print(
            f"capacity bench: fabrics from {sorted(FABRICS[a.gpus])}, repeats, iterations and jobs >= 1",
            file=sys.stderr,
        )
        return 2
    if a.jobs:
        r = parallel(a.gpus, labels, a)
        if a.json:
            print(json.dumps(r, indent=1))
            return 0
        for row in r.pop("fabrics"):
            print(" ".join(f"{k}={v}".replace(", ", ",") for k, v in row.items() if k != "capacities"), flush=True)
        print(" ".join(f"{k}={v}".replace(", ", ",") for k, v in r.items()), flush=True)
        return 0
    if a.child:
        print(json.dumps(search(a.gpus, a.child, a)))
        return 0
    rows = []
    for label in labels:
        keys = ("gpus", "repeats", "iterations", "rate_min", "rate_max", "window_slos", "solver")
        cmd = [sys.executable, __file__, "--child", label, *(f"--{k.replace('_', '-')}={a.__dict__[k]}" for k in keys)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append(r)
        if not a.json:
            r = {k: v for k, v in r.items() if k != "capacities"}
            print(" ".join(f"{k}={v}".replace(", ", ",") for k, v in r.items()), flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
