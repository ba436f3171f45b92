"""Producer of docs/development.md's tier timings: run a test tier, print its wall time, steps and pytest summary.

    .venv/bin/python scripts/docsgen/timing.py check   # bash scripts/check.sh (the fast loop, both cores)
    .venv/bin/python scripts/docsgen/timing.py unit    # the whole unit tier, serially

Both take minutes of CPU on two cores: measure them under `flock /tmp/zlab-heavy.lock`. A failing tier is
reported (its failed steps named), not hidden: the time of a red run is still what the loop costs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIERS = {
    "check": ["bash", "scripts/check.sh"],
    "unit": [".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit"],
}
SUMMARY = re.compile(r"^(\d+ \w+.*) in [\d.]+s")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in TIERS:
        print(f"usage: timing.py {'|'.join(TIERS)}", file=sys.stderr)
        return 2
    cmd = TIERS[argv[0]]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall_s = time.monotonic() - t0
    lines = (r.stdout + r.stderr).splitlines()
    steps = [ln for ln in lines if ln.startswith("[check] ") and ":" in ln and "FAILED" not in ln]
    summary = next((m[1] for ln in reversed(lines) if (m := SUMMARY.match(ln.strip("= ")))), "no pytest summary")
    failed = next((ln for ln in lines if ln.startswith("[check] FAILED")), "")
    print(f"{' '.join(cmd)}: {wall_s:.1f} s wall, exit {r.returncode}{' (' + failed[8:] + ')' if failed else ''}")
    print(f"tests: {summary}")
    for ln in steps:
        print(ln)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
