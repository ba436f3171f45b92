"""A GPU host's addressing as `ip` commands (pure): each NIC port's address, which port the
traffic to each destination address leaves through (the kind's address rule) as a few prefix
routes, and a permanent neighbour entry per destination. The Mininet builder and the
containerlab export both use it.

Why prefixes: each plane's addresses are one /16 (`ids.gpu_ip`), so a port needs one route per
plane it reaches (plus /32 exceptions where the address rule splits a plane between ports), not
one per destination: half of a host's commands at any size. The neighbour entries stay one per
destination: the frame must carry the destination NIC's own MAC, because the receiving kernel's
TCP drops frames not addressed to it (iperf3's control connection), and nothing in the fabric
answers ARP (nothing floods)."""

from __future__ import annotations

import ipaddress
from collections import Counter

import numpy as np

from .model import Fabric
from .paths import dst_address


def _plane_net(ip: str) -> str:
    """The /16 holding an address (ids.gpu_ip: 10.<plane>.<hi>.<lo>): string work, not ipaddress,
    because it runs for every port of every host (2 million times at 1,024 GPUs)."""
    a, b, _, _ = ip.split(".")
    return f"{a}.{b}.0.0/16"


def routes(fab: Fabric, gpu: int) -> list[tuple[str, str | None]]:
    """(destination prefix, source port name or None = unreachable) for one GPU (see _plan)."""
    return _plan(fab, gpu)[0]


def neighbours(fab: Fabric, gpu: int) -> dict[tuple[str, str], str]:
    """{(destination ip, source port name): destination mac}: the permanent neighbour entries of
    one GPU's host, one per address the address rule sends it to (ip_commands writes them; the
    cover proof compares a host's table with them)."""
    return {(fab.ports[a].ip, name): fab.ports[a].mac for a, name in sorted(_plan(fab, gpu)[1].items())}


def _plan(fab: Fabric, gpu: int) -> tuple[list[tuple[str, str | None]], dict[int, str]]:
    """The routes, and per destination port id the source port the address rule sends it from.
    Routes: (destination prefix, source port name or None = unreachable), exact for every
    other GPU's addresses: per plane, the port that reaches most of the plane's addresses gets
    the /16; the plane's other addresses get /32s to their own port, or `unreachable` where the
    address rule gives them to no port (nothing falls through to a wrong port)."""
    ports = [fab.gpu_port(gpu, k) for k in range(fab.ports_per_gpu)]
    others = np.array([g for g in range(fab.n_gpus) if g != gpu], dtype=np.int64)
    via: dict[int, str] = {}  # destination port id -> the source port it leaves through
    for p in ports:
        for a in dst_address(fab, np.full(others.size, gpu), p.role, others).tolist():
            if via.setdefault(a, p.name) != p.name:
                raise ValueError(
                    f"{fab.spec}: {fab.ports[a].name}'s address is reached from both {via[a]} and {p.name}, and a "
                    "host's routing table chooses by destination alone (e.g. zcube shortcut=1); the emulation "
                    "cannot configure this fabric's hosts"
                )
    planes: dict[str, list[int]] = {}
    gp = fab.n_gpus * fab.ports_per_gpu
    own = {p.id for p in ports}
    for q in fab.ports[:gp]:
        if q.node != ports[0].node and q.id not in own:
            planes.setdefault(_plane_net(q.ip), []).append(q.id)
    out: list[tuple[str, str | None]] = []
    for net, members in sorted(planes.items(), key=lambda kv: ipaddress.IPv4Network(kv[0])):
        reached = Counter(via[m] for m in members if m in via)
        if not reached:
            continue  # no port reaches this plane: no route, the kernel says unreachable itself
        main, _ = max(reached.items(), key=lambda kv: (kv[1], kv[0]))
        out.append((net, main))
        out += [(f"{fab.ports[m].ip}/32", via.get(m)) for m in members if via.get(m) != main]
    return out, via


def ip_commands(fab: Fabric, gpu: int, mtu_bytes: int) -> list[str]:
    """`ip` subcommands (no leading `ip`), in order: links up, addresses, routes, neighbours."""
    ports = {p.name: p for p in (fab.gpu_port(gpu, k) for k in range(fab.ports_per_gpu))}
    out = []
    for p in ports.values():
        out.append(f"link set dev {p.name} mtu {mtu_bytes} up")
        out.append(f"addr add {p.ip}/32 dev {p.name}")
    rs, _ = _plan(fab, gpu)
    for prefix, name in rs:
        out.append(
            f"route add unreachable {prefix}" if name is None else f"route add {prefix} dev {name} src {ports[name].ip}"
        )
    for (ip, name), mac in neighbours(fab, gpu).items():
        out.append(f"neigh replace {ip} lladdr {mac} dev {name} nud permanent")
    return out
