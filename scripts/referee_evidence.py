"""Refereed runs -> the scaling planner's evidence (testbed/experiment/scaling_evidence.json) and
docs/referee.md's tables. Run `zlab referee RUN --scale both` on each run first.

    .venv/bin/python scripts/referee_evidence.py results/run-A results/run-B [--write]

Why a file in the repo: the planner runs before any emulation, so what the referee measured about
the scaling (which figures survive it, at which size scale) has to be shipped, with its source.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.experiment.planner import EVIDENCE  # noqa: E402
from testbed.records import read_json  # noqa: E402


def entry(root: Path) -> dict:
    same, real = read_json(root / "referee" / "same.json"), read_json(root / "referee" / "real.json")
    exp = read_json(root / "experiment.json")
    out = {
        "run": root.name,
        "git_sha": read_json(root / "run.json").get("git_sha"),
        "size_scale": next(iter(real["size_scale"].values())),
        "dilation": next(iter(real["dilation"].values())),
        "requests_real": real["requests"],
        "repeats": {k: f["repeats"] for k, f in real["fabrics"].items()},
        "mapping": exp["spec"]["deployment"]["mapping"],
        "offered_load": exp["spec"]["workload"].get("offered_load"),
        "same_scale_agree": same["verdict"]["agree"],
        "fabrics": {},
    }
    for label, f in real["fabrics"].items():
        q, x = f["queues"], f["xoff"]
        out["fabrics"][label] = {
            "kv_p50_gap": f["kv_p50"]["gap"],
            "kv_p99_gap": f["kv_p99"]["gap"],
            "same_kv_p99_gap": same["fabrics"][label]["kv_p99"]["gap"],
            "link_bytes_total_gap": abs(f["links"]["total_ns3_bytes"] / f["links"]["total_emu_bytes"] - 1)
            if f["links"]["compared"]
            else None,  # not compared when only some requests were replayed
            "max_queue_real_bytes": {"emu": q["emu_max_bytes"], "ns3": q["ns3_max_bytes"]},
            "max_queue_delay_real_s": {"emu": q["emu_max_delay_real_s"], "ns3": q["ns3_max_delay_real_s"]},
            "xoff_sample_fraction": {"emu": x["emu_fraction"], "ns3": x["ns3_fraction"]},
            "ns3_wall_s": f["ns3_wall_s"],
        }
    return out


def table(e: dict) -> str:
    rows = [
        f"σ = {e['size_scale']:.3g} (dilation {e['dilation']:,.0f}), run `{e['run']}`, "
        f"{'all' if e['requests_real'] is None else e['requests_real']} requests at real scale:",
        "",
        "| fabric | KV p50 gap | KV p99 gap | max queue, real bytes (emu → ns-3) | max queueing delay, real µs "
        "(emu → ns-3) | samples above XOFF (emu → ns-3) | ns-3 wall per repeat |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, f in e["fabrics"].items():
        q, d, x = f["max_queue_real_bytes"], f["max_queue_delay_real_s"], f["xoff_sample_fraction"]
        rows.append(
            f"| {label} | {100 * f['kv_p50_gap']:.1f} % | {100 * f['kv_p99_gap']:.1f} % | "
            f"{q['emu'] / 1e6:.2f} MB → {q['ns3'] / 1e6:.2f} MB | {1e6 * d['emu']:.0f} → {1e6 * d['ns3']:.0f} | "
            f"{100 * x['emu']:.2f} % → {100 * x['ns3']:.2f} % | "
            f"{min(f['ns3_wall_s']):.0f}–{max(f['ns3_wall_s']):.0f} s |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--write", action="store_true", help=f"write {EVIDENCE.relative_to(REPO)}")
    args = ap.parse_args()
    for r in args.runs:
        if not (r / "referee" / "real.json").exists() or not (r / "referee" / "same.json").exists():
            ap.error(f"{r}: run `zlab referee {r} --scale both` first")
    entries = sorted((entry(r) for r in args.runs), key=lambda e: e["size_scale"])
    for e in entries:
        print(table(e) + "\n")
    if args.write:
        EVIDENCE.write_text(json.dumps({"source": "scripts/referee_evidence.py", "entries": entries}, indent=2) + "\n")
        print(f"wrote {EVIDENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
