"""Benchmark and oracle: the flow-level engine against SimGrid on the same KV schedule and routes.

Why: issue 26 asks whether SimGrid (Debian's python3-simgrid 3.32, flow models validated against
packet-level simulation) can carry zlab's per-QP routes at 1,024 GPUs within the capacity search's
time, and an engine written by others is the best check of testbed/flowsim. This script answers
both: it replays one schedule (scripts/bench/flowsim.py's: rank-shifted KV transfers) in the numpy
engine and in SimGrid, flow by flow, and prints the time, the memory and the largest completion gap.

How SimGrid is given zlab's routes: its routes are per pair of hosts, zlab's per QP (the UDP source
port picks the ECMP member), so every transfer gets its own pair of virtual hosts ("p3#17" sends to
"p9#17") and an explicit route over the directed links the tables give. Sharing is pure max-min:
CM02 with no cross traffic, no TCP window bound (gamma 0) and links without latency, as the numpy
engine. SimGrid runs in Debian's system Python (the .venv cannot import it), in a child process that
reads a JSON scenario and is pure Python.

    .venv/bin/python scripts/bench/flowsim_simgrid.py [--sizes 64,1024] [--rounds 2] [--mb 100]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"


def peak_mib() -> float:
    """This process's own peak resident memory (VmHWM), in MiB."""
    for line in open("/proc/self/status", encoding="ascii"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(path: str) -> None:
    """Run in the system Python: replay the scenario in SimGrid, print one JSON line."""
    import simgrid as sg

    sc = json.load(open(path, encoding="utf-8"))
    t0 = time.perf_counter()
    e = sg.Engine(
        [
            "flowsim-simgrid",
            "--cfg=network/model:CM02",
            "--cfg=network/crosstraffic:0",
            "--cfg=network/TCP-gamma:0",
            "--log=root.thres:critical",
        ]
    )
    zone = sg.NetZone.create_full_zone("fabric")
    links = {int(k): zone.create_link(f"l{k}", bps / 8.0).set_latency(0).seal() for k, bps in sc["links"].items()}
    flows = []
    for f in sc["flows"]:
        src = zone.create_host(f"{f['src']}#{f['id']}", 1e9).seal()
        dst = zone.create_host(f"{f['dst']}#{f['id']}", 1e9).seal()
        route = [sg.LinkInRoute(links[k]) for k in f["links"]]
        zone.add_route(src.netpoint, dst.netpoint, None, None, route, False)
        flows.append((f, src, dst))
    zone.seal()
    done = {}

    def sender(f, src, dst):
        sg.this_actor.sleep_until(f["t_ns"] / 1e9)
        sg.Comm.sendto(src, dst, int(f["bytes"]))
        done[f["id"]] = e.clock

    for f, src, dst in flows:
        sg.Actor.create(f"f{f['id']}", src, sender, f, src, dst)
    t1 = time.perf_counter()
    e.run()
    t2 = time.perf_counter()
    print(
        json.dumps(
            {
                "build_s": t1 - t0,
                "run_s": t2 - t1,
                "peak_mib": peak_mib(),
                "t_done_ns": {str(k): v * 1e9 for k, v in done.items()},
            }
        )
    )


def compare(spec: str, rounds: int, size_bytes: int, window_ns: int, seed: int) -> dict:
    """One fabric: the numpy engine's replay, then SimGrid's on the same flows and routes."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from testbed.fabric import build_fabric
    from testbed.flowsim.engine import FlowEngine, run_transfers
    from testbed.flowsim.schedule import kv_schedule

    fab = build_fabric(spec)
    eng = FlowEngine(fab)
    sched = kv_schedule(fab, "rank-shifted", rounds, size_bytes, window_ns, seed)
    t0 = time.perf_counter()
    done = dict(run_transfers(eng, sched.transfers))
    numpy_s = time.perf_counter() - t0
    used = sorted({lk for r in eng.routes.values() for lk in r})
    rate = [float(x) for x in eng.net.capacity_bps]  # directed link id -> bit/s
    scenario = {
        "links": {str(lk): rate[lk] for lk in used},
        "flows": [
            {"id": fid, "src": src, "dst": dst, "t_ns": t, "bytes": size, "links": list(eng.routes[fid])}
            for t, fid, src, dst, size, _ in sched.transfers
        ],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(scenario, fh)
    try:
        out = subprocess.run(
            [SYSTEM_PYTHON, __file__, "--child", fh.name], capture_output=True, text=True, check=True, timeout=3600
        )
    finally:
        Path(fh.name).unlink()
    sg = json.loads(out.stdout.strip().splitlines()[-1])
    # each gap relative to that transfer's own duration
    gaps = [
        abs(sg["t_done_ns"][str(fid)] - done[fid]) / max(done[fid] - start, 1) for start, fid, *_ in sched.transfers
    ]
    return {
        "spec": spec,
        "gpus": fab.n_gpus,
        "flows": len(sched.transfers),
        "numpy_run_s": round(numpy_s, 2),
        "numpy_peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "simgrid_build_s": round(sg["build_s"], 2),
        "simgrid_run_s": round(sg["run_s"], 2),
        "simgrid_peak_mib": round(sg["peak_mib"]),
        "max_gap_pct": round(100 * max(gaps), 4),
    }


def main(argv=None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from flowsim import FABRICS  # the same fabrics as the engine's own benchmark (scripts/bench/flowsim.py)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64,1024", help="GPU counts, from 64,1024 (default 64,1024)")
    ap.add_argument("--rounds", type=int, default=2, help="transfers per prefill GPU (default 2)")
    ap.add_argument("--mb", type=float, default=100.0, help="transfer size in MB (default 100)")
    ap.add_argument("--window-ms", type=float, default=20.0, help="starts spread over this window (default 20 ms)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")]
    if any(s not in (64, 1024) for s in sizes) or a.rounds < 1 or a.mb <= 0 or a.window_ms <= 0:
        print("flowsim_simgrid: sizes from 64,1024; rounds >= 1; mb > 0; window-ms > 0", file=sys.stderr)
        return 2
    cols = "spec gpus flows numpy_run_s simgrid_build_s simgrid_run_s simgrid_peak_mib max_gap_pct".split()
    print(" ".join(f"{c:>16}" if c != "spec" else f"{c:<50}" for c in cols))
    for n in sizes:
        for spec in FABRICS[n]:
            r = compare(spec, a.rounds, int(a.mb * 1e6), int(a.window_ms * 1e6), a.seed)
            print(" ".join(f"{r[c]:>16}" if c != "spec" else f"{r[c]:<50}" for c in cols), flush=True)
    print("max_gap_pct: the largest |SimGrid - numpy| completion gap, as a share of that transfer's duration")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        raise SystemExit(main())
