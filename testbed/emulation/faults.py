"""Fault injection inside a live fabric's hosts (nftables netdev ingress: before the agent's
packet socket sees a frame, so a drop here is a real loss to the transport)."""

from __future__ import annotations

from contextlib import contextmanager

from .probes import LiveRun


@contextmanager
def ingress_loss(live: LiveRun, port_name: str, percent: float, udp_dport: int = 4791):
    if not 0 < percent < 100:
        raise ValueError(f"loss percent must be in (0, 100), got {percent}")
    fab = live.fabric
    port = next(p for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu] if p.name == port_name)
    host = fab.nodes[port.node].name
    table = f"zlabloss_{port_name.replace('-', '_')}"
    cmds = [
        ["nft", "add", "table", "netdev", table],
        [
            "nft",
            "add",
            "chain",
            "netdev",
            table,
            "in",
            f'{{ type filter hook ingress device "{port_name}" priority 0; }}',
        ],
        [
            "nft",
            "add",
            "rule",
            "netdev",
            table,
            "in",
            "udp",
            "dport",
            str(udp_dport),
            "numgen",
            "random",
            "mod",
            "10000",
            "<",
            str(int(percent * 100)),
            "counter",
            "drop",
        ],
    ]
    for c in cmds:
        r = live.in_host(host, c)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(c)}: {r.stderr.strip()}")
    try:
        yield
    finally:  # a loss rule left behind would keep dropping frames: a failed delete raises
        c = ["nft", "delete", "table", "netdev", table]
        r = live.in_host(host, c)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(c)}: {r.stderr.strip()}")
