"""Optional delay-based congestion control (TIMELY-like, Mittal et al. SIGCOMM'15).

Why delay-based: this kernel cannot mark ECN (no RED/DCTCP), so DCQCN is impossible; RTTs
from ACKs of AckReq packets are the only congestion signal. Thresholds are in emulated time
(a 4 KB packet takes 1.6 ms at 20 Mb/s), so they are parameters, not datacenter constants.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Timely:
    line_rate_bps: float
    t_low_ns: int = 2_000_000
    t_high_ns: int = 20_000_000
    min_rtt_ns: int = 1_000_000
    alpha: float = 0.875  # EWMA weight of the new RTT difference
    beta: float = 0.8  # multiplicative decrease factor
    delta_fraction: float = 0.02  # additive step, fraction of line rate
    hai_after: int = 5  # consecutive increases before hyper-active increase (x5)
    min_rate_fraction: float = 0.01

    def __post_init__(self):
        self.rate_bps = self.line_rate_bps
        self.prev_rtt = None
        self.rtt_diff = 0.0
        self.increases = 0
        self.samples = 0

    def on_rtt(self, rtt_ns: int) -> float:
        self.samples += 1
        if self.prev_rtt is None:
            self.prev_rtt = rtt_ns
            return self.rate_bps
        new_diff = rtt_ns - self.prev_rtt
        self.prev_rtt = rtt_ns
        self.rtt_diff = (1 - self.alpha) * self.rtt_diff + self.alpha * new_diff
        gradient = self.rtt_diff / self.min_rtt_ns
        delta = self.delta_fraction * self.line_rate_bps
        if rtt_ns < self.t_low_ns:
            self._increase(delta)
        elif rtt_ns > self.t_high_ns:
            self.increases = 0
            self.rate_bps *= 1 - self.beta * (1 - self.t_high_ns / rtt_ns)
        elif gradient <= 0:
            self._increase(delta)
        else:
            self.increases = 0
            self.rate_bps *= 1 - self.beta * min(gradient, 1.0)
        self.rate_bps = min(self.line_rate_bps, max(self.min_rate_fraction * self.line_rate_bps, self.rate_bps))
        return self.rate_bps

    def _increase(self, delta: float) -> None:
        self.increases += 1
        self.rate_bps += delta * (5 if self.increases >= self.hai_after else 1)
