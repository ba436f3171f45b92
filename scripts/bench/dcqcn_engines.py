"""Experiment: the same incast with ECN + DCQCN in the emulation and in the packet engine (ns-3), at
HPCC's real parameters. Needs root (the emulation) and provision.sh --referee (ns-3).

The incast: ZCube(4,2), mapping incast, 30 requests of a tiny model (512 KV bytes per token), modelled
prefill time zero, offered load 0.5. The emulation runs it at size scale 0.2 (a 9,000-byte frame is 45 KB
real; HPCC's thresholds are 18 and 71 frames on the 200 Gb/s ports) and rate scale 1.25e-5 (dilation
16,000); ns-3 at real scale. Three transports per engine: no congestion control (window 64 packets),
DCQCN with that window, DCQCN with no window. Printed per engine and transport, mean ± 95 % CI over
repeats: KV completion p50/p99 (real ms), the busiest destination's goodput over its busy span (share of
line rate), ECN marks, CNPs and, for DCQCN, the lowest rate any QP reached.

    sudo .venv/bin/python scripts/bench/dcqcn_engines.py [--repeats 3] [--results /tmp/zlab-dcqcn-engines]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from testbed.experiment import spec as especs  # noqa: E402
from testbed.experiment.ns3engine import run_experiment as run_ns3  # noqa: E402
from testbed.experiment.resolve import resolve  # noqa: E402
from testbed.experiment.runner import run_experiment as run_emulation  # noqa: E402
from testbed.measure.stats import ci95  # noqa: E402

TINY_MODEL = {"name": "tiny", "layers": 2, "kv_heads": 1, "head_dim": 64}
WORKLOAD = [
    "workload.requests=30",
    "workload.offered_load=0.5",
    "workload.prefill_overhead_s=0",
    "workload.prefill_tokens_per_s=1000000000000",
    "workload.first_decode_step_s=0",
    "deployment.mapping=incast",
    "measurement.calibrate=false",
]
TRANSPORTS = {
    "no CC, window 64": [],
    "DCQCN, window 64": ["congestion.ecn_enabled=true", "congestion.cc=dcqcn"],
    "DCQCN, no window": ["congestion.ecn_enabled=true", "congestion.cc=dcqcn", "congestion.window_pkts=0"],
}
ENGINES = {
    "emulation": ["workload.size_scale=0.2"],
    "ns3": ["engine=ns3", "measurement.queue_sample_ms=0.01"],
}


def goodput(root: Path, line_bps: float) -> list[float]:
    """Per repeat: the busiest destination port's real bytes over its busy span, over its line rate."""
    dilation = json.loads((root / "experiment.json").read_text())["fabrics"]["zcube"]["scaling"]["dilation"]
    out = []
    for raw in sorted((root / "zcube" / "raw").glob("rep[0-9]")):
        t = pd.read_json(raw / "transfers.jsonl", lines=True)
        g = t.groupby("dst").agg(b=("real_bytes", "sum"), t0=("t_first_rx_ns", "min"), t1=("t_last_rx_ns", "max"))
        top = g.sort_values("b").iloc[-1]
        out.append(top.b * 8 / ((top.t1 - top.t0) / 1e9 / dilation) / line_bps)
    return out


def run_one(engine: str, transport: str, repeats: int, results: Path) -> dict:
    spec = especs.load(None, [*WORKLOAD, *ENGINES[engine], *TRANSPORTS[transport], f"repeats={repeats}"])
    del spec["fabrics"]["roft"]
    spec["workload"]["model"] = TINY_MODEL
    exp = resolve(spec)
    run = run_ns3 if engine == "ns3" else run_emulation
    root, status = run(exp, results_dir=str(results), log=lambda *_: None, show_progress=False)
    if status != "complete":
        raise SystemExit(f"{engine} / {transport}: {status} ({root})")
    m = json.loads((root / "metrics.json").read_text())
    s = m["fabrics"]["zcube"]["summary"]
    invalid = [r["repeat"] for r in m["fabrics"]["zcube"]["repeats"] if not r["fidelity"]["valid"]]
    row = {
        "kv_p50_ms": {k: (v * 1e3 if isinstance(v, float) else v) for k, v in s["kv_p50_real_s"].items()},
        "kv_p99_ms": {k: (v * 1e3 if isinstance(v, float) else v) for k, v in s["kv_p99_real_s"].items()},
        "goodput": ci95(goodput(root, 200e9)),
        "invalid": invalid,
        "root": root,
    }
    if engine == "ns3" and "congestion" in m:
        c = m["congestion"]["zcube"]
        lows = []
        for raw in sorted((root / "zcube" / "raw").glob("rep[0-9]")):
            rates = pd.read_csv(raw / "ns3" / "rates.csv")
            lows.append(float(rates.rate_bps.min()) / 200e9 if len(rates) else 1.0)
        row.update(marks=c["marks"], cnps=c["cnps"], lowest=ci95(lows))
    elif "emulation_congestion" in m:
        c = m["emulation_congestion"]["zcube"]
        row.update(marks=c["marks"], cnps=c["cnps_tx"], lowest=c["lowest_rate_fraction"])
    return row


def fmt(c: dict | None, f: str = "{:.3f}") -> str:
    if not c or c.get("mean") is None:
        return "—"
    return f.format(c["mean"]) + (f" ± {f.format(c['ci95'])}" if c.get("ci95") is not None else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="independent repeats per engine and transport (default 3)")
    ap.add_argument("--results", default=None, help="keep the run folders here (default: a temporary folder)")
    a = ap.parse_args(argv)
    if a.repeats < 2:
        print("dcqcn_engines: --repeats must be >= 2 (intervals)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(a.results or tmp)
        results.mkdir(parents=True, exist_ok=True)
        print(f"incast on ZCube(4,2), 30 requests of a tiny model, {a.repeats} repeats; mean ± 95 % CI")
        print(
            f"{'engine':10} {'transport':18} {'KV p50 ms':>16} {'KV p99 ms':>16} {'bottleneck goodput':>20} "
            f"{'ECN marks':>14} {'CNPs':>12} {'lowest rate':>14}"
        )
        for engine in ENGINES:
            for transport in TRANSPORTS:
                r = run_one(engine, transport, a.repeats, results)
                note = f"  (invalid repeats {r['invalid']})" if r["invalid"] else ""
                print(
                    f"{engine:10} {transport:18} {fmt(r['kv_p50_ms']):>16} {fmt(r['kv_p99_ms']):>16} "
                    f"{fmt(r['goodput']):>20} {fmt(r.get('marks'), '{:.0f}'):>14} {fmt(r.get('cnps'), '{:.0f}'):>12} "
                    f"{fmt(r.get('lowest')):>14}{note}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
