"""Test-only fault injection into bring-up: prove that a failure at any step leaves nothing behind.

Why an environment variable: the root tests need to fail a real bring-up at a chosen step (links,
shaping, bridges, controller, tables) without a command-line option users would see. Unset (the
only state users ever have), `hit` does nothing. ZLAB_TEST_FAULT=<point> raises LabFailure there;
ZLAB_TEST_FAULT=<point>:kill sends SIGKILL to this process there (an owner killed mid-bring-up,
which only `zlab clean` can tidy after).
"""

from __future__ import annotations

import os
import signal

from .config import LabFailure

ENV = "ZLAB_TEST_FAULT"
POINTS = ("controller", "links", "shaping", "bridges", "tables")


def hit(point: str) -> None:
    """Fail here if the test asked for it; otherwise nothing."""
    want = os.environ.get(ENV)
    if not want:
        return
    name, _, mode = want.partition(":")
    if name != point:
        return
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise LabFailure(f"injected fault at {point} ({ENV})")
