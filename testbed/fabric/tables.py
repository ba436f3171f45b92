"""Forwarding state as dense tables: next_group[switch row, address] -> group of output ports.

Why dense tables: they are exactly what the controller installs, and every path the model
reports is a walk of them (see paths.py), vectorised so 16,384-GPU fabrics take seconds.
Each kind's module fills a Tables with its own rule; nothing here knows the kinds.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from .ecmp import U64, switch_seed
from .model import Fabric


class Tables:
    """Dense forwarding state: next_group[switch row, address] -> group of output ports.

    Group ids below len(fabric.ports) are singletons (group id == port id); higher ids are
    multi-port ECMP groups, chosen per flow by ecmp_member with the switch's seed.
    """

    def __init__(self, fabric: Fabric, next_group: np.ndarray, multi_groups: list[tuple[int, ...]]):
        self.fabric = fabric
        self.next_group = next_group
        self.multi_groups = multi_groups
        n_ports = len(fabric.ports)
        kmax = max([1] + [len(g) for g in multi_groups])
        gp = np.full((n_ports + len(multi_groups), kmax), -1, dtype=np.int64)
        gp[:n_ports, 0] = np.arange(n_ports)
        size = np.ones(n_ports + len(multi_groups), dtype=np.int64)
        for i, g in enumerate(multi_groups):
            gp[n_ports + i, : len(g)] = g
            size[n_ports + i] = len(g)
        self.group_ports = gp
        self.group_size = size

    @cached_property
    def switch_rows(self) -> np.ndarray:
        """node id -> row in next_group (-1 for GPUs)."""
        rows = np.full(len(self.fabric.nodes), -1, dtype=np.int64)
        for r, sw in enumerate(self.fabric.switches):
            rows[sw.id] = r
        return rows

    @cached_property
    def seeds(self) -> np.ndarray:
        return switch_seed(np.array([sw.dpid for sw in self.fabric.switches], dtype=U64))

    @cached_property
    def ecmp_lanes(self) -> tuple[np.ndarray, int]:
        """(lane per switch row, number of lanes): every tier whose switches hold multi-port
        groups gets its own lane of UDP-source-port bits (ecmp.ecmp_window), so the choices of
        ECMP switches in series are independent. -1 for switches without groups."""
        n_ports = len(self.fabric.ports)
        tiers = np.array([sw.tier for sw in self.fabric.switches], dtype=np.int64)
        has_multi = (self.next_group >= n_ports).any(axis=1)
        ecmp_tiers = sorted(set(tiers[has_multi].tolist()))
        lane = np.array([ecmp_tiers.index(t) if t in ecmp_tiers else -1 for t in tiers.tolist()], dtype=np.int64)
        return lane, max(1, len(ecmp_tiers))

    def group_members(self, group: int) -> tuple[int, ...]:
        return tuple(int(p) for p in self.group_ports[group, : self.group_size[group]])

    def entries(self, switch: str) -> list[dict]:
        """The switch's table as flow entries: one exact /32 entry per address it forwards.

        The most common multi-port group becomes a single default entry (priority below the
        /32s), which is how a rail leaf sends everything non-local up to the spines.
        """
        fab = self.fabric
        node = fab.node_by_name[switch]
        row = self.next_group[self.switch_rows[node.id]]
        n_ports = len(fab.ports)
        addrs = np.nonzero(row >= 0)[0]
        default_group = None
        multi = row[addrs][row[addrs] >= n_ports]
        if multi.size:
            vals, counts = np.unique(multi, return_counts=True)
            if counts.max() > 1:
                default_group = int(vals[np.argmax(counts)])
        out = []
        port_num = {p: fab.ports[p].number for p in range(n_ports) if fab.ports[p].node == node.id}
        for a in addrs:
            g = int(row[a])
            if g == default_group:
                continue
            out.append(
                {"dst_ip": fab.ports[a].ip, "prefix_len": 32, "out_ports": [port_num[p] for p in self.group_members(g)]}
            )
        if default_group is not None:
            out.append(
                {
                    "dst_ip": "10.0.0.0",
                    "prefix_len": 8,
                    "out_ports": [port_num[p] for p in self.group_members(default_group)],
                }
            )
        return out


class GroupIndex:
    """Interns multi-port ECMP groups: one id per distinct port tuple, above the port ids."""

    def __init__(self, fabric: Fabric):
        self.n_ports = len(fabric.ports)
        self.multi: list[tuple[int, ...]] = []
        self._index: dict[tuple[int, ...], int] = {}

    def __call__(self, ports) -> int:
        ports = tuple(int(p) for p in ports)
        if len(ports) == 1:
            return ports[0]
        if ports not in self._index:
            self._index[ports] = self.n_ports + len(self.multi)
            self.multi.append(ports)
        return self._index[ports]


def ports_between(fabric: Fabric) -> dict[tuple[int, int], list[int]]:
    """(switch node, neighbour node) -> that switch's port ids toward it, by port number."""
    out: dict[tuple[int, int], list[int]] = {}
    for link in fabric.links:
        na, nb = fabric.ports[link.a].node, fabric.ports[link.b].node
        out.setdefault((na, nb), []).append(link.a)
        out.setdefault((nb, na), []).append(link.b)
    for v in out.values():
        v.sort(key=lambda p: fabric.ports[p].number)
    return out


def port_peer(fabric: Fabric) -> np.ndarray:
    """port id -> the port at the other end of its cable (-1 if uncabled)."""
    if "port_peer" not in fabric._cache:
        peer = np.full(len(fabric.ports), -1, dtype=np.int64)
        ends = fabric.link_ends
        peer[ends[:, 0]] = ends[:, 1]
        peer[ends[:, 1]] = ends[:, 0]
        fabric._cache["port_peer"] = peer
    return fabric._cache["port_peer"]
