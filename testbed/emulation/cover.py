"""A reachability proof that needs far fewer probes than all pairs: the cover.

Why: the all-pairs proof sends one probe per GPU port pair, 2,095,104 at 1,024 GPUs. That is
4.19 M switch forwards, 220 s at the paced rate on this machine, on top of a 165 s build: a
1,024-GPU fabric cannot be verified in 5 minutes that way (docs/emulation.md "What fits this
machine"). But what decides where a pair's packets go is far smaller than the set of pairs:

- a switch forwards on the destination address alone (the app's entries match ipv4_dst, and
  the ECMP buckets udp_src, which a probe fixes: testbed/fabric/paths.walk), so a (switch,
  destination) decision is shared by every pair whose path crosses that switch toward that
  destination;
- a host forwards by its routing table (a /16 per plane: testbed/fabric/hostconf) and writes the
  destination's MAC from its neighbour table, one permanent entry per destination, written at
  bring-up by commands whose every failure fails the bring-up.

So the cover proves every (switch, destination) decision on any pair's model path with one probe
that crosses it (select), the hosts' routing and neighbour tables by reading them from each
host's namespace and comparing them with the plan (host_table_mismatches; the neighbour tables
only up to NEIGHBOURS_READ_MAX entries in all, what reading them costs), and that the probes
went the model's way with the switches' own counters (probes.reachability). Any doubt falls back
to probing every pair it could touch, so a broken entry or route is still named pair by pair."""

from __future__ import annotations

import ipaddress
import socket
import struct

import numpy as np

from ..fabric import hostconf
from ..fabric.model import Fabric

RTF_REJECT = 0x0200  # /proc/net/route flag of an `unreachable` route


def hop_switches(fab: Fabric, out_ports: np.ndarray) -> np.ndarray:
    """(F, H) node id of the switch at each hop of a walk's out_ports, -1 padded."""
    return np.where(out_ports >= 0, fab.port_node[np.maximum(out_ports, 0)], -1)


def decision_keys(fab: Fabric, das: np.ndarray, out_ports: np.ndarray) -> np.ndarray:
    """(F, H) switch-decision ids, -1 padded: switch node id * len(fab.ports) + destination."""
    sw = hop_switches(fab, out_ports)
    return np.where(sw >= 0, sw * len(fab.ports) + das[:, None], -1)


def select(fab: Fabric, sps: np.ndarray, das: np.ndarray, out_ports: np.ndarray, n_hops: np.ndarray) -> np.ndarray:
    """Indices of pairs such that every (switch, destination) decision on any pair's model path,
    and every source port, is crossed by at least one chosen pair; pairs the model cannot route
    (n_hops < 1) are all chosen, so they are probed and named. Greedy from the last hop back: a
    pair chosen for its last decision covers its earlier ones too."""
    keys = decision_keys(fab, das, out_ports)
    n_pairs, depth = keys.shape
    flat = keys.ravel()
    pos = np.nonzero(flat >= 0)[0]
    pair_of, hop_of = pos // depth, pos % depth
    _, kid = np.unique(flat[pos], return_inverse=True)
    covered = np.zeros(kid.max() + 1 if kid.size else 0, dtype=bool)
    chosen = n_hops < 1
    covered[kid[chosen[pair_of]]] = True
    for h in reversed(range(depth)):
        at = hop_of == h
        open_ = at & ~covered[kid]
        if not open_.any():
            continue
        _, first = np.unique(kid[open_], return_index=True)
        new = pair_of[open_][first]
        chosen[new] = True
        covered[kid[np.isin(pair_of, new)]] = True
    missing_src = np.setdiff1d(np.unique(sps), sps[chosen])
    if missing_src.size:
        first_of = {int(s): i for i, s in reversed(list(enumerate(sps.tolist())))}
        chosen[[first_of[int(s)] for s in missing_src]] = True
    return np.nonzero(chosen)[0]


def _hex_ip(h: str) -> str:
    return socket.inet_ntoa(struct.pack("<I", int(h, 16)))


def read_routes(pid: int, proc: str = "/proc") -> set[tuple[str, str | None]]:
    """The main routing table of a process's network namespace: {(prefix, device or None)}."""
    out = set()
    with open(f"{proc}/{pid}/net/route") as fh:
        next(fh)
        for line in fh:
            iface, dest, _gw, flags, _ref, _use, _metric, mask = line.split()[:8]
            plen = ipaddress.IPv4Network(f"0.0.0.0/{_hex_ip(mask)}").prefixlen
            dev = None if int(flags, 16) & RTF_REJECT else iface
            out.add((f"{_hex_ip(dest)}/{plen}", dev))
    return out


def read_neighbours(pid: int, proc: str = "/proc") -> dict[tuple[str, str], str]:
    """The neighbour (ARP) table of a process's network namespace: {(ip, device): mac}."""
    out = {}
    with open(f"{proc}/{pid}/net/arp") as fh:
        next(fh)
        for line in fh:
            ip, _hw, _flags, mac, _mask, dev = line.split()[:6]
            out[(ip, dev)] = mac.lower()
    return out


NEIGHBOURS_READ_MAX = 200_000  # all hosts' neighbour entries together; above, they are not re-read


def host_table_mismatches(fab: Fabric, pid_of, proc: str = "/proc", neighbours: bool = True) -> dict[int, str]:
    """{gpu: what differs} for every GPU whose host's routing or neighbour table is not the plan
    (extra neighbours, e.g. learned ones, are allowed; a missing or changed one is not).
    pid_of(gpu name) -> the pid of a process in that host's namespace.

    neighbours=False reads the routing tables only. Why that exists: the kernel keeps one
    neighbour table for all namespaces and a namespace's read walks all of it (/proc/net/arp
    restarts the walk for each page read): at 1,024 GPUs (2,095,104 permanent entries) one
    host's /proc/net/arp took 5.7 s and its netlink dump (`ip neigh show`) 0.39 s, 97 and 6.6
    minutes for all hosts. A host's routing table is its own and reads in microseconds."""
    out = {}
    for g in range(fab.n_gpus):
        pid = pid_of(fab.nodes[g].name)
        want = {(pre if "/" in pre else f"{pre}/32", dev) for pre, dev in hostconf.routes(fab, g)}
        have = read_routes(pid, proc)
        problems = []
        if have != want:
            gone, extra = sorted(want - have, key=str), sorted(have - want, key=str)
            problems.append(f"routes missing {gone[:3]}, unexpected {extra[:3]}")
        neigh = read_neighbours(pid, proc) if neighbours else None
        bad = (
            [k for k, mac in hostconf.neighbours(fab, g).items() if neigh.get(k) != mac.lower()]
            if neigh is not None
            else []
        )
        if bad:
            problems.append(f"{len(bad)} neighbour entries missing or wrong, e.g. {bad[0][0]} on {bad[0][1]}")
        if problems:
            out[g] = "; ".join(problems)
    return out
