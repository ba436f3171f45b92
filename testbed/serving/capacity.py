"""Capacity at an SLO: the highest offered per-GPU request rate that still meets DistServe's goodput.

Why bisection per repeat: DistServe and Vidur both bisect the rate; a repeat (its own seed: its
arrivals, rank mapping draws and QP source ports) gives one capacity, and the spread over repeats is
the confidence interval -- the same "repeats are draws" rule as the rest of zlab. The search assumes
attainment falls with load; the two ends are checked first, so a range that never passes (capacity
below it) or always passes (capacity at least its top) is reported as such, not bisected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..measure.stats import ci95


@dataclass
class Search:
    capacity: float  # highest passing rate found (0.0 when even the lowest fails)
    bound: str  # "found" | "below-range" | "at-least-max"
    points: list[tuple[float, bool]] = field(default_factory=list)  # (rate, passed) in evaluation order


def bisect(passes: Callable[[float], bool], lo: float, hi: float, iterations: int) -> Search:
    """Highest rate in [lo, hi] for which passes(rate) holds, to (hi - lo) / 2**iterations."""
    if not 0 < lo < hi:
        raise ValueError(f"the load range must satisfy 0 < min < max (got {lo:g}..{hi:g})")
    s = Search(0.0, "found")

    def check(rate: float) -> bool:
        ok = passes(rate)
        s.points.append((rate, ok))
        return ok

    if not check(lo):
        s.bound = "below-range"
        return s
    if check(hi):
        s.capacity, s.bound = hi, "at-least-max"
        return s
    good, bad = lo, hi
    for _ in range(iterations):
        mid = (good + bad) / 2
        if check(mid):
            good = mid
        else:
            bad = mid
    s.capacity = good
    return s


def summarise(capacities: dict[str, list[float]], order: list[str]) -> dict:
    """Mean +- 95 % CI of each fabric's capacity over repeats, and the paired ratio of the first
    fabric to the second (per repeat: same seed, same arrivals)."""
    out = {"capacity_per_gpu_rps": {label: ci95(capacities[label]) for label in order}}
    if len(order) >= 2:
        a, b = capacities[order[0]], capacities[order[1]]
        ratios = [x / y for x, y in zip(a, b) if y > 0]
        out["ratio"] = {"of": f"{order[0]}/{order[1]}", **ci95(ratios)}
    return out
