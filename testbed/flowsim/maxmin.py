"""Max-min fair rates by progressive filling, over routes given as lists of link ids.

Why max-min: it is what a fluid model of many long transfers sharing links converges to when
every sender backs off fairly at its bottleneck, the regime of KV transfers (10s-100s of MB):
rates are set by the most contended link each flow crosses, and what a flow cannot use at its
bottleneck is left to the others. Why hand-written and numpy-only: the routes differ per QP (the
UDP source port picks the ECMP member), so every flow carries its own link list; progressive
filling over a flows x hops array is a few vector operations per bottleneck level.
"""

from __future__ import annotations

import numpy as np


def max_min_rates(links: np.ndarray, capacity_bps: np.ndarray) -> np.ndarray:
    """Max-min fair rate (bit/s) of each flow.

    links: (F, H) link ids per flow, -1 padded (a flow may cross a link once);
    capacity_bps: (L,) capacity per link id.

    Each round, every link still carrying unfrozen flows offers its remaining capacity divided
    by their number; the smallest offer is the bottleneck level: flows crossing a link at that
    level are frozen at it and their rate is taken off every link they cross.
    """
    links = np.asarray(links, dtype=np.int64)
    F = links.shape[0]
    rate = np.zeros(F)
    if F == 0:
        return rate
    remaining = np.asarray(capacity_bps, dtype=float).copy()
    valid = links >= 0
    safe = np.where(valid, links, 0)
    frozen = ~valid.any(axis=1)  # a flow with no link is unconstrained: leave it at 0 and frozen
    L = remaining.size
    while not frozen.all():
        live = valid & ~frozen[:, None]
        count = np.bincount(safe[live], minlength=L)
        used = count > 0
        share = np.full(L, np.inf)
        share[used] = np.maximum(remaining[used], 0.0) / count[used]
        level = share.min()
        bottleneck = used & (share <= level * (1 + 1e-12))
        hit = (bottleneck[safe] & live).any(axis=1)
        rate[hit] = level
        frozen |= hit
        np.subtract.at(remaining, safe[valid & hit[:, None]], level)
    return rate
