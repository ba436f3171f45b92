"""Regenerate the README's model figures (no root): flow-level max link utilisation per pattern
over independent draws, and the cost comparison. Prints markdown to paste, with date and machine.

    .venv/bin/python scripts/readme_figures.py
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


def main() -> int:
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
