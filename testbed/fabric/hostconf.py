"""A GPU host's addressing as `ip` commands (pure): each NIC port's address, and which port the
traffic to each destination address leaves through (the kind's address rule), as a few prefix
routes through one on-link gateway per port. The Mininet builder and the containerlab export
both use it.

Why a gateway and prefixes, not a /32 route and a neighbour per destination: the switches
forward on the IPv4 destination alone (controllers/ install ipv4_dst entries), so the frame's
destination MAC only has to be accepted by the receiving host. A /32 route and a permanent
neighbour per destination made host configuration grow with GPUs squared (2 x 2,046 commands in
each of 1,024 hosts: 248 s of a 1,024-GPU bring-up). Each plane's addresses are one /16
(`ids.gpu_ip`), so a port gets one route per plane it reaches (plus /32 exceptions where the
address rule splits a plane between ports, e.g. ZCube's shortcut) via GATEWAY_IP, whose one
permanent neighbour entry is GATEWAY_MAC, a locally administered group address: every host
accepts unicast IP in an L2 group frame (net.ipv4.conf.*.drop_unicast_in_l2_multicast = 0,
the kernel's default, set explicitly by the host script). This is only the kernel stack's
traffic (probes, ping, iperf3 calibration); the agents build their RoCE frames themselves with
the destination NIC's own MAC."""

from __future__ import annotations

import ipaddress
from collections import Counter

import numpy as np

from .model import Fabric
from .paths import dst_address

GATEWAY_IP = "169.254.90.1"  # link-local: never a GPU address, never on the wire as an IP
GATEWAY_MAC = "03:5a:00:00:00:00"  # group bit set, locally administered ('5a' = 'Z'), never a NIC's


def _plane_net(ip: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"{ip}/16", strict=False)  # ids.gpu_ip: 10.<plane>.<hi>.<lo>


def routes(fab: Fabric, gpu: int) -> list[tuple[str, str | None]]:
    """(destination prefix, source port name or None = unreachable) for one GPU, exact for every
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
    planes: dict[ipaddress.IPv4Network, list[int]] = {}
    gp = fab.n_gpus * fab.ports_per_gpu
    own = {p.id for p in ports}
    for q in fab.ports[:gp]:
        if q.node != ports[0].node and q.id not in own:
            planes.setdefault(_plane_net(q.ip), []).append(q.id)
    out: list[tuple[str, str | None]] = []
    for net, members in sorted(planes.items(), key=lambda kv: int(kv[0].network_address)):
        reached = Counter(via[m] for m in members if m in via)
        if not reached:
            continue  # no port reaches this plane: no route, the kernel says unreachable itself
        main, _ = max(reached.items(), key=lambda kv: (kv[1], kv[0]))
        out.append((str(net), main))
        out += [(f"{fab.ports[m].ip}/32", via.get(m)) for m in members if via.get(m) != main]
    return out


def ip_commands(fab: Fabric, gpu: int, mtu_bytes: int) -> list[str]:
    """`ip` subcommands (no leading `ip`), in order: links up, addresses, the gateway's neighbour
    entry, routes."""
    ports = {p.name: p for p in (fab.gpu_port(gpu, k) for k in range(fab.ports_per_gpu))}
    out = []
    for p in ports.values():
        out.append(f"link set dev {p.name} mtu {mtu_bytes} up")
        out.append(f"addr add {p.ip}/32 dev {p.name}")
        out.append(f"neigh replace {GATEWAY_IP} lladdr {GATEWAY_MAC} dev {p.name} nud permanent")
    for prefix, name in routes(fab, gpu):
        if name is None:
            out.append(f"route add unreachable {prefix}")
        else:
            out.append(f"route add {prefix} via {GATEWAY_IP} dev {name} onlink src {ports[name].ip}")
    return out
