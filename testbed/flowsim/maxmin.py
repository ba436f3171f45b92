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
    L = remaining.size
    # the (flow, link) pairs, row by row: what every round counts, tests and takes rates off
    pf, hop = np.nonzero(links >= 0)
    pl = links[pf, hop]
    frozen = np.bincount(pf, minlength=F) == 0  # a flow with no link is unconstrained: left at 0
    live = ~frozen[pf]
    share = np.empty(L)
    while live.any():
        count = np.bincount(pl[live], minlength=L)
        share.fill(np.inf)
        np.divide(np.maximum(remaining, 0.0), count, out=share, where=count > 0)
        level = share.min()
        hit_pair = (share <= level * (1 + 1e-12))[pl] & live
        hit = np.zeros(F, dtype=bool)
        hit[pf[hit_pair]] = True
        rate[hit] = level
        frozen |= hit
        hit_pair = hit[pf]  # every link of a flow frozen now, not only its bottleneck
        np.subtract.at(remaining, pl[hit_pair], level)
        live &= ~hit_pair
    return rate
