"""Record tests/data/bimodal-run: a real, small `zlab run` (root, OVS) of ROFT alone over four ECMP
draws (seeds 0-3), of which the routing model says three collide on a spine link and one (seed 3)
does not: the offline tests check that the report shows both modes and how often each occurs.
Kept as tests/data/mini-run is (scripts/dev/refresh_mini_run.py), without flows.json (the
analysis does not read it), to stay under about 1 MB.

    sudo .venv/bin/python scripts/dev/record_bimodal_run.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEST = REPO / "tests" / "data" / "bimodal-run"
ARGS = [
    "--set",
    "workload.requests=8",
    "--set",
    "repeats=4",
    "--set",
    'fabrics={"roft": "roft:gpus=16,gpus_per_server=4,segments=2"}',
    "--no-progress",
]
README = """# bimodal-run: ROFT over four ECMP draws, for the offline "what a draw does" tests

Recorded on this project's machine kind by `scripts/dev/record_bimodal_run.py` (`zlab run {args}`):
the default 16-GPU two-segment ROFT, 8 requests of the shipped Azure code trace, seeds 0-3. By the
routing model (testbed/measure/draws.py) seeds 0, 1 and 2 put two concurrent queue pairs on one
spine link and seed 3 does not. Kept: `experiment.json`, `run.json`, and `roft/fabric.json`,
`roft/run.json` and `roft/raw/`. Nothing in it is edited by hand; rerun the script to refresh it.
"""


MACHINE_BOUND = ("CPU-bound", "queue sample periods missed", "agent released messages late")


def _record(tmp: str) -> tuple[Path | None, str]:
    """One run: (its folder, "valid" | "machine"), or (None, why) when it cannot be kept. A run voided only
    by the machine's load (other work on a shared host) is kept if three attempts give no valid one: the
    draws' ECMP collisions do not depend on it, and the report names its INVALID repeats."""
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", *ARGS, "--results", tmp], cwd=REPO)
    if proc.returncode not in (0, 3):
        return None, f"zlab run exited {proc.returncode}"
    (run,) = Path(tmp).iterdir()
    if proc.returncode == 0:
        return run, "valid"
    metrics = json.loads((run / "metrics.json").read_text())
    reasons = [x for f in metrics["fabrics"].values() for x in f["summary"]["fidelity"]["reasons"]]
    if all(any(k in x for k in MACHINE_BOUND) for x in reasons):
        return run, "machine"
    return None, "INVALID beyond the machine: " + "; ".join(reasons[:3])


def main() -> int:
    with tempfile.TemporaryDirectory() as top:
        run = None
        for attempt in range(3):
            tmp = tempfile.mkdtemp(dir=top)
            got, how = _record(tmp)
            if got is None:
                print(f"attempt {attempt + 1}: {how}", file=sys.stderr)
                continue
            run = got
            if how == "valid":
                break
            print(f"attempt {attempt + 1}: INVALID for the machine only; trying again", file=sys.stderr)
        if run is None:
            print(f"no run to keep: not refreshing {DEST}", file=sys.stderr)
            return 1
        shutil.rmtree(DEST, ignore_errors=True)
        DEST.mkdir(parents=True)
        for name in ("experiment.json", "run.json"):
            shutil.copy(run / name, DEST / name)
        for fdir in (p for p in run.iterdir() if (p / "raw").is_dir()):
            (DEST / fdir.name).mkdir()
            for name in ("fabric.json", "run.json"):
                shutil.copy(fdir / name, DEST / fdir.name / name)
            shutil.copytree(fdir / "raw", DEST / fdir.name / "raw")
        shutil.copy(run / "report.md", Path(top).parent / "bimodal-run-report.md")
    (DEST / "README.md").write_text(README.format(args=" ".join(ARGS)))
    size = sum(p.stat().st_size for p in DEST.rglob("*") if p.is_file())
    print(f"wrote {DEST} ({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
