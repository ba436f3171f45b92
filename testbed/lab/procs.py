"""Process identity by (pid, start time), so a recycled pid is never mistaken for ours."""

from __future__ import annotations

import os
import signal
import time


def start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    # fields after the parenthesised command name (which may contain spaces): state is
    # field 3, start time field 22. A zombie has exited: it owns nothing any more.
    rest = stat.rsplit(")", 1)[1].split()
    if rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def alive(pid: int, started: int | None) -> bool:
    st = start_time(pid)
    return st is not None and (started is None or st == started)


def terminate(pid: int, started: int | None, grace_s: float = 3.0) -> bool:
    """SIGTERM, then SIGKILL after grace_s; only if (pid, start time) is still the same process."""
    if not alive(pid, started):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive(pid, started):
            return True
        time.sleep(0.05)
    if alive(pid, started):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return True
