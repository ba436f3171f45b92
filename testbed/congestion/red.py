"""RED-style ECN marking: the probability curve a switch egress applies on dequeue.

Why one curve here: the ns-3 packet engine, the emulation's marker and the tests must agree on
it exactly. It is HPCC's SwitchMmu::ShouldSendCN (alibaba-edu/High-Precision-Congestion-Control,
simulation/src/point-to-point/model/switch-mmu.cc, lines 99-110): on the egress queue's bytes,
probability 0 up to Kmin, Pmax x (q - Kmin) / (Kmax - Kmin) above Kmin up to Kmax, 1 above Kmax.
Thresholds are given per 25 Gb/s of port rate and scale linearly with it (run.py's KMIN_MAP /
KMAX_MAP: 100 x bw / 25 KB and 400 x bw / 25 KB).
"""

from __future__ import annotations

RATE_UNIT_BPS = 25_000_000_000  # thresholds and DCQCN steps are given per 25 Gb/s


def per_25g(value_per_25g: int, port_rate_bps: float) -> int:
    """A per-25 Gb/s quantity at `port_rate_bps`, rounded down to a whole unit (bytes or bit/s)."""
    return int(value_per_25g * int(port_rate_bps) // RATE_UNIT_BPS)


def mark_probability(queue_bytes: int, kmin_bytes: int, kmax_bytes: int, pmax: float) -> float:
    """The chance that a packet leaving an egress queue of `queue_bytes` is marked CE."""
    if queue_bytes > kmax_bytes:
        return 1.0
    if queue_bytes > kmin_bytes:
        return pmax * (queue_bytes - kmin_bytes) / (kmax_bytes - kmin_bytes)
    return 0.0
