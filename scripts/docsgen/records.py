"""Measurement records: what a producing command printed, with when, where and from which commit.

A record is results/reference/records/NAME.json. ``measure`` writes one by running the command;
a record whose ``transcribed_from`` is set holds a figure measured before this system existed
(copied once from the README of that commit) and is listed as still to be measured.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import platform
import subprocess
import time
from pathlib import Path

RECORDS = Path("results/reference/records")


def path(root: Path, name: str) -> Path:
    return root / RECORDS / f"{name}.json"


def load(root: Path, name: str) -> dict | None:
    p = path(root, name)
    return json.loads(p.read_text()) if p.is_file() else None


def machine() -> str:
    cpu = "?"
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def git_sha(root: Path) -> str | None:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    # Edits to the pages and records themselves do not change what a producer prints.
    dirty = subprocess.run(
        [
            "git",
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":!results/reference/records",
            ":!docs",
            ":!README.md",
        ],
        cwd=root,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (r.stdout.strip() + ("-dirty" if dirty else "")) if r.returncode == 0 else None


def measure(
    root: Path, name: str, argv: list[str], timeout_s: float, lock: str | None = None, exit_ok: tuple[int, ...] = (0,)
) -> dict:
    """Run argv in root, and write its record only if it succeeded (nothing half-written). exit_ok: the
    exit codes that are results, not failures (a verdict command that found what it looks for exits 3).

    With lock, the shared heavy-job lock is taken first, so elapsed_s is the command's own time, not the wait.
    """
    with open(lock, "a") if lock else contextlib.nullcontext() as fd:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        t0 = time.monotonic()
        r = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=timeout_s)
        elapsed_s = time.monotonic() - t0
    if r.returncode not in exit_ok:
        raise RuntimeError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    rec = {
        "name": name,
        "command": (f"flock {lock} " if lock else "") + " ".join(argv),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_sha": git_sha(root),
        "machine": f"{platform.node() or 'host'}: {machine()}",
        "elapsed_s": round(elapsed_s, 1),
        **({"exit_code": r.returncode} if r.returncode else {}),
        "output": r.stdout,
    }
    p = path(root, name)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(p)
    return rec
