"""Record tests/data/mini-run: a real, small `zlab run` (root, OVS) kept as the offline analysis
tier's input. Only what the analysis reads is kept — the resolved experiment, run records,
each fabric's fabric.json, flows.json, run.json and raw/ — not the tables, plots and report it rebuilds,
nor the controller's logs, which the analysis never reads.

    sudo .venv/bin/python scripts/dev/refresh_mini_run.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEST = REPO / "tests" / "data" / "mini-run"
ARGS = ["--set", "workload.requests=12", "--set", "repeats=2", "--no-progress"]
README = """# mini-run: a small real zlab run for the offline analysis tests

Recorded on this project's machine kind by `scripts/dev/refresh_mini_run.py` (`zlab run {args}`:
the default ZCube(4,2) vs 16-GPU two-segment ROFT comparison, 12 requests of the shipped Azure code
trace). Kept: `experiment.json`, `run.json`, and per fabric `fabric.json`, `flows.json`, `run.json` and `raw/`.
Dropped: tables, plots, metrics and report (the tests rebuild them) and the controller's logs (not
read by the analysis). Nothing in it is edited by hand; rerun the script to refresh it.
"""


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", *ARGS, "--results", tmp], cwd=REPO)
        if proc.returncode != 0:
            print(f"zlab run exited {proc.returncode}: not refreshing {DEST}", file=sys.stderr)
            return 1
        (run,) = Path(tmp).iterdir()
        shutil.rmtree(DEST, ignore_errors=True)
        DEST.mkdir(parents=True)
        for name in ("experiment.json", "run.json"):
            shutil.copy(run / name, DEST / name)
        for fdir in (p for p in run.iterdir() if (p / "raw").is_dir()):
            (DEST / fdir.name).mkdir()
            for name in ("fabric.json", "flows.json", "run.json"):  # flows.json: the ns-3 referee's routes
                shutil.copy(fdir / name, DEST / fdir.name / name)
            shutil.copytree(fdir / "raw", DEST / fdir.name / "raw")
    (DEST / "README.md").write_text(README.format(args=" ".join(ARGS)))
    size = sum(p.stat().st_size for p in DEST.rglob("*") if p.is_file())
    print(f"wrote {DEST} ({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
