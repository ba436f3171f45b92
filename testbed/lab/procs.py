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


def terminate_all(
    targets: list[tuple[int, int | None]], grace_s: float = 3.0, first_signal: int = signal.SIGTERM
) -> list[int]:
    """terminate() for many processes with one shared grace period (an interactive bash, which is
    what a Mininet node is, ignores SIGTERM: one by one, 1,000 of them would take 3,000 s).
    first_signal: SIGHUP for shells known to be interactive bash (it exits on SIGHUP at once);
    SIGTERM for anything else, so a process that flushes its records on SIGTERM still can.
    Returns the pids that were alive."""
    live = [(p, st) for p, st in targets if alive(p, st)]
    for pid, _ in live:
        try:
            os.kill(pid, first_signal)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p, st) for p, st in live):
        time.sleep(0.05)
    for pid, st in live:
        if alive(pid, st):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return [p for p, _ in live]


def tagged(name: str, value: str, spare: set[int] = frozenset()) -> list[tuple[int, int | None]]:
    """(pid, start time) of every process whose environment holds name=value exactly."""
    want = f"{name}={value}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spare:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if want in env:
            st = start_time(int(entry))
            if st is not None:
                out.append((int(entry), st))
    return out
