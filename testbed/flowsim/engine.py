"""The flow-level engine on a fabric: each transfer follows the route the fabric's forwarding
tables give its (source port, destination, UDP source port), and shares links max-min fairly
with every other transfer, event by event (testbed/network_engine.py's interface).

Why the tables: they are what the controller installs and what the emulation and the packet
engine forward by, so ZCube's unique path per source port and ROFT's ECMP member per UDP source
port are the same here as there. A GPU's NIC link is a link like any other, so a GPU's transfers
share its port.
"""

from __future__ import annotations

import numpy as np

from ..fabric.model import Fabric
from ..fabric.paths import forwarding_tables, gpu_port_ref, walk
from ..fabric.tables import Tables
from .network import FluidNetwork
from .schedule import ROCE_SPORT_COUNT, ROCE_SPORT_FIRST


class FlowEngine:
    """Max-min fair-share transfers over the fabric's exact routes (NetworkEngine "flow")."""

    name = "flow"

    def __init__(self, fab: Fabric, tables: Tables | None = None, seed: int = 0, solver: str = "incremental"):
        """solver: how rates are re-solved after each event (network.SOLVERS): "incremental" (the
        touched components) or "global" (every flow: the reference it is checked against)."""
        self.fab = fab
        self.tables = tables if tables is not None else forwarding_tables(fab)
        # directed link 2*lk + d has the link's rate in both directions
        self.net = FluidNetwork(np.repeat(np.asarray(fab.link_rate_bps, dtype=float), 2), solver)
        self._rng = np.random.default_rng(seed)
        self.routes: dict[int, tuple[int, ...]] = {}
        # Why a cache and a batch: a route depends only on (src, dst, sport) and the tables, and a
        # serving run reuses each QP's for every request between the same ports; walking the tables
        # costs about the same for one flow as for a request's dozen, so routes not yet known are
        # walked together when the started transfers are next needed (next_event_ns, advance, or a
        # start at a later time).
        self._route_cache: dict[tuple[str, str, int], tuple[int, ...]] = {}
        self._port_ids: dict[str, int] = {}
        self._pending: list[tuple[int, int, str, str, int, int]] = []

    def _port(self, ref: str) -> int:
        p = self._port_ids.get(ref)
        if p is None:
            p = self._port_ids[ref] = gpu_port_ref(self.fab, ref)
        return p

    def route(self, src: str, dst: str, sport: int) -> np.ndarray:
        """Directed link ids from GPU port src to GPU port dst for this UDP source port."""
        return np.asarray(self._routes_of([(src, dst, int(sport))])[0], dtype=np.int64)

    def _routes_of(self, keys: list[tuple[str, str, int]]) -> list[tuple[int, ...]]:
        """Routes of (src, dst, sport) keys: cached ones as they are, the rest in one walk."""
        cache = self._route_cache
        miss = list(dict.fromkeys(k for k in keys if k not in cache))
        if miss:
            sp = [self._port(k[0]) for k in miss]
            da = [self._port(k[1]) for k in miss]
            w = walk(self.fab, sp, da, [k[2] for k in miss], tables=self.tables)
            for i, (src, dst, sport) in enumerate(miss):
                k = int(w.n_hops[i])
                if k < 0:
                    raise LookupError(f"no route from {src} to {dst} (sport {sport}): the tables do not deliver it")
                cache[(src, dst, sport)] = tuple(w.dlinks[i, : k + 1].tolist())
        return [cache[k] for k in keys]

    def start(self, t_ns: int, flow_id: int, src: str, dst: str, size_bytes: int, sport: int | None = None) -> None:
        if sport is None:  # as a RoCE NIC draws it: uniform over the RoCEv2 source-port range
            sport = ROCE_SPORT_FIRST + int(self._rng.integers(ROCE_SPORT_COUNT))
        if self._pending and self._pending[0][0] != t_ns:
            self._commit()
        self._pending.append((t_ns, flow_id, src, dst, size_bytes, int(sport)))

    def _commit(self) -> None:
        """Add the transfers started since the last call, in start order, with their routes."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        routes = self._routes_of([(p[2], p[3], p[5]) for p in pending])
        for p, r in zip(pending, routes):
            self.routes[p[1]] = r
        self.net.add_many(pending[0][0], [(p[1], np.asarray(r), p[4]) for p, r in zip(pending, routes)])

    def next_event_ns(self) -> int | None:
        self._commit()
        return self.net.next_event_ns()

    def advance(self, t_ns: int) -> list[tuple[int, int]]:
        self._commit()
        return self.net.advance(t_ns)


def run_transfers(engine, transfers) -> list[tuple[int, int]]:
    """Drive an engine through (t_ns, flow_id, src, dst, size_bytes, sport) in start order; return
    every (flow_id, t_done_ns). The open-loop replay: starts do not depend on completions."""
    done: list[tuple[int, int]] = []
    for t, fid, src, dst, size, sport in sorted(transfers, key=lambda x: (x[0], x[1])):
        done += engine.advance(t)
        engine.start(t, fid, src, dst, size, sport)
    while (t := engine.next_event_ns()) is not None:
        done += engine.advance(t)
    return done


def run_qp_ordered(engine, transfers) -> dict[int, tuple[int, int]]:
    """Replay (t_ns, flow_id, src, dst, size_bytes, sport) as the transport sends them: one QP per
    (source port, destination port), whose messages leave in posting order, each when it is due and
    the one before it on its QP has completed (an RC QP's FIFO; zlab's transport in both engines).
    Returns {flow_id: (t_start_ns, t_done_ns)}."""
    pending = sorted(transfers, key=lambda x: (x[0], x[1]))
    queues: dict[tuple[str, str], list] = {}
    for tr in pending:
        queues.setdefault((tr[2], tr[3]), []).append(tr)
    qp_of = {tr[1]: (tr[2], tr[3]) for tr in pending}
    head = {k: 0 for k in queues}
    busy: set = set()
    out: dict[int, tuple[int, int]] = {}
    started: dict[int, int] = {}

    def start_ready(now: int) -> None:
        for k, q in queues.items():
            if k not in busy and head[k] < len(q) and q[head[k]][0] <= now:
                t, fid, src, dst, size, sport = q[head[k]]
                engine.start(now, fid, src, dst, size, sport)
                started[fid] = now
                busy.add(k)

    dues = sorted({tr[0] for tr in pending})
    i = 0
    now = 0
    while len(out) < len(pending):
        nxt_due = dues[i] if i < len(dues) else None
        nxt_ev = engine.next_event_ns()
        cands = [x for x in (nxt_due, nxt_ev) if x is not None]
        if not cands:
            raise RuntimeError("replay stalled: nothing due and nothing in flight")
        now = min(cands)
        for fid, t_done in engine.advance(now):
            out[fid] = (started[fid], t_done)
            k = qp_of[fid]
            busy.discard(k)
            head[k] += 1
        while i < len(dues) and dues[i] <= now:
            i += 1
        start_ready(now)
    return out
