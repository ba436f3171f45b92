"""A repeat's message schedule as posted: order, QP source ports, sizes and due times.

Why a pure function of the resolved repeat: the emulation's runner writes it as
raw/rep<k>/schedule.json when it posts, and the ns-3 engine runs the same list, so both engines
replay one schedule (same plan, same QPs and UDP source ports from the repeat's seed, same
posting order). Nothing here reads a clock or a live fabric.
"""

from __future__ import annotations

from .resolve import Repeat


def messages(rep: Repeat) -> list[dict]:
    """Every message of the repeat in posting order (the order of rep.messages), with its QP's UDP
    source port and its due time in ns after the replay's t0 (emulated units)."""
    out = []
    for msg in rep.messages:
        t = rep.plan.transfers[msg.transfer]
        out.append(
            {
                "src_port": msg.src_port,
                "dst_port": msg.dst_port,
                "sport": rep.qps[(msg.src_port, msg.dst_port)],
                "size_bytes": msg.size_bytes,
                "real_bytes": msg.real_bytes,
                "t_due_ns": int(t.t_post_s * 1e9),
                "req": t.req,
                "shard": t.shard,
            }
        )
    return out
