"""Experiment: lossless mode in the emulation and in the packet engine (ns-3), on the same schedules.
Needs root (the emulation) and provision.sh --referee (ns-3).

Two cases, each with a tiny model (512 KV bytes per token), modelled prefill time zero, a 4 MB switch
buffer (HPCC's 32 MB leaves these queues below XOFF) and the packet engine's other defaults:
* incast: ZCube(4,2), mapping incast, 30 requests, offered load 0.5;
* pair: the default spec's 16-GPU ZCube and ROFT with the default (rank-shifted) mapping, 30 requests at
  offered load 0.9.
The emulation runs at size scale 0.2 and rate scale 1.25e-5 (dilation 16,000), ns-3 at real scale.
Two transports: lossless with a 576 KB window (64 packets of 9,000 B, in real bytes so that both
engines hold the same bytes in flight) and no other congestion control; lossless + ECN + DCQCN with no
window. Printed per case, fabric, transport and engine, mean ± 95 % CI over repeats:
PAUSE events, the ports that were ever held, the time transmitters spent held (real us, summed over
ports), KV completion p50/p99 (real ms), and the ECN marks at switch egress ports.

    sudo .venv/bin/python scripts/bench/lossless_engines.py [--repeats 3] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dcqcn_engines import TINY_MODEL, WORKLOAD, fmt  # noqa: E402  the same incast, model and printing

from testbed.experiment import spec as especs  # noqa: E402
from testbed.experiment.ns3engine import run_experiment as run_ns3  # noqa: E402
from testbed.experiment.resolve import resolve  # noqa: E402
from testbed.experiment.runner import run_experiment as run_emulation  # noqa: E402
from testbed.measure.stats import ci95  # noqa: E402

# dcqcn_engines' workload without its mapping and load, which differ per case here
COMMON = [
    *(w for w in WORKLOAD if not w.startswith(("deployment.mapping", "workload.offered_load"))),
    "congestion.pfc_enabled=true",
    "congestion.pfc_buffer_bytes=4000000",
]
CASES = {
    "incast": (["deployment.mapping=incast", "workload.offered_load=0.5"], ["zcube"]),
    "pair": (["workload.offered_load=0.9"], ["zcube", "roft"]),
}
TRANSPORTS = {
    # the window in real bytes (64 packets of 9,000 B), so that both engines hold the same real bytes in flight
    # (64 emulated frames would be 64 x 45 KB real at size scale 0.2)
    "lossless, 576 KB window": ["congestion.window_bytes=576000"],
    "lossless + DCQCN": ["congestion.ecn_enabled=true", "congestion.cc=dcqcn", "congestion.window_pkts=0"],
}
ENGINES = {
    "emulation": ["workload.size_scale=0.2"],
    "ns3": ["engine=ns3", "measurement.queue_sample_ms=0.01"],
}


def held_us(pfc: Path, per_real_ns: float) -> tuple[int, set, float]:
    """(PAUSE events, ports ever held, held time summed over ports in real us) from a pfc.csv."""
    ev = pd.read_csv(pfc).sort_values("t_ns", kind="stable")
    total, since, ports = 0.0, {}, set()
    for r in ev.itertuples(index=False):
        if r.event == 1:
            ports.add(r.peer_port)
            since.setdefault(r.port, r.t_ns)
        elif r.port in since:
            total += (r.t_ns - since.pop(r.port)) / per_real_ns
    return int((ev.event == 1).sum()), ports, total / 1e3


def run_one(engine: str, case: str, transport: str, repeats: int, results: Path) -> dict:
    sets, fabrics = CASES[case]
    spec = especs.load(None, [*COMMON, *sets, *ENGINES[engine], *TRANSPORTS[transport], f"repeats={repeats}"])
    for f in list(spec["fabrics"]):
        if f not in fabrics:
            del spec["fabrics"][f]
    spec["workload"]["model"] = TINY_MODEL
    exp = resolve(spec)
    run = run_ns3 if engine == "ns3" else run_emulation
    root, status = run(exp, results_dir=str(results), log=lambda *_: None, show_progress=False)
    if status != "complete":
        raise SystemExit(f"{engine} / {case} / {transport}: {status} ({root})")
    m = json.loads((root / "metrics.json").read_text())
    plan = json.loads((root / "experiment.json").read_text())["fabrics"]
    out = {}
    for fab in fabrics:
        s = m["fabrics"][fab]["summary"]
        d = 1.0 if engine == "ns3" else float(plan[fab]["scaling"]["dilation"])
        pauses, held, ports, marked = [], [], set(), []
        for raw in sorted((root / fab / "raw").glob("rep[0-9]")):
            n, p, t = held_us(raw / ("ns3/pfc.csv" if engine == "ns3" else "pfc.csv"), d)
            pauses.append(n)
            held.append(t)
            ports |= p
        if engine == "ns3" and "congestion" in m:
            marked = [r["marks"] for r in m["congestion"][fab]["repeats"]]
        elif "emulation_congestion" in m:
            marked = [r["marks"] for r in m["emulation_congestion"][fab]["repeats"]]
        out[fab] = {
            "pauses": ci95(pauses),
            "ports": sorted(ports),
            "held_us": ci95(held),
            "kv_p50_ms": {k: (v * 1e3 if isinstance(v, float) else v) for k, v in s["kv_p50_real_s"].items()},
            "kv_p99_ms": {k: (v * 1e3 if isinstance(v, float) else v) for k, v in s["kv_p99_real_s"].items()},
            "marks": ci95(marked) if marked else None,
            "invalid": [r["repeat"] for r in m["fabrics"][fab]["repeats"] if not r["fidelity"]["valid"]],
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="independent repeats per engine and transport (default 3)")
    ap.add_argument("--results", default=None, help="keep the run folders here (default: a temporary folder)")
    ap.add_argument("--cases", default="incast,pair", help="comma-separated: incast, pair (default both)")
    a = ap.parse_args(argv)
    cases = a.cases.split(",")
    if a.repeats < 2 or not set(cases) <= set(CASES):
        print(f"lossless_engines: --repeats must be >= 2 and --cases a subset of {','.join(CASES)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(a.results or tmp)
        results.mkdir(parents=True, exist_ok=True)
        print(f"{a.repeats} repeats per row; mean ± 95 % CI; marks: ECN marks at switch egress ports")
        print(
            f"{'case':7} {'fabric':6} {'transport':20} {'engine':10} {'PAUSE events':>16} {'held us':>18} "
            f"{'KV p50 ms':>16} {'KV p99 ms':>16} {'marks':>16}  ports held"
        )
        for case in cases:
            for transport in TRANSPORTS:
                for engine in ENGINES:
                    for fab, r in run_one(engine, case, transport, a.repeats, results).items():
                        note = f"  (invalid repeats {r['invalid']})" if r["invalid"] else ""
                        print(
                            f"{case:7} {fab:6} {transport:20} {engine:10} {fmt(r['pauses'], '{:.0f}'):>16} "
                            f"{fmt(r['held_us'], '{:.1f}'):>18} {fmt(r['kv_p50_ms']):>16} {fmt(r['kv_p99_ms']):>16} "
                            f"{fmt(r['marks'], '{:.0f}'):>16}  {len(r['ports'])}: {','.join(r['ports'][:6])}{note}",
                            flush=True,
                        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
