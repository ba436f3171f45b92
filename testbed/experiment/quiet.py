"""Wait out the hypervisor's steal before re-taking a repeat it voided.

Why: steal comes in episodes from outside the VM (measured in CI: every one of a fabric's 9
attempts at 31-61 % steal over about five minutes, while a minute earlier the other fabric saw
2-18 %, and 0-3.5 % with both cores busy afterwards). Re-taking at once spends the retakes inside
the same episode; waiting until the steal has stayed under the limit for a few seconds gives the
retake a chance. The wait is bounded and reported; it never changes what is judged."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..measure.collector import machine_cpu

QUIET_WINDOW_S = 1.0  # one reading of /proc/stat's steal share
QUIET_READINGS = 3  # consecutive readings under the limit that count as quiet


def steal_share(read=machine_cpu, sleep=time.sleep, window_s: float = QUIET_WINDOW_S) -> float:
    """Share of all cores the hypervisor stole over one window (0..1)."""
    _, s0, cores = read()
    t0 = time.monotonic()
    sleep(window_s)
    _, s1, _ = read()
    dt = max(time.monotonic() - t0, window_s)
    return max(0.0, (s1 - s0) / (cores * dt))


def wait_for_quiet(
    limit: float,
    max_wait_s: float,
    log: Callable[[str], None],
    share: Callable[[], float] = steal_share,
) -> tuple[float, bool]:
    """Read the steal share until QUIET_READINGS consecutive readings are under `limit`, or
    `max_wait_s` of readings have passed. Returns (seconds waited, quiet reached). Logs every
    tenth reading so a long wait is never silent."""
    waited, calm, n = 0.0, 0, 0
    while waited < max_wait_s:
        s = share()
        waited += QUIET_WINDOW_S
        n += 1
        calm = calm + 1 if s <= limit else 0
        if calm >= QUIET_READINGS:
            return waited, True
        if n % 10 == 0:
            log(
                f"[zlab]   waiting for the hypervisor's steal to fall under {100 * limit:.0f} %: {100 * s:.0f} % after {waited:.0f} s"
            )
    return waited, False
