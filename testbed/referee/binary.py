"""The referee's ns-3 program: found, or compiled from its one source file against Debian's
ns-3 (libns3-dev), into a git-ignored folder. Why C++ and not ns-3's Python bindings: the
endpoints run per-packet logic, which costs seconds in C++ and hours through cppyy callbacks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..errors import RuntimeFailure

SOURCE = Path(__file__).with_name("zlab_referee.cc")
BUILD_DIR = Path(__file__).resolve().parents[2] / ".referee"
BINARY = BUILD_DIR / "zlab-referee"
NS3_HEADER = Path("/usr/include/ns3/core-module.h")
NS3_LIBS = ["-lns3-core", "-lns3-network", "-lns3-point-to-point"]
PROVISION = "bash scripts/provision.sh --referee"


def status() -> tuple[bool, str]:
    """(available, what): for `zlab doctor` and for refusing early."""
    if not NS3_HEADER.exists():
        return False, f"ns-3 headers missing ({NS3_HEADER}): run {PROVISION}"
    if shutil.which("g++") is None:
        return False, f"g++ missing: run {PROVISION}"
    if not BINARY.exists():
        return False, f"ns-3 present, referee not built ({BINARY}): run {PROVISION} (or any `zlab referee` builds it)"
    if BINARY.stat().st_mtime < SOURCE.stat().st_mtime:
        return True, f"ns-3 3.37 (Debian); {BINARY} is older than its source and is rebuilt on first use"
    return True, f"ns-3 3.37 (Debian), {BINARY}"


# the TCP baseline (zlab_tcp_baseline.cc): ns-3's own TCP over the same fabric and schedule
BASELINE_SOURCE = Path(__file__).with_name("zlab_tcp_baseline.cc")
BASELINE_BINARY = BUILD_DIR / "zlab-tcp-baseline"


def build(force: bool = False, log=print, source: Path = SOURCE, binary: Path = BINARY) -> Path:
    """Compile the referee (or the TCP baseline) if it is missing or older than its source; return its path."""
    if not NS3_HEADER.exists() or shutil.which("g++") is None:
        raise RuntimeFailure(f"the ns-3 referee is not installed (needs libns3-dev and g++): run {PROVISION}")
    if binary.exists() and not force and binary.stat().st_mtime >= source.stat().st_mtime:
        return binary
    BUILD_DIR.mkdir(exist_ok=True)
    tmp = binary.with_suffix(".tmp")
    log(f"[zlab] compiling the ns-3 referee ({source.name}, ~10 s) ...")
    libs = NS3_LIBS + (["-lns3-internet"] if source == BASELINE_SOURCE else [])
    cmd = ["g++", "-O2", "-std=c++17", "-o", str(tmp), str(source), *libs]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeFailure(f"compiling {source} failed: {res.stderr.strip()[-800:]}")
    tmp.replace(binary)
    return binary
