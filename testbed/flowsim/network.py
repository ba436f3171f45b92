"""A fluid network of transfers over fixed routes: max-min rates recomputed after every start and
completion (event by event), bytes drained at those rates in between.

Why apart from the fabric: the event logic is checked against hand-worked schedules on made-up
links, and the fabric engine (engine.py) only turns GPU ports and source ports into routes.
Why rates are solved lazily: starts and completions at one instant (a KV transfer's shards all
start together) change nothing until time moves, so the rates are solved once, when they are next
needed (the next completion time, or draining bytes over a positive interval), for the set of
transfers then running -- the same set, in the same order, an eager solve after the last of them
would have seen, so the same rates.
Why incrementally: max-min fair rates split over the connected components of the flows-links
graph (a flow's rate depends only on flows it is linked to through shared links), so after a start
or a completion only the flows in the components of the links it touched are solved again; every
other flow keeps its rate. At 1,024 GPUs a busy serving run has a few hundred transfers in dozens
of small components, and one global solve costs O(links) per bottleneck level.
"""

from __future__ import annotations

import math

import numpy as np

from .maxmin import max_min_rates

NS_PER_S = 1e9
SOLVERS = ("incremental", "global")


class FluidNetwork:
    """Transfers (flow_id, route, bytes) sharing links of given capacities; times in integer ns.

    Completion times are computed in floating point and reported rounded up to the next ns (a
    transfer is done no earlier than its last bit)."""

    def __init__(self, capacity_bps: np.ndarray, solver: str = "incremental"):
        """solver: "incremental" (re-solve the components an event touched, lazily) or "global"
        (every flow after every start and completion: the reference the incremental one is
        checked against)."""
        if solver not in SOLVERS:
            raise ValueError(f"unknown max-min solver {solver!r}; solvers: {', '.join(SOLVERS)}")
        self.solver = solver
        self.capacity_bps = np.asarray(capacity_bps, dtype=float)
        self._touched: list[np.ndarray] = []  # links of transfers added or removed since the last solve
        self.now_ns = 0.0
        self._ids: list[int] = []
        self._links = np.full((0, 1), -1, dtype=np.int64)  # (F, H) link ids per transfer, -1 padded
        self._left_bits = np.zeros(0)
        self._rate = np.zeros(0)
        self._stale = False  # the set of transfers changed since the rates were solved
        self._next: float | None = None  # the next completion, while neither clock nor transfers moved
        self.rate_solves = 0
        self.solved_flows = 0  # flows whose rates were computed, summed over solves
        self._soonest = 0

    # -- what the engine interface needs ------------------------------------------------------
    def add(self, t_ns: int, flow_id: int, route: np.ndarray, size_bytes: int) -> None:
        self.add_many(t_ns, [(flow_id, route, size_bytes)])

    def add_many(self, t_ns: int, flows: list[tuple[int, np.ndarray, int]]) -> None:
        """Start (flow_id, route, size_bytes) transfers at t_ns, in this order: add() of each."""
        if not flows:
            return
        if t_ns < self.now_ns - 1e-6:
            raise ValueError(
                f"transfer {flows[0][0]} starts at {t_ns} ns, before the engine's clock ({self.now_ns:.0f} ns)"
            )
        done = self._drain_to(float(t_ns))
        if done:
            raise RuntimeError(f"transfers {done} completed before {t_ns} ns and were not collected: call advance()")
        routes = [np.asarray(r, dtype=np.int64).ravel() for _, r, _ in flows]
        F, H = self._links.shape
        W = max(H, max(r.size for r in routes))
        rows = np.full((len(routes), W), -1, dtype=np.int64)
        for i, r in enumerate(routes):
            rows[i, : r.size] = r
        if W > H:
            self._links = np.concatenate([self._links, np.full((F, W - H), -1, dtype=np.int64)], axis=1)
        self._ids.extend(int(f) for f, _, _ in flows)
        self._links = np.concatenate([self._links, rows])
        self._left_bits = np.concatenate([self._left_bits, [8.0 * size for _, _, size in flows]])
        self._rate = np.concatenate([self._rate, np.zeros(len(flows))])
        self._touched.extend(routes)
        self._changed()

    def next_event_ns(self) -> int | None:
        t = self._next_completion()
        return None if t is None else math.ceil(t - 1e-6)

    def advance(self, t_ns: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        while True:
            t = self._next_completion()
            if t is None or t > t_ns + 1e-6:
                break
            out += self._drain_to(t, finished=self._ids[self._soonest])
        self._drain_to(float(t_ns))
        return out

    @property
    def active(self) -> int:
        return len(self._ids)

    def rates_bps(self) -> dict[int, float]:
        self._solve()
        return dict(zip(self._ids, self._rate.tolist()))

    # -- internals ------------------------------------------------------------------------------
    def _next_completion(self) -> float | None:
        if not self._ids:
            return None
        if self._next is not None:
            return self._next
        self._solve()
        dt_s = np.divide(self._left_bits, self._rate, out=np.full(self._rate.size, np.inf), where=self._rate > 0)
        i = self._soonest = int(np.argmin(dt_s))
        if not np.isfinite(dt_s[i]):
            raise RuntimeError(f"transfer {self._ids[i]} has no capacity on its route: it would never complete")
        self._next = self.now_ns + dt_s[i] * NS_PER_S
        return self._next

    def _drain_to(self, t_ns: float, finished: int | None = None) -> list[tuple[int, int]]:
        """Move the clock to t_ns, draining bytes; remove and return transfers that finished
        (`finished`: the one whose completion time t_ns is, done whatever float drift says)."""
        if not self._ids:
            self.now_ns = max(self.now_ns, t_ns)
            return []
        if t_ns > self.now_ns:
            self._solve()
            self._left_bits -= self._rate * (t_ns - self.now_ns) / NS_PER_S
            self.now_ns = t_ns
            self._next = None
        elif finished is None:
            return []
        # else: a transfer so nearly done that its completion rounds to the clock itself (a few bits
        # left at hundreds of Gb/s, far below a float's resolution of a clock in seconds): it is done
        # a transfer within a millionth of a bit (or of its own size) of done is done: float drift
        done = self._left_bits <= max(1e-6, 1e-12 * float(self._left_bits.max(initial=0)))
        if finished is not None:
            done[self._ids.index(finished)] = True
        if not done.any():
            return []
        t_done = math.ceil(t_ns - 1e-6)
        idx = np.flatnonzero(done)
        out = [(self._ids[i], t_done) for i in idx.tolist()]
        keep = ~done
        for i in idx[::-1].tolist():
            del self._ids[i]
        self._touched.append(self._links[idx].ravel())
        self._links = self._links[keep]
        self._left_bits = self._left_bits[keep]
        self._rate = self._rate[keep]
        self._changed()
        return out

    def _changed(self) -> None:
        self._stale = True
        self._next = None
        if self.solver == "global":  # the reference: every flow, after every start and completion
            self._solve()

    def _solve(self) -> None:
        """Solve the rates if the set of transfers changed since they were last solved."""
        if not self._stale:
            return
        self._stale = False
        touched, self._touched = self._touched, []
        if not self._ids:
            self._rate = np.zeros(0)
            return
        self.rate_solves += 1
        if self.solver == "global":
            self._rate = max_min_rates(self._links, self.capacity_bps)
            self.solved_flows += len(self._ids)
            return
        # the flows linked to a touched link through shared links: grow the set until it is closed
        links = self._links
        seen = np.zeros(self.capacity_bps.size + 1, dtype=bool)  # last slot: the -1 padding
        seen[np.concatenate(touched)] = True
        seen[-1] = False
        hit = seen[links].any(axis=1)
        n = int(hit.sum())
        while n:
            seen[links[hit]] = True
            seen[-1] = False
            hit = seen[links].any(axis=1)
            grown = int(hit.sum())
            if grown == n:
                break
            n = grown
        if not n:
            return
        sub = links[hit]
        self.solved_flows += n
        ids, inv = np.unique(sub, return_inverse=True)
        inv = inv.reshape(sub.shape)
        if ids[0] < 0:  # the padding: keep it -1, number the real links from 0
            inv -= 1
            ids = ids[1:]
        self._rate[hit] = max_min_rates(inv, self.capacity_bps[ids])
