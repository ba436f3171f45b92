"""The verdict of one repeat, built so that every fidelity rule fails closed.

Why: a rule that cannot read its input must not pass. `NaN > 0.9` is False, a counter read that
failed counts as zero, a missing file skips the comparison: each of these let a repeat through
that nothing checked. Here a rule is a function of the repeat's figures that returns the reasons
it voids the repeat; if it raises `Unreadable` (or any error from reading its input), the repeat
is void with the rule's name and what could not be read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable


class Unreadable(Exception):
    """A rule's input is missing or unreadable: the repeat is void, with this message."""


def number(x, what: str) -> float:
    """x as a finite float, or Unreadable naming `what` (None and NaN are not numbers)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        raise Unreadable(f"{what} unreadable ({x})")
    return float(x)


class Verdict:
    """Reasons collected from rules; valid only if there are none."""

    def __init__(self):
        self.reasons: list[str] = []

    def void(self, reason: str) -> None:
        self.reasons.append(reason)

    def check(self, name: str, rule: Callable[[], Iterable[str] | None]) -> None:
        """Run one rule; an input it cannot read voids the repeat instead of passing it."""
        try:
            self.reasons.extend(rule() or [])
        except Unreadable as exc:
            self.void(f"{name} rule cannot read its input: {exc}")
        except (KeyError, TypeError, ValueError) as exc:
            self.void(f"{name} rule cannot read its input: {type(exc).__name__}: {exc}")

    def result(self) -> dict:
        return {"valid": not self.reasons, "reasons": list(self.reasons)}
