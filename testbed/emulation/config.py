"""Emulation settings and the tc commands they imply — pure, so they are tested offline.

Why refuse instead of warn: Mininet ignores bw > 1000 Mb/s while carrying on; a run built
that way measures something else. (zlab offers no delay or loss options: this kernel has no
netem, and an option that could not be honoured here would be one more silent default.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import RuntimeFailure, UserInputError

MAX_LINK_MBPS = 1000.0  # above this Mininet ignores bw, and one OVS userspace thread cannot keep up
MIN_LINK_MBPS = 0.1  # below this htb's rate is inaccurate
ETH_OVERHEAD_BYTES = 14
# The fabric `zlab doctor --capacity` measures on (emulation/capacity.py); the planner scales its figure
# by the switch ports a larger fabric makes ovs-vswitchd poll (experiment/planner.py).
CAPACITY_SPEC = "zcube:n=4,gpus_per_server=4"


class EmulationError(UserInputError):
    """Emulation settings (or a --miswire choice) the emulator cannot honour."""


class LabFailure(RuntimeFailure):
    """Bringing a fabric up or keeping it up failed (controller, tables, reachability, OVS)."""


@dataclass(frozen=True)
class EmulationConfig:
    rate_scale: float = 1e-4  # emulated rate = model rate x rate_scale (200 Gb/s -> 20 Mb/s)
    mtu_bytes: int = 1500
    queue_limit_pkts: int = 1000  # switch egress queue (pfifo) per port
    host_queue_limit_pkts: int = 1000
    datapath: str = "auto"  # auto | netdev (userspace) | system (kernel)
    # token-bucket depth of every shaper: the largest frame the run sends (0 = one link-MTU
    # frame). One frame, not more: a deeper bucket lets traffic pass unshaped, and transfers
    # then finish faster than their size allows (docs/experiments.md "Scaling, shaping and repeats").
    burst_bytes: int = 0

    def validate(self, fabric) -> None:
        if not self.rate_scale > 0:
            raise EmulationError(f"rate_scale must be > 0 (got {self.rate_scale})")
        fastest = max(l.rate_bps for l in fabric.links) * self.rate_scale / 1e6
        slowest = min(l.rate_bps for l in fabric.links) * self.rate_scale / 1e6
        if fastest > MAX_LINK_MBPS:
            raise EmulationError(
                f"rate_scale {self.rate_scale:g} gives {fastest:g} Mb/s links; the emulator cannot honour more than "
                f"{MAX_LINK_MBPS:g} Mb/s (Mininet ignores it; one OVS thread forwards ~100 k packets/s). "
                f"Use rate_scale <= {MAX_LINK_MBPS * 1e6 / max(l.rate_bps for l in fabric.links):g}"
            )
        if slowest < MIN_LINK_MBPS:
            raise EmulationError(
                f"rate_scale {self.rate_scale:g} gives {slowest:g} Mb/s links; below {MIN_LINK_MBPS:g} Mb/s htb is "
                "inaccurate"
            )
        if not 576 <= self.mtu_bytes <= 9000:
            raise EmulationError(f"mtu_bytes must be 576..9000 (got {self.mtu_bytes})")
        for name in ("queue_limit_pkts", "host_queue_limit_pkts"):
            if getattr(self, name) < 1:
                raise EmulationError(f"{name} must be >= 1")
        if self.burst_bytes and not 64 <= self.burst_bytes <= self.mtu_bytes + ETH_OVERHEAD_BYTES:
            raise EmulationError(
                f"burst_bytes must be one frame, 64..{self.mtu_bytes + ETH_OVERHEAD_BYTES} (got {self.burst_bytes})"
            )
        if self.datapath not in ("auto", "netdev", "system"):
            raise EmulationError(f"datapath must be auto, netdev or system (got {self.datapath!r})")
        if fabric.n_gpus > 1:
            from ..fabric.hostconf import routes

            try:
                routes(fabric, 0)  # a host's routes, before anything is brought up
            except ValueError as exc:
                raise EmulationError(str(exc)) from None

    def to_dict(self) -> dict:
        return asdict(self)


def scaled_rate_bps(rate_bps: int, cfg: EmulationConfig) -> int:
    return int(round(rate_bps * cfg.rate_scale))


def frame_bytes(cfg: EmulationConfig) -> int:
    """The shapers' bucket depth: one frame of the largest size the run sends."""
    return cfg.burst_bytes or cfg.mtu_bytes + ETH_OVERHEAD_BYTES


def tc_commands(dev: str, rate_bps: int, mtu_bytes: int, limit_pkts: int, burst_bytes: int) -> list[str]:
    """htb root shaping to the link rate, with a pfifo leaf that holds (and counts) the queue.

    The bucket holds one frame (burst_bytes): after an idle period the link sends at most that
    much back to back, so no transfer beats its serialisation time by more than one frame.
    A larger packet still passes (htb lets tokens go negative), at exactly the rate.
    """
    frame = mtu_bytes + ETH_OVERHEAD_BYTES
    burst = burst_bytes
    return [
        f"qdisc replace dev {dev} root handle 1: htb default 1",
        f"class replace dev {dev} parent 1: classid 1:1 htb rate {rate_bps}bit ceil {rate_bps}bit "
        f"burst {burst} cburst {burst} quantum {frame}",
        f"qdisc replace dev {dev} parent 1:1 handle 10: pfifo limit {limit_pkts}",
    ]
