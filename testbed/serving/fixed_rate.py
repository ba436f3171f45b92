"""The "fixed-rate" network engine: every transfer takes size / rate, with no contention.

Why ship it: it is what SplitwiseSim (a fixed-rate link) and SimAI 2.0 (`size / bandwidth`) model,
so a capacity found with it is the figure those simulators would report. A fabric whose links are
shared among KV transfers (the "flow" engine, testbed/flowsim) is then compared against it.
The rate of a transfer is the slower of its two GPU ports' line rates.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping


class FixedRateEngine:
    """NetworkEngine (testbed/network_engine.py) with completion = start + bytes x 8 / rate + latency."""

    name = "fixed-rate"

    def __init__(self, port_rate_bps: Mapping[str, float], latency_ns: int = 0):
        self._rate_bps = dict(port_rate_bps)
        self._latency_ns = int(latency_ns)
        self._clock_ns = 0
        self._done: list[tuple[int, int, int]] = []  # (t_done_ns, order, flow_id)
        self._order = 0

    def start(self, t_ns: int, flow_id: int, src: str, dst: str, size_bytes: int, sport: int | None = None) -> None:
        if t_ns < self._clock_ns:
            raise ValueError(f"flow {flow_id} starts at {t_ns} ns, before the engine's clock {self._clock_ns} ns")
        for port in (src, dst):
            if port not in self._rate_bps:
                raise ValueError(f"flow {flow_id}: unknown GPU port {port!r}")
        rate_bps = min(self._rate_bps[src], self._rate_bps[dst])
        t_done = t_ns + self._latency_ns + math.ceil(size_bytes * 8 * 1e9 / rate_bps)
        heapq.heappush(self._done, (t_done, self._order, flow_id))
        self._order += 1

    def next_event_ns(self) -> int | None:
        return self._done[0][0] if self._done else None

    def advance(self, t_ns: int) -> list[tuple[int, int]]:
        out = []
        while self._done and self._done[0][0] <= t_ns:
            t_done, _, flow_id = heapq.heappop(self._done)
            out.append((flow_id, t_done))
        self._clock_ns = max(self._clock_ns, t_ns)
        return out
