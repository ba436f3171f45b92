"""DCQCN, the reference state machine: the one specification that zlab's packet engine (ns-3, C++)
and the emulation's agents are to implement and be checked against, event for event.

Why a pure reference: DCQCN is several interacting timers and counters, and two implementations
of it in two languages drift unless both are compared with one written down once. This module
does no I/O and keeps no clock of its own: the caller feeds it events with their times.

The algorithm is Zhu et al., "Congestion Control for Large-Scale RDMA Deployments" (SIGCOMM'15):
per QP, a current rate Rc and a target rate Rt, and a congestion estimate alpha.
- On a CNP (at most one cut per rate-decrease interval): Rt = Rc; Rc = Rc (1 - alpha/2);
  alpha = (1 - g) alpha + g; the increase stages restart.
- Every alpha-update interval without a CNP: alpha = (1 - g) alpha.
- A rate-increase event (the timer, or the byte counter) advances its stage counter T or BC:
  fast recovery while max(T, BC) < F: Rc = (Rt + Rc) / 2;
  additive increase once one counter reaches F: Rt += AI, then Rc = (Rt + Rc) / 2;
  hyper increase once both have: Rt += HAI, then Rc = (Rt + Rc) / 2.
  Without a byte counter (byte_counter_bytes 0, as HPCC runs it) the timer's stage alone decides,
  as HPCC's rdma-hw.cc RateIncEventMlx does, on the count before the event: below F fast recovery,
  at F additive, above F hyper (the paper's two-counter rule would never reach hyper increase).
- Rates stay within [min rate, line rate].
Defaults are the values HPCC's public ns-3 scripts run DCQCN with (per 25 Gb/s of line rate for AI
and HAI); they are parameters, not constants, and every run names them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DcqcnParams:
    line_rate_bps: float
    g: float = 1 / 256
    alpha_update_ns: int = 1_000
    rate_decrease_ns: int = 4_000
    rate_increase_ns: int = 300_000
    byte_counter_bytes: int = 0  # 0: no byte counter, increases by the timer alone
    fast_recovery_stages: int = 5  # F
    ai_bps_per_25g: float = 5e6
    hai_bps_per_25g: float = 50e6
    min_rate_bps: float = 100e6

    def __post_init__(self):
        if not self.line_rate_bps > 0:
            raise ValueError(f"line rate must be > 0 (got {self.line_rate_bps})")
        if not 0 < self.g <= 1:
            raise ValueError(f"g must be in (0, 1] (got {self.g})")
        for name in ("alpha_update_ns", "rate_decrease_ns", "rate_increase_ns"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 (got {getattr(self, name)})")
        if self.byte_counter_bytes < 0 or self.fast_recovery_stages < 1:
            raise ValueError("byte counter must be >= 0 and fast-recovery stages >= 1")
        if not 0 < self.min_rate_bps <= self.line_rate_bps:
            raise ValueError(f"min rate {self.min_rate_bps} must be in (0, line rate {self.line_rate_bps}]")

    @property
    def ai_bps(self) -> float:
        return self.ai_bps_per_25g * self.line_rate_bps / 25e9

    @property
    def hai_bps(self) -> float:
        return self.hai_bps_per_25g * self.line_rate_bps / 25e9


class Dcqcn:
    """One QP's reaction point. Feed it events in time order; read rate_bps."""

    def __init__(self, p: DcqcnParams):
        self.p = p
        self.rc = self.rt = float(p.line_rate_bps)
        self.alpha = 1.0
        self.t_stage = self.bc_stage = 0
        self.last_cut_ns: int | None = None
        self.cnp_since_alpha_update = False
        self.bytes_since_increase = 0

    @property
    def rate_bps(self) -> float:
        return self.rc

    def on_cnp(self, t_ns: int) -> bool:
        """A CNP arrived; returns whether the rate was cut (at most once per decrease interval)."""
        self.cnp_since_alpha_update = True
        if self.last_cut_ns is not None and t_ns - self.last_cut_ns < self.p.rate_decrease_ns:
            return False
        self.last_cut_ns = t_ns
        self.rt = self.rc
        self.rc = max(self.p.min_rate_bps, self.rc * (1 - self.alpha / 2))
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self.t_stage = self.bc_stage = 0
        self.bytes_since_increase = 0
        return True

    def on_alpha_timer(self, t_ns: int) -> None:
        """The alpha-update timer fired: decay alpha unless a CNP came in this interval."""
        if not self.cnp_since_alpha_update:
            self.alpha = (1 - self.p.g) * self.alpha
        self.cnp_since_alpha_update = False

    def on_increase_timer(self, t_ns: int) -> None:
        self.t_stage += 1
        self._increase()

    def on_bytes_sent(self, n: int, t_ns: int) -> None:
        """Bytes sent: every byte_counter_bytes of them is a rate-increase event."""
        if not self.p.byte_counter_bytes:
            return
        self.bytes_since_increase += n
        while self.bytes_since_increase >= self.p.byte_counter_bytes:
            self.bytes_since_increase -= self.p.byte_counter_bytes
            self.bc_stage += 1
            self._increase()

    def _increase(self) -> None:
        f = self.p.fast_recovery_stages
        if not self.p.byte_counter_bytes:
            # timer only (HPCC's RateIncEventMlx): the stage before this event decides; below F fast
            # recovery, at F one additive step, above F hyper increase
            stage = self.t_stage - 1
            if stage > f:
                self.rt = min(self.p.line_rate_bps, self.rt + self.p.hai_bps)
            elif stage == f:
                self.rt = min(self.p.line_rate_bps, self.rt + self.p.ai_bps)
        elif max(self.t_stage, self.bc_stage) < f:
            pass  # fast recovery: towards the target only
        elif min(self.t_stage, self.bc_stage) < f:
            self.rt = min(self.p.line_rate_bps, self.rt + self.p.ai_bps)
        else:
            self.rt = min(self.p.line_rate_bps, self.rt + self.p.hai_bps)
        self.rc = min(self.p.line_rate_bps, (self.rt + self.rc) / 2)


class DcqcnQp:
    """One QP's DCQCN with its timers, as zlab runs it in both engines: the alpha timer ticks every
    alpha_update_ns from the QP's first CNP (ticks at or before an event come first); the
    rate-increase timer fires rate_increase_ns after each cut, then periodically until both rates
    are back at line rate. Lazy: the caller says what time it is (advance, on_cnp) and the timer
    events due by then run in time order, so an event loop with a coarse tick loses nothing.
    Every rate change is kept in `changes` as (t_ns, rate_bps)."""

    def __init__(self, p: DcqcnParams):
        self.p = p
        self.d = Dcqcn(p)
        self.tick_ns: int | None = None  # the next alpha tick (None before the first CNP)
        self.increase_ns: int | None = None  # the next rate-increase event (None at line rate)
        self.changes: list[tuple[int, float]] = []
        self.cnps = 0

    @property
    def rate_bps(self) -> float:
        return self.d.rc

    def _ticks_until(self, t_ns: int) -> None:
        while self.tick_ns is not None and self.tick_ns <= t_ns:
            self.d.on_alpha_timer(self.tick_ns)
            self.tick_ns += self.p.alpha_update_ns

    def advance(self, t_ns: int, inclusive: bool = True) -> None:
        """Run the timer events due by t_ns (a rate-increase event at exactly t_ns only when
        inclusive: a CNP at the same instant goes first)."""
        while self.increase_ns is not None and (self.increase_ns <= t_ns if inclusive else self.increase_ns < t_ns):
            t = self.increase_ns
            self._ticks_until(t)
            self.d.on_increase_timer(t)
            self.changes.append((t, self.d.rc))
            line = self.p.line_rate_bps
            self.increase_ns = t + self.p.rate_increase_ns if (self.d.rc < line or self.d.rt < line) else None
        self._ticks_until(t_ns)

    def on_cnp(self, t_ns: int) -> bool:
        """A CNP reached the sender at t_ns; returns whether it cut the rate."""
        self.cnps += 1
        self.advance(t_ns, inclusive=False)
        if self.tick_ns is None:
            self.tick_ns = t_ns + self.p.alpha_update_ns
        if not self.d.on_cnp(t_ns):
            return False
        self.changes.append((t_ns, self.d.rc))
        self.increase_ns = t_ns + self.p.rate_increase_ns
        return True
