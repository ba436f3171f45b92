"""Producer of the load-matrix figure: flow-level max link utilisation per fabric and pattern over draws.

.venv/bin/python scripts/docsgen/load_matrix.py     # prints a Markdown table (no root, ~1 min)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from testbed.fabric import build_fabric  # noqa: E402
from testbed.fabric.load import estimate, pattern  # noqa: E402
from testbed.measure.stats import ci95  # noqa: E402

SEEDS = range(20)
FABRICS = [
    ("ZCube(16,2), 256 GPUs", "zcube:n=16"),
    ("ROFT 256 GPUs, 2 segments", "roft:gpus=256,gpus_per_server=8,segments=2"),
    ("ROFT 1,024 GPUs, 3 tiers (radix 32)", "roft:gpus=1024,radix=32"),
    ("ZCube(32,2), 1,024 GPUs", "zcube:n=32"),
]
PATTERNS = ["rail-aligned", "rank-shifted", "random", "incast"]


def main() -> int:
    print(
        f"Max link utilisation, every sender at line rate, mean ± 95 % CI [min–max] over {len(SEEDS)} draws "
        "(each draw: new UDP source ports, and for `random` a new matching):\n"
    )
    print("| fabric | " + " | ".join(PATTERNS) + " |")
    print("|---|" + "---|" * len(PATTERNS))
    for name, spec in FABRICS:
        fab = build_fabric(spec)
        cells = []
        for p in PATTERNS:
            c = ci95([estimate(fab, pattern(fab, p, seed=s), seed=s).util.max() for s in SEEDS])
            cells.append(f"{c['mean']:.2f} ± {c['ci95']:.2f} [{min(c['values']):.2f}–{max(c['values']):.2f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
