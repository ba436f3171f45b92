"""Regenerate the README's figures. Prints markdown to paste, with date and machine.

    .venv/bin/python scripts/readme_figures.py            # model figures (no root): flow-level max link
                                                          # utilisation per pattern over draws, cost table
    .venv/bin/python scripts/readme_figures.py --run RUN  # the comparison table of a finished zlab run
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.fabric import build_fabric  # noqa: E402
from testbed.fabric.load import estimate, pattern  # noqa: E402
from testbed.measure.stats import ci95  # noqa: E402

SEEDS = range(20)
FABRICS = [("ZCube(16,2), 256 GPUs", "zcube:n=16"),
           ("ROFT 256 GPUs, 2 segments", "roft:gpus=256,gpus_per_server=8,segments=2"),
           ("ROFT 1,024 GPUs, 3 tiers (radix 32)", "roft:gpus=1024,radix=32"),
           ("ZCube(32,2), 1,024 GPUs", "zcube:n=32")]
PATTERNS = ["rail-aligned", "rank-shifted", "random", "incast"]


def flow_table() -> list[str]:
    out = ["| fabric | " + " | ".join(PATTERNS) + " |", "|---|" + "---|" * len(PATTERNS)]
    for name, spec in FABRICS:
        fab = build_fabric(spec)
        cells = []
        for p in PATTERNS:
            c = ci95([estimate(fab, pattern(fab, p, seed=s), seed=s).util.max() for s in SEEDS])
            cells.append(f"{c['mean']:.2f} ± {c['ci95']:.2f} [{min(c['values']):.2f}–{max(c['values']):.2f}]")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def run_table(root: Path) -> list[str]:
    """The README's default-comparison table, from a run folder's metrics.json and experiment.json."""
    import json

    metrics = json.loads((root / "metrics.json").read_text())
    exp = json.loads((root / "experiment.json").read_text())
    run = json.loads((root / "run.json").read_text())
    fabs, cmp_ = metrics["fabrics"], metrics.get("comparison")
    labels = list(fabs)
    rows = [("kv_p50_real_s", "KV-transfer completion p50 (real ms)", 1e3, "{:.2f}"),
            ("kv_p99_real_s", "KV-transfer completion p99 (real ms)", 1e3, "{:.2f}"),
            ("queue_delay_max_real_s", "max queueing delay (real-equivalent µs)", 1e6, "{:.0f}"),
            ("max_offered_util", "max offered link utilisation", 1, "{:.2f}"),
            ("max_carried_util", "max carried link utilisation", 1, "{:.3f}"),
            ("retransmits", "retransmitted packets", 1, "{:.1f}"),
            ("ttft_p99_real_s", "TTFT p99 (real ms, mostly modelled)", 1e3, "{:.1f}")]

    def ci(c, k, f):
        return "—" if c["mean"] is None else f.format(k * c["mean"]) + ("" if c["ci95"] is None else
                                                                      " ± " + f.format(k * c["ci95"]))
    k = fabs[labels[0]]["summary"]["repeats"]
    out = [f"<!-- scripts/readme_figures.py --run {root.name}: git {run.get('git_sha')}, wall {run['wall_s']:.0f} s -->",
           f"| emulated, mean ± 95 % CI over {k} repeats | " + " | ".join(exp["fabrics"][lab]["fabric"].split(",")[0]
                                                                     + " …" for lab in labels)
           + (f" | {cmp_['a']}/{cmp_['b']} | {cmp_['a']} better in |" if cmp_ else " |"),
           "|---|" + "---|" * len(labels) + ("---|---|" if cmp_ else "")]
    for key, name, scale, f in rows:
        cells = [ci(fabs[lab]["summary"][key], scale, f) for lab in labels]
        if cmp_:
            c = cmp_.get(key)
            cells += [ci(c["ratio"], 1, "{:.2f}"), f"{c['a_better']} of {c['n']}"] if c else ["", ""]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("| fidelity | " + " | ".join("valid" if fabs[lab]["summary"]["fidelity"]["valid"] else "INVALID"
                                           for lab in labels) + (" | | |" if cmp_ else " |"))
    return out


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--run":
        print("\n".join(run_table(Path(sys.argv[2]))))
        return 0
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"<!-- scripts/readme_figures.py, {dt.date.today()}, {platform.node() or 'host'}: {cpu}, "
          f"{os.cpu_count()} cores -->")
    print(f"Max link utilisation, every sender at line rate, mean ± 95 % CI [min–max] over {len(SEEDS)} draws "
          "(each draw: new UDP source ports, and for `random` a new matching):\n")
    print("\n".join(flow_table()))
    print("\n```text")
    cost = subprocess.run([sys.executable, "-m", "testbed.cli", "cost", "--gpus", "1024,16384"], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    print(cost.stdout.rstrip())
    print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
