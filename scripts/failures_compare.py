"""The emulated failure comparison of docs/failures.md: one `zlab run` per scenario (both fabrics, repeated
independent draws), then a markdown table of mean ± 95 % CI per figure, in real units.

    sudo .venv/bin/python scripts/failures_compare.py [--repeats 3] [--out results/failures-compare]

Scenarios: the busiest fabric cable down under each recovery mode, a switch down, a 30 % gray
failure. Each run folder keeps its raw records, report and failure_timeline.png.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.experiment import spec as especs  # noqa: E402
from testbed.experiment.resolve import resolve  # noqa: E402
from testbed.experiment.runner import run_experiment  # noqa: E402
from testbed.measure import report  # noqa: E402
from testbed.measure.stats import ci95  # noqa: E402

AT = 4.0
BASE = ["workload.requests=60", "workload.offered_load=0.5", "measurement.calibrate=false"]


def down(target):
    return [{"at_emulated_s": AT, "action": "down", "target": target}]


SCENARIOS = [
    ("cable, controller reroute", {"zcube": down("cable:busiest"), "roft": down("cable:busiest")}, {}),
    (
        "cable, fast-failover groups + controller",
        {"zcube": down("cable:busiest"), "roft": down("cable:busiest")},
        {"zcube": "fast-failover", "roft": "fast-failover"},
    ),
    ("cable, host failover (ZCube only)", {"zcube": down("cable:busiest")}, {"zcube": "host"}),
    (
        "switch (ZCube za1: reroute + host; ROFT spine sp1: reroute)",
        {"zcube": down("switch:za1"), "roft": down("switch:sp1")},
        {"zcube": "both"},
    ),
    (
        "gray 30 % loss on a cable, controller reroute",
        {
            f: [{"at_emulated_s": AT - 0.5, "action": "gray", "loss_percent": 30, "target": "cable:busiest"}]
            for f in ("zcube", "roft")
        },
        {},
    ),
]
FIGURES = [
    ("detection_s", "detection (emulated wall)", 1e3, "ms"),
    ("installed_s", "tables installed (emulated wall)", 1e3, "ms"),
    ("entries_changed", "flow entries changed", 1, ""),
    ("recovery_s", "recovery, every hit QP moving (emulated)", 1e3, "ms"),
    ("recovery_real_s", "recovery (real-equivalent)", 1e3, "ms"),
    ("qps_hit", "QPs hit", 1, ""),
    ("retransmits_hit", "retransmitted packets", 1, ""),
    ("kv_p99_before_real_s", "KV p99 before", 1e3, "ms"),
    ("kv_p99_during_real_s", "KV p99 during", 1e3, "ms"),
    ("kv_p99_after_real_s", "KV p99 after recovery", 1e3, "ms"),
    ("detour_peak_before_real_s", "peak queue on the detour ports, before", 1e6, "µs"),
    ("detour_peak_queue_delay_real_s", "peak queue on the detour ports, after the failure", 1e6, "µs"),
]


def cell(rows, key, scale, unit) -> str:
    v = [r[key] * scale for r in rows if r.get(key) is not None]
    if not v:
        return "—"
    c = ci95(v)
    miss = len(rows) - len(v)
    return f"{c['mean']:.3g} ± {c['ci95']:.2g} {unit}".strip() + (f" ({miss} none)" if miss else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="independent draws per scenario (default 3)")
    ap.add_argument("--out", default="results/failures-compare", help="where the run folders go")
    ap.add_argument("--only", help="comma-separated scenario numbers (0-based) to run, e.g. 0,3 (default: all)")
    ap.add_argument(
        "--rebuild",
        action="store_true",
        help="no new runs: rebuild every report in --out (one run per scenario, in order) and print the table again",
    )
    args = ap.parse_args()
    done = sorted(Path(args.out).glob("run-*")) if args.rebuild else []
    if args.rebuild and len(done) != len(SCENARIOS):
        ap.error(f"--rebuild: {args.out} holds {len(done)} runs, expected one per scenario ({len(SCENARIOS)})")
    lines = [
        f"Measured {dt.date.today()} on {platform.node()} ({platform.machine()}, Python "
        f"{platform.python_version()}), {args.repeats} repeats per scenario; mean ± 95 % CI over every "
        "injected failure of every repeat, real units (emulated ÷ dilation).",
        "",
    ]
    only = {int(x) for x in args.only.split(",")} if args.only else set(range(len(SCENARIOS)))
    for i, (name, events, recovery) in enumerate(SCENARIOS):
        if i not in only:
            continue
        over = BASE + [
            f"repeats={args.repeats}",
            f"failures.events={json.dumps(events)}",
            f"fabrics={json.dumps({k: especs.DEFAULT_FABRICS[k] for k in events})}",
        ]
        if recovery:
            over.append(f"failures.recovery={json.dumps(recovery)}")
        t = time.monotonic()
        if args.rebuild:
            root, status = done[i], json.loads((done[i] / "run.json").read_text())["status"]
            report.build(root)
        else:
            exp = resolve(especs.load(None, over))
            root, status = run_experiment(exp, results_dir=args.out, log=lambda *_: None, show_progress=False)
        metrics = json.loads((root / "metrics.json").read_text())
        print(f"[{name}] {root} ({status}, {time.monotonic() - t:.0f} s)", file=sys.stderr)
        labels = list(metrics.get("failures", {}))
        lines += [
            f"**{name}** (`{root.name}`)",
            "",
            "| figure | " + " | ".join(labels) + " |",
            "|---|" + "---|" * len(labels),
        ]
        for key, title, scale, unit in FIGURES:
            lines.append(
                f"| {title} | "
                + " | ".join(cell(metrics["failures"][lab]["events"], key, scale, unit) for lab in labels)
                + " |"
            )
        valid = {lab: sum(r["fidelity"]["valid"] for r in metrics["fabrics"][lab]["repeats"]) for lab in labels}
        intact = {lab: all(e.get("integrity_ok") for e in metrics["failures"][lab]["events"]) for lab in labels}
        lines += [
            "",
            "valid repeats: "
            + ", ".join(f"{lab} {valid[lab]}/{args.repeats}" for lab in labels)
            + "; every message intact: "
            + ", ".join(f"{lab} {'yes' if intact[lab] else 'NO'}" for lab in labels),
            "",
        ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
