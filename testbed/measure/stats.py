"""Confidence intervals over repeated independent draws (used by metrics and the model CLI)."""

from __future__ import annotations

import math

import numpy as np

# two-sided 95 % Student t quantiles by degrees of freedom 1..30 (normal beyond)
T975 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]


def ci95(values) -> dict:
    """Mean and half-width of its 95 % confidence interval (Student t over the draws)."""
    v = np.asarray([x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))], dtype=float)
    if v.size == 0:
        return {"mean": None, "ci95": None, "n": 0, "values": []}
    half = None
    if v.size > 1:
        t = T975[v.size - 2] if v.size - 1 <= len(T975) else 1.96
        half = float(t * v.std(ddof=1) / math.sqrt(v.size))
    return {"mean": float(v.mean()), "ci95": half, "n": int(v.size), "values": v.tolist()}
