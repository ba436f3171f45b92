"""A switch's shared-buffer MMU with PFC: headroom, XOFF and XON as functions of buffer state.

Why HPCC's model: it is the public packet-level reference the packet engine is checked against
(alibaba-edu/High-Precision-Congestion-Control, simulation/src/point-to-point/model/switch-mmu.cc
and simulation/scratch/third.cc). Bytes are counted per ingress port (one lossless priority):
the first `reserve` bytes of a port are its own; above them a port draws on the shared pool
until it reaches XOFF; what arrives after that (in flight while the pause travels) lands in
the port's headroom. XOFF shrinks as the shared pool fills (dynamic threshold):

    XOFF = (buffer - sum of headroom - sum of reserve - shared in use) / alpha_inv

(switch-mmu.cc GetPfcThreshold, line 92-94; HPCC writes 1/alpha_inv as a shift of 3, third.cc
line 825; it lowers the shift on ports faster than the NIC, which this model leaves out).
Pause when a port holds headroom bytes or its shared bytes reach XOFF; resume when its headroom
is empty and its shared bytes are zero or `resume_offset` below XOFF (CheckShouldPause /
CheckShouldResume, lines 76-84). Headroom per port = factor x rate x link delay (third.cc line
836, factor 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def headroom_bytes(port_rate_bps: float, link_delay_ns: int, factor: int) -> int:
    """Bytes a port must absorb after it sends PAUSE: factor x rate x one-way link delay
    (HPCC's integer arithmetic: whole bytes of rate x delay first, then x factor)."""
    return int(int(port_rate_bps) * int(link_delay_ns) // 8 // 1_000_000_000) * factor


def xoff_bytes(
    buffer_bytes: int, headroom_total_bytes: int, reserve_total_bytes: int, shared_used_bytes: int, alpha_inv: int
) -> int:
    """The dynamic PFC threshold on a port's shared bytes (0 when nothing is left to share)."""
    return max(0, buffer_bytes - headroom_total_bytes - reserve_total_bytes - shared_used_bytes) // alpha_inv


@dataclass
class SharedBufferMmu:
    """One switch's ingress accounting (one lossless priority), as HPCC's SwitchMmu does it."""

    buffer_bytes: int
    headroom_bytes_per_port: dict[int, int]  # port -> its headroom
    reserve_bytes: int = 4096
    resume_offset_bytes: int = 3072
    alpha_inv: int = 8
    ingress_bytes: dict[int, int] = field(default_factory=dict)  # reserve + shared, per port
    hdrm_used_bytes: dict[int, int] = field(default_factory=dict)
    shared_used_bytes: int = 0
    paused: dict[int, bool] = field(default_factory=dict)

    @property
    def xoff_bytes(self) -> int:
        return xoff_bytes(
            self.buffer_bytes,
            sum(self.headroom_bytes_per_port.values()),
            self.reserve_bytes * len(self.headroom_bytes_per_port),
            self.shared_used_bytes,
            self.alpha_inv,
        )

    def port_shared_bytes(self, port: int) -> int:
        return max(0, self.ingress_bytes.get(port, 0) - self.reserve_bytes)

    def admits(self, port: int, size_bytes: int) -> bool:
        """False: the headroom is full and the shared share is spent, the packet is dropped."""
        return not (
            size_bytes + self.hdrm_used_bytes.get(port, 0) > self.headroom_bytes_per_port[port]
            and size_bytes + self.port_shared_bytes(port) > self.xoff_bytes
        )

    def enqueue(self, port: int, size_bytes: int) -> str:
        """Account an admitted packet; returns the pool it went to: reserve, shared or headroom."""
        new = self.ingress_bytes.get(port, 0) + size_bytes
        if new <= self.reserve_bytes:
            self.ingress_bytes[port] = new
            return "reserve"
        if new - self.reserve_bytes > self.xoff_bytes:
            self.hdrm_used_bytes[port] = self.hdrm_used_bytes.get(port, 0) + size_bytes
            return "headroom"
        self.ingress_bytes[port] = new
        self.shared_used_bytes += min(size_bytes, new - self.reserve_bytes)
        return "shared"

    def dequeue(self, port: int, size_bytes: int) -> None:
        """A packet that came in on `port` left the switch: headroom drains first, then shared."""
        from_hdrm = min(self.hdrm_used_bytes.get(port, 0), size_bytes)
        from_shared = min(size_bytes - from_hdrm, self.port_shared_bytes(port))
        self.hdrm_used_bytes[port] = self.hdrm_used_bytes.get(port, 0) - from_hdrm
        self.ingress_bytes[port] = self.ingress_bytes.get(port, 0) - (size_bytes - from_hdrm)
        self.shared_used_bytes -= from_shared

    def should_pause(self, port: int) -> bool:
        return not self.paused.get(port, False) and (
            self.hdrm_used_bytes.get(port, 0) > 0 or self.port_shared_bytes(port) >= self.xoff_bytes
        )

    def should_resume(self, port: int) -> bool:
        if not self.paused.get(port, False):
            return False
        shared = self.port_shared_bytes(port)
        return self.hdrm_used_bytes.get(port, 0) == 0 and (
            shared == 0 or shared + self.resume_offset_bytes <= self.xoff_bytes
        )
