"""Producers of the docs' figures on ECMP draws (docs/fidelity.md), printed as Markdown.

    python scripts/docsgen/draws_figures.py bimodal     # the recorded bimodal run's report section
    python scripts/docsgen/draws_figures.py precision   # the planner's draws for a stated precision

Why a script: the bimodal run ships as raw records only, so its figures come from rebuilding its
report (as the offline test does), and the planner's answer from a dry run; both are measured into
records by scripts/docs_figures.py rather than computed on every docs check.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from testbed.measure import markdown as md  # noqa: E402
from testbed.measure import report  # noqa: E402


def bimodal() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(REPO / "tests" / "data" / "bimodal-run", run)
        m = report.build(run)
    fabs = m["fabrics"]
    rows = [
        "| repeat | ECMP collision | KV p50 / p99 (real ms) | max offered util | max queueing (real µs) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for r in fabs["roft"]["repeats"]:
        kv, q = r["kv_transfer_real_s"], r["queue_delay_max_real_s"]
        rows.append(
            f"| {r['repeat']} | {'yes' if r['ecmp_collision'] else 'no'} | {1e3 * kv['p50']:.2f} / "
            f"{1e3 * kv['p99']:.2f} | {r['max_offered_util']:.2f} | {'—' if q is None else f'{1e6 * q:.0f}'} | "
            f"{'valid' if r['fidelity']['valid'] else 'INVALID'} |"
        )
    return "\n".join(md.draw_section(fabs, list(fabs))[5:] + [""] + rows)


def precision() -> str:
    out = subprocess.run(
        [str(REPO / ".venv/bin/zlab"), "run", "--dry-run", "--precision", "0.1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "\n".join(line for line in out.splitlines() if "precision" in line)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) == 2 else ""
    if what not in ("bimodal", "precision"):
        sys.exit("usage: draws_figures.py bimodal|precision")
    print(bimodal() if what == "bimodal" else precision())
