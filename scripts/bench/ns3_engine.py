#!/usr/bin/env python3
"""Engine ns3 benchmark (not a test; no root; needs provision.sh --referee): wall seconds per real
GB of traffic when `zlab run --engine ns3` runs the default spec's fabric pair, with 1 repeat and
with N repeats run in parallel (one ns-3 process per fabric and repeat, up to the cores).

Why: ns-3 at real scale moves every real 4 KB packet, so its cost grows with the bytes a repeat
carries (~110 real GB per repeat of the default spec); this says what a run costs and whether the
parallel repeats use the cores. "CPU-s per GB" is the CPU time the ns-3 processes used (each is
single-threaded, from getrusage of the children) per real GB; the goal is <= 1. The last row runs
RoCE's congestion machinery (lossless PFC + ECN + DCQCN, no window), which adds per-frame buffer
accounting, marking and rate limiting. The load average before each row says whether the machine
was idle. Run it under `flock /tmp/zlab-heavy.lock`.

    .venv/bin/python scripts/bench/ns3_engine.py [--requests 10] [--repeats N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from testbed.experiment import ns3engine  # noqa: E402
from testbed.experiment import spec as especs  # noqa: E402
from testbed.experiment.resolve import resolve  # noqa: E402
from testbed.records import read_json  # noqa: E402

LOSSLESS = [
    "congestion.pfc_enabled=true",
    "congestion.ecn_enabled=true",
    "congestion.cc=dcqcn",
    "congestion.window_pkts=0",
]


def measure(requests: int, repeats: int, congestion: bool = False) -> dict:
    """One engine-ns3 run of the default spec (its fabric pair) with `requests` requests and
    `repeats` repeats; its wall time, the real bytes it moved, the ns-3 processes' own walls and
    the CPU time they used."""
    sets = [f"workload.requests={requests}", f"repeats={repeats}", "engine=ns3", *(LOSSLESS if congestion else [])]
    spec = especs.load(None, sets)
    exp = resolve(spec)
    real_gb = sum(m.real_bytes for fr in exp.fabrics.values() for rep in fr.repeats for m in rep.messages) / 1e9
    load1 = os.getloadavg()[0]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.monotonic()
        root, status = ns3engine.run_experiment(exp, results_dir=tmp, log=lambda *_: None, show_progress=False)
        wall = time.monotonic() - t
        ns3_walls = [w for label in exp.fabrics for w in read_json(root / label / "run.json")["ns3_wall_s"]]
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    jobs = len(ns3_walls)
    return {
        "requests": requests,
        "repeats": repeats,
        "congestion": congestion,
        "load1_before": load1,
        "fabrics": list(exp.fabrics),
        "ns3_processes": jobs,
        "in_parallel": min(jobs, os.cpu_count() or 1),
        "status": status,
        "real_gb": real_gb,
        "wall_s": wall,
        "wall_s_per_real_gb": wall / real_gb,
        "process_s_per_real_gb": sum(ns3_walls) / real_gb,
        "cpu_s_per_real_gb": cpu_s / real_gb,
        "ns3_wall_s": ns3_walls,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10, help="requests of the default trace (default 10)")
    ap.add_argument("--repeats", type=int, default=os.cpu_count() or 1, help="N for the parallel case (default: cores)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.requests < 1 or a.repeats < 1:
        print("ns3_engine: --requests and --repeats must be >= 1", file=sys.stderr)
        return 2
    rows = [measure(a.requests, 1), measure(a.requests, a.repeats), measure(a.requests, a.repeats, congestion=True)]
    if a.json:
        print(json.dumps({"cores": os.cpu_count(), "runs": rows}, indent=1))
        return 0
    print(f"cores {os.cpu_count()}; default spec's fabrics {', '.join(rows[0]['fabrics'])}, {a.requests} requests")
    print(
        "transport                 repeats  ns-3 processes (parallel)  load before  real GB  wall s  "
        "wall s / real GB  CPU-s / real GB  status"
    )
    for r in rows:
        mode = "lossless + ECN + DCQCN" if r["congestion"] else "default (64-pkt window)"
        print(
            f"{mode:<24}  {r['repeats']:>7}  {r['ns3_processes']:>14} ({r['in_parallel']})  {r['load1_before']:>11.2f}  "
            f"{r['real_gb']:>7.1f}  {r['wall_s']:>6.1f}  {r['wall_s_per_real_gb']:>16.2f}  "
            f"{r['cpu_s_per_real_gb']:>15.2f}  {r['status']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
