"""Experiment: ZCube against ROFT in the packet engine with RoCE's congestion machinery on
(lossless PFC + ECN + DCQCN, no window), at real scale, over independent repeats: does ROFT's
fabric pause more, as the article says ("egress queues that frequently trigger PFC backpressure")?

Each case is one `zlab run --engine ns3` (a run folder in --results, kept); this prints, per case
and fabric, the KV completion p50/p99, PAUSE frames, paused port time, ECN marks and the deepest
queue, the flows a pause held and its victims (held by a pause whose congestion root is not on their
path) as mean ± 95 % CI over the repeats, the share of time each switch group's ports spent
paused, then ROFT/ZCube ratios with 95 % bootstrap intervals.

    .venv/bin/python scripts/bench/congestion_compare.py [--cases default-rank,default-rail,64-rank,64-rail]
        [--repeats 5] [--requests 40] [--results /tmp/zlab-congestion]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from testbed.cli import main as zlab  # noqa: E402
from testbed.measure.congestion import ratio_ci  # noqa: E402

LOSSLESS = [
    "congestion.pfc_enabled=true",
    "congestion.ecn_enabled=true",
    "congestion.cc=dcqcn",
    "congestion.window_pkts=0",
    "measurement.queue_sample_ms=0.1",  # per-port queue series at 100 µs (the report's port_queue_bytes.png)
]
PAIR_64 = [
    "fabrics.zcube=zcube:n=8,gpus_per_server=8",
    "fabrics.roft=roft:gpus=64,gpus_per_server=8",
    "deployment.tp=8",
    "deployment.prefill_instances=4",
    "deployment.decode_instances=4",
]
CASES = {  # name -> (what, overrides); the Azure code trace is the spec's default workload
    "default-rank": ("ZCube(4,2) vs 16-GPU ROFT, rank-shifted", ["deployment.mapping=rank-shifted"]),
    "default-rail": ("ZCube(4,2) vs 16-GPU ROFT, Azure code, rail-aligned", []),
    "64-rank": ("ZCube(8,2) vs 64-GPU ROFT, rank-shifted", [*PAIR_64, "deployment.mapping=rank-shifted"]),
    "64-rail": ("ZCube(8,2) vs 64-GPU ROFT, Azure code, rail-aligned", PAIR_64),
}


def run_case(name: str, repeats: int, requests: int, results: Path) -> dict:
    sets = [*LOSSLESS, *CASES[name][1], f"repeats={repeats}", f"workload.requests={requests}"]
    argv = ["run", "--engine", "ns3", "--results", str(results), "--no-progress"]
    for s in sets:
        argv += ["--set", s]
    before = set(results.iterdir()) if results.exists() else set()
    t = time.monotonic()
    code = zlab(argv)
    (root,) = set(results.iterdir()) - before
    if code != 0:
        raise SystemExit(f"{name}: zlab run exited {code} ({root})")
    return {"root": root, "wall_s": time.monotonic() - t, "metrics": json.loads((root / "metrics.json").read_text())}


def ci(c: dict, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    if c["mean"] is None:
        return "—"
    return fmt.format(c["mean"] * scale) + (f" ± {fmt.format(c['ci95'] * scale)}" if c["ci95"] is not None else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    ap.add_argument("--repeats", type=int, default=5, help="independent repeats per fabric (default 5)")
    ap.add_argument("--requests", type=int, default=40, help="trace requests per repeat (default 40)")
    ap.add_argument("--results", default="/tmp/zlab-congestion", help="where the run folders go")
    a = ap.parse_args(argv)
    names = a.cases.split(",")
    if any(n not in CASES for n in names) or a.repeats < 2 or a.requests < 1:
        print(f"congestion_compare: cases from {', '.join(CASES)}; repeats >= 2; requests >= 1", file=sys.stderr)
        return 2
    results = Path(a.results)
    results.mkdir(parents=True, exist_ok=True)
    print(f"lossless (PFC) + ECN + DCQCN, window none; {a.repeats} repeats x {a.requests} requests; mean ± 95 % CI")
    for name in names:
        r = run_case(name, a.repeats, a.requests, results)
        m = r["metrics"]
        print(f"\n{name}: {CASES[name][0]} ({r['wall_s']:.0f} s wall, {r['root'].name})")
        print(
            f"{'fabric':8} {'KV p50 ms':>14} {'KV p99 ms':>14} {'PAUSE frames':>16} {'paused port-ms':>16} "
            f"{'ECN marks':>14} {'deepest KB':>14} {'paused flows':>14} {'victim flows':>14}"
        )
        for lab, f in m["fabrics"].items():
            s, c = f["summary"], m["congestion"][lab]
            print(
                f"{lab:8} {ci(s['kv_p50_real_s'], 1e3):>14} {ci(s['kv_p99_real_s'], 1e3):>14} {ci(c['pause_frames'], 1, '{:.0f}'):>16} "
                f"{ci(c['paused_port_s'], 1e3, '{:.3f}'):>16} {ci(c['marks'], 1, '{:.0f}'):>14} "
                f"{ci(c['max_backlog_bytes'], 1e-3, '{:.0f}'):>14} "
                f"{ci(c['paused_flows'], 1, '{:.1f}'):>14} {ci(c['victim_flows'], 1, '{:.1f}'):>14}"
            )
        for lab in m["fabrics"]:
            c = m["congestion"][lab]
            flows = c["repeats"][0]["flows"]
            groups = ", ".join(f"{g} {ci(v['paused_fraction'], 100, '{:.3f}')} %" for g, v in c["groups"].items())
            print(f"  {lab}: {flows} flows per repeat; time paused per port, by group: {groups}")
        z, rf = m["congestion"]["zcube"]["repeats"], m["congestion"]["roft"]["repeats"]
        for key, what in (
            ("pause_frames", "PAUSE frames"),
            ("paused_port_s", "paused port time"),
            ("marks", "ECN marks"),
        ):
            q = ratio_ci([x[key] for x in rf], [x[key] for x in z])
            if q["ratio"] is None:
                zero_r = all(x[key] == 0 for x in rf)
                print(
                    f"  roft/zcube {what}: not defined (zcube 0 in every repeat; roft {'0 too' if zero_r else '> 0'})"
                )
            else:
                print(f"  roft/zcube {what}: {q['ratio']:.2f} (95 % bootstrap interval {q['lo']:.2f}-{q['hi']:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
