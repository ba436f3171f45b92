"""Oracle: the flow-level engine against the packet engine (ns-3) on the same 16- and 64-GPU experiments.

Why: the flow engine (testbed/flowsim) is what serving capacity runs on at 1,024 and 16,384 GPUs,
where no packet simulator fits the time goal. Here ns-3 runs an experiment at real scale with
zlab's default transport (no congestion section), and each repeat's schedule as posted (its
raw/rep<k>/schedule.json: source and destination port, UDP source port, real bytes, due time) is
replayed in the flow engine on the same fabric and tables, so both engines move the same
transfers over the same routes, and in the same order: zlab's transport sends one QP's messages
one after another (an RC QP's FIFO), so a message starts when it is due and the one before it on
its QP has completed (measured: without this the flow engine started messages up to 2.7 ms early
that ns-3 held behind their QP's previous message). Each message's bytes on the wire are its payload plus the RoCEv2
headers of its packets (58 B each, 16 more on the first), as ns-3 sends them.

Printed per case and fabric, mean ± 95 % CI over repeats: message completion p50/p99 (due time
to last byte received, real us) and KV completion per request p50/p99 (a request's first due
time to its last message's last byte, real ms), in each engine, and the flow engine's ratio to ns-3.

    .venv/bin/python scripts/bench/flow_ns3.py [--cases 16-rank,64-rank] [--repeats 3] [--requests 40]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from congestion_compare import PAIR_64  # noqa: E402  the same 64-GPU pair
from dcqcn_engines import fmt  # noqa: E402

from testbed.cli import main as zlab  # noqa: E402
from testbed.fabric import build_fabric  # noqa: E402
from testbed.flowsim.engine import FlowEngine, run_qp_ordered  # noqa: E402
from testbed.measure.stats import ci95  # noqa: E402

PAYLOAD, HEADERS, RETH = 4096, 58, 16  # ns-3's packets: path_mtu payload; Eth+IP+UDP+BTH+ICRC; RETH on the first
CASES = {
    "16-rank": ("ZCube(4,2) vs 16-GPU ROFT, rank-shifted", ["deployment.mapping=rank-shifted"]),
    "64-rank": ("ZCube(8,2) vs 64-GPU ROFT, rank-shifted", [*PAIR_64, "deployment.mapping=rank-shifted"]),
}


def wire_bytes(real_bytes: int) -> int:
    return real_bytes + math.ceil(real_bytes / PAYLOAD) * HEADERS + RETH


TRANSPORTS = {
    "default": [],  # zlab's transport: window 64 packets, go-back-N, drop-tail queues
    "lossless": ["congestion.pfc_enabled=true", "congestion.window_pkts=0"],  # no window, PFC, no drops
}


def run_ns3(name: str, repeats: int, requests: int, results: Path, transport: str = "default") -> Path:
    argv = ["run", "--engine", "ns3", "--results", str(results), "--no-progress"]
    for s in [*CASES[name][1], *TRANSPORTS[transport], f"repeats={repeats}", f"workload.requests={requests}"]:
        argv += ["--set", s]
    before = set(results.iterdir())
    if zlab(argv) != 0:
        raise SystemExit(f"{name}: zlab run --engine ns3 failed")
    (root,) = set(results.iterdir()) - before
    return root


def figures(msgs: pd.DataFrame, done_col: str) -> dict:
    """Message p50/p99 (us) and per-request KV p50/p99 (ms) from due and done times in ns."""
    fct = (msgs[done_col] - msgs.t_due_ns) / 1e3
    req = msgs.groupby("req").agg(t0=("t_due_ns", "min"), t1=(done_col, "max"))
    kv = (req.t1 - req.t0) / 1e6
    return {
        "msg_p50_us": float(np.percentile(fct, 50)),
        "msg_p99_us": float(np.percentile(fct, 99)),
        "kv_p50_ms": float(np.percentile(kv, 50)),
        "kv_p99_ms": float(np.percentile(kv, 99)),
    }


def compare(root: Path) -> dict:
    """Per fabric: per repeat, ns-3's figures and the flow engine's on the same schedule."""
    exp = json.loads((root / "experiment.json").read_text())
    out = {}
    for label, fr in exp["fabrics"].items():
        fab = build_fabric(fr["fabric"])
        rows = []
        for raw in sorted((root / label / "raw").glob("rep[0-9]*")):
            sched = pd.DataFrame(json.loads((raw / "schedule.json").read_text())["messages"])
            sched["fid"] = range(len(sched))
            got = pd.read_json(raw / "transfers.jsonl", lines=True).sort_values("msg_id").reset_index(drop=True)
            if len(got) != len(sched) or not got.integrity_ok.all():
                raise SystemExit(f"{raw}: ns-3 completed {len(got)} of {len(sched)} messages whole")
            sched["ns3_done_ns"] = got.t_last_rx_ns.to_numpy()
            t = time.perf_counter()
            done = run_qp_ordered(
                FlowEngine(fab),
                [
                    (int(m.t_due_ns), int(m.fid), m.src_port, m.dst_port, wire_bytes(int(m.real_bytes)), int(m.sport))
                    for m in sched.itertuples()
                ],
            )
            sched["flow_done_ns"] = [done[f][1] for f in sched.fid]
            rows.append(
                {
                    "ns3": figures(sched, "ns3_done_ns"),
                    "flow": figures(sched, "flow_done_ns"),
                    "flow_s": time.perf_counter() - t,
                }
            )
        out[label] = rows
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    ap.add_argument("--repeats", type=int, default=3, help="independent repeats per fabric (default 3)")
    ap.add_argument("--requests", type=int, default=40, help="trace requests per repeat (default 40)")
    ap.add_argument("--results", default=None, help="keep the ns-3 run folders here (default: a temporary folder)")
    ap.add_argument(
        "--transport", default="default", choices=list(TRANSPORTS), help="ns-3's transport (default: default)"
    )
    a = ap.parse_args(argv)
    names = a.cases.split(",")
    if any(n not in CASES for n in names) or a.repeats < 2 or a.requests < 1:
        print(f"flow_ns3: cases from {', '.join(CASES)}; repeats >= 2; requests >= 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(a.results or tmp)
        results.mkdir(parents=True, exist_ok=True)
        print(f"{a.repeats} repeats x {a.requests} requests; mean ± 95 % CI over repeats; ratio = flow / ns-3")
        for name in names:
            print(f"\n{name}: {CASES[name][0]}")
            print(f"{'fabric':7} {'figure':12} {'ns-3':>18} {'flow engine':>18} {'ratio':>16}")
            for label, rows in compare(run_ns3(name, a.repeats, a.requests, results, a.transport)).items():
                for key, what in (
                    ("msg_p50_us", "msg p50 us"),
                    ("msg_p99_us", "msg p99 us"),
                    ("kv_p50_ms", "KV p50 ms"),
                    ("kv_p99_ms", "KV p99 ms"),
                ):
                    f = "{:.1f}" if key.startswith("msg") else "{:.3f}"
                    ns3 = ci95([r["ns3"][key] for r in rows])
                    flow = ci95([r["flow"][key] for r in rows])
                    ratio = ci95([r["flow"][key] / r["ns3"][key] for r in rows])
                    print(f"{label:7} {what:12} {fmt(ns3, f):>18} {fmt(flow, f):>18} {fmt(ratio):>16}")
                print(f"{label:7} flow engine {sum(r['flow_s'] for r in rows):.2f} s for {len(rows)} repeats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
