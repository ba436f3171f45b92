"""A GPU host's addressing as `ip` commands (pure): each NIC port's address, and per destination
address the port its traffic leaves through (the kind's address rule) with a permanent
neighbour entry. The Mininet builder and the containerlab export both use it."""

from __future__ import annotations

import numpy as np

from .model import Fabric
from .paths import dst_address


def ip_commands(fab: Fabric, gpu: int, mtu_bytes: int) -> list[str]:
    """`ip` subcommands (no leading `ip`), in order: links up, addresses, routes, neighbours."""
    ports = [fab.gpu_port(gpu, k) for k in range(fab.ports_per_gpu)]
    out = []
    for p in ports:
        out.append(f"link set dev {p.name} mtu {mtu_bytes} up")
        out.append(f"addr add {p.ip}/32 dev {p.name}")
    others = np.array([g for g in range(fab.n_gpus) if g != gpu])
    for p in ports:
        # per source port: the destination addresses that leave through it (the address rule;
        # with the shortcut policy in the spec, same-switch peers' same-plane addresses)
        for a in dst_address(fab, np.full(others.size, gpu), p.role, others).tolist():
            q = fab.ports[a]
            out.append(f"route add {q.ip}/32 dev {p.name} src {p.ip}")
            out.append(f"neigh replace {q.ip} lladdr {q.mac} dev {p.name} nud permanent")
    return out
