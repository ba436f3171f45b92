"""Benchmark: the flow-level engine's wall time and peak memory on KV-transfer schedules at 64,
1,024 and 16,384 GPUs (ZCube and ROFT).

Schedule: every prefill GPU (first half of the servers) sends `--rounds` transfers of `--mb` MB
to its rank-shifted decode GPU, starts spread uniformly over `--window-ms` (seeded): the
concurrency of a busy P/D cluster. Run: .venv/bin/python scripts/bench/flowsim.py [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from testbed.fabric import build_fabric  # noqa: E402
from testbed.flowsim.engine import FlowEngine, run_transfers  # noqa: E402
from testbed.flowsim.schedule import kv_completion_ms, kv_schedule  # noqa: E402

FABRICS = {
    64: ("zcube:n=8,gpus_per_server=8", "roft:gpus=64,gpus_per_server=8"),
    1024: ("zcube:n=32,gpus_per_server=8", "roft:gpus=1024,gpus_per_server=8,radix=32,tiers=3"),
    16384: ("zcube:n=128,gpus_per_server=8", "roft:gpus=16384,gpus_per_server=8,radix=128,tiers=3"),
}


def bench(spec: str, rounds: int, size_bytes: int, window_ns: int, seed: int) -> dict:
    t0 = time.perf_counter()
    fab = build_fabric(spec)
    eng = FlowEngine(fab)
    sched = kv_schedule(fab, "rank-shifted", rounds, size_bytes, window_ns, seed)
    t1 = time.perf_counter()
    done = dict(run_transfers(eng, sched.transfers))
    t2 = time.perf_counter()
    fct_ms = kv_completion_ms(sched, done)
    return {
        "spec": spec,
        "gpus": fab.n_gpus,
        "kv_transfers": len(sched.parts),
        "flows": len(sched.transfers),
        "build_s": round(t1 - t0, 2),
        "run_s": round(t2 - t1, 2),
        "rate_solves": eng.net.rate_solves,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "fct_p50_ms": round(float(np.percentile(fct_ms, 50)), 3),
        "fct_p99_ms": round(float(np.percentile(fct_ms, 99)), 3),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64,1024", help="GPU counts to run, from 64,1024,16384 (default 64,1024)")
    ap.add_argument("--rounds", type=int, default=2, help="transfers per prefill GPU (default 2)")
    ap.add_argument("--mb", type=float, default=100.0, help="transfer size in MB (default 100)")
    ap.add_argument("--window-ms", type=float, default=20.0, help="starts spread over this window (default 20 ms)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")]
    if any(s not in FABRICS for s in sizes) or a.rounds < 1 or a.mb <= 0 or a.window_ms <= 0:
        print(f"flowsim bench: sizes from {sorted(FABRICS)}, rounds >= 1, mb > 0, window-ms > 0", file=sys.stderr)
        return 2
    rows = []
    for n in sizes:
        for spec in FABRICS[n]:
            r = bench(spec, a.rounds, int(a.mb * 1e6), int(a.window_ms * 1e6), a.seed)
            rows.append(r)
            if not a.json:
                print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
