"""Failures as data, and degraded forwarding tables as a pure function of (fabric, failures,
repair policy).

Why a function of the tables: the healthy tables are what the controller installs; a degraded
fabric is those tables after (1) the kind's fabric repair (ZCube's detour transit rules), (2)
withdrawal — every entry whose next hop is down, or leads to a switch that can no longer deliver
the address, loses that member (an ECMP group shrinks; a single path disappears) until nothing
changes, which is what a routing protocol or a rerouting controller converges to. Host-side
port failover is not a table change: the estimator moves a broken subflow to the GPU's other
port (`load.estimate(..., failover=True)`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from .kinds import kind_of
from .model import Fabric
from .params import SpecError
from .paths import dst_address, forwarding_tables, walk
from .tables import Tables, port_peer


@dataclass(frozen=True)
class Failures:
    cables: frozenset = field(default_factory=frozenset)  # link ids
    switches: frozenset = field(default_factory=frozenset)  # node ids

    def link_down(self, fab: Fabric) -> np.ndarray:
        """Per link: down because it failed or one of its ends is a failed switch."""
        down = np.zeros(len(fab.links), dtype=bool)
        down[list(self.cables)] = True
        if self.switches:
            ends = fab.port_node[fab.link_ends]
            down |= np.isin(ends, list(self.switches)).any(axis=1)
        return down

    def describe(self, fab: Fabric) -> str:
        parts = [f"cable {cable_name(fab, c)}" for c in sorted(self.cables)]
        parts += [f"switch {fab.nodes[s].name}" for s in sorted(self.switches)]
        return ", ".join(parts) or "none"

    def __bool__(self) -> bool:
        return bool(self.cables or self.switches)


def cable_name(fab: Fabric, link_id: int) -> str:
    link = fab.links[link_id]
    return f"{fab.ports[link.a].name}<->{fab.ports[link.b].name}"


def parse(fab: Fabric, items: list[str] | None) -> Failures:
    """`cable:PORT` (either end's interface name, e.g. g0-p0 or za0-p5), `cable:NODE1,NODE2` (the
    first cable between two nodes), `switch:NAME`."""
    cables, switches = set(), set()
    ports = {p.name: p for p in fab.ports}
    for item in items or []:
        what, _, ref = item.partition(":")
        if what == "switch":
            node = fab.node_by_name.get(ref)
            if node is None or node.role != "switch":
                raise SpecError(f"--fail switch:{ref}: no switch {ref!r} in {fab.spec} (e.g. {fab.switches[0].name})")
            switches.add(node.id)
        elif what == "cable":
            names = ref.split(",")
            if len(names) == 1 and names[0] in ports:
                lk = int(fab.port_link[ports[names[0]].id])
                if lk < 0:
                    raise SpecError(f"--fail cable:{ref}: port {ref} has no cable")
                cables.add(lk)
            elif len(names) == 2 and all(n in fab.node_by_name for n in names):
                a, b = (fab.node_by_name[n].id for n in names)
                found = [l.id for l in fab.links if {fab.ports[l.a].node, fab.ports[l.b].node} == {a, b}]
                if not found:
                    raise SpecError(f"--fail cable:{ref}: no cable joins {names[0]} and {names[1]}")
                cables.add(found[0])
            else:
                raise SpecError(
                    f"--fail cable:{ref}: give a port (g0-p0, {fab.switches[0].name}-p1) or two node "
                    f"names joined by a cable (e.g. {cable_nodes_example(fab)})"
                )
        else:
            raise SpecError(f"--fail {item!r}: expected cable:PORT, cable:NODE1,NODE2 or switch:NAME")
    return Failures(frozenset(cables), frozenset(switches))


def cable_nodes_example(fab: Fabric) -> str:
    link = next(l for l in fab.links if l.kind == "fabric")
    return f"{fab.nodes[fab.ports[link.a].node].name},{fab.nodes[fab.ports[link.b].node].name}"


def policies(fab: Fabric) -> tuple[str, ...]:
    return kind_of(fab).repair_policies


def check_policy(fab: Fabric, policy: str | None) -> str:
    kind = kind_of(fab)
    policy = policy or kind.repair_policies[0]
    if policy not in kind.repair_policies:
        raise SpecError(f"{kind.name}: repair policy {policy!r}; valid: {', '.join(kind.repair_policies)}")
    return policy


@dataclass
class Degraded:
    tables: Tables
    failures: Failures
    policy: str
    failover: bool  # host-side port failover (the estimator moves broken subflows)
    link_down: np.ndarray
    repaired_entries: int  # table entries the kind's repair added or changed
    withdrawn_entries: int  # entries that lost their last member


def degrade(fab: Fabric, failures: Failures, policy: str | None = None) -> Degraded:
    """The tables a repaired fabric forwards with. Pure: the healthy tables are not touched."""
    kind = kind_of(fab)
    policy = check_policy(fab, policy)
    base = forwarding_tables(fab)
    down = failures.link_down(fab)
    ng = base.next_group.copy()
    n_ports = len(fab.ports)
    port_down = np.zeros(n_ports, dtype=bool)
    cabled = fab.port_link >= 0
    port_down[cabled] = down[fab.port_link[cabled]]
    rows = base.switch_rows
    for s in failures.switches:
        ng[rows[s]] = -1
    repaired = 0
    if kind.repair is not None and failures:
        repaired = kind.repair(fab, ng, down, policy, failures)
    groups = list(base.multi_groups)
    index = {g: n_ports + i for i, g in enumerate(groups)}

    def intern(members: tuple) -> int:
        if not members:
            return -1
        if len(members) == 1:
            return int(members[0])
        if members not in index:
            index[members] = n_ports + len(groups)
            groups.append(members)
        return index[members]

    work: list[tuple[int, np.ndarray]] = []  # (switch row, addresses it can no longer deliver)
    # 0. a GPU port whose cable is down is an address nobody can deliver: its column goes at once
    gone = np.nonzero(port_down[: fab.n_gpus * fab.ports_per_gpu])[0]
    gone_entries = int((ng[:, gone] >= 0).sum())
    ng[:, gone] = -1
    # 1. entries whose next hop is a down port
    single = (ng >= 0) & (ng < n_ports)
    dead = single & port_down[np.where(single, ng, 0)]
    for r in np.unique(np.nonzero(dead)[0]):
        work.append((int(r), np.nonzero(dead[r])[0]))
    ng[dead] = -1
    gp = base.group_ports[n_ports:]
    hit_groups = ((gp >= 0) & port_down[np.where(gp >= 0, gp, 0)]).any(axis=1) if len(gp) else np.zeros(0, bool)
    for gid in n_ports + np.nonzero(hit_groups)[0]:
        members = groups[gid - n_ports]
        new = intern(tuple(p for p in members if not port_down[p]))
        hit = ng == gid
        ng[hit] = new
        if new < 0:
            for r in np.unique(np.nonzero(hit)[0]):
                work.append((int(r), np.nonzero(hit[r])[0]))
    # 2. withdrawal: a switch that cannot deliver an address removes itself from its neighbours' entries
    toward = _toward(fab)  # switch node -> ports of other switches facing it
    switch_of_row = np.array([sw.id for sw in fab.switches])
    withdrawn = int(dead.sum()) + gone_entries
    pending: dict[int, list[np.ndarray]] = defaultdict(list)
    for r, addrs in work:
        pending[r].append(addrs)
    work = []
    while pending or work:
        for r, addrs in work:
            pending[r].append(addrs)
        work = []
        r = next(iter(pending))
        addrs = np.unique(np.concatenate(pending.pop(r)))  # one pass per switch for all it lost
        for q in toward.get(int(switch_of_row[r]), ()):
            if port_down[q]:
                continue
            rs = rows[fab.port_node[q]]
            g = ng[rs, addrs]
            hit_single = g == q
            if hit_single.any():
                lost = addrs[hit_single]
                ng[rs, lost] = -1
                withdrawn += lost.size
                work.append((int(rs), lost))
            multi = g >= n_ports
            if multi.any():
                ma, mg = addrs[multi], g[multi]
                uniq, inv = np.unique(mg, return_inverse=True)  # many addresses share one group
                new = np.array(
                    [
                        intern(tuple(p for p in groups[u - n_ports] if p != q)) if q in groups[u - n_ports] else u
                        for u in uniq
                    ],
                    dtype=np.int64,
                )
                ng[rs, ma] = new[inv]
                lost = ma[new[inv] < 0]
                if lost.size:
                    withdrawn += int(lost.size)
                    work.append((int(rs), lost))
    failover = policy in kind.failover_policies
    return Degraded(Tables(fab, ng, groups), failures, policy, failover, down, repaired, withdrawn)


def _toward(fab: Fabric) -> dict[int, list[int]]:
    """switch node -> the ports of neighbouring switches cabled to it (cached on the fabric)."""
    if "toward" not in fab._cache:
        peer, rows = port_peer(fab), forwarding_tables(fab).switch_rows
        toward: dict[int, list[int]] = defaultdict(list)
        for link in fab.links:
            for p in (link.a, link.b):
                q = peer[p]
                if rows[fab.port_node[p]] >= 0 and rows[fab.port_node[q]] >= 0:
                    toward[int(fab.port_node[q])].append(int(p))
        fab._cache["toward"] = dict(toward)
    return fab._cache["toward"]


def single_failures(fab: Fabric, what: str = "all") -> list[Failures]:
    """Every single cable failure and every single switch failure (what: cables | switches | all)."""
    out = []
    if what in ("cables", "all"):
        out += [Failures(cables=frozenset([l.id])) for l in fab.links]
    if what in ("switches", "all"):
        out += [Failures(switches=frozenset([s.id])) for s in fab.switches]
    return out


def crossing(fab: Fabric, flows: list[tuple[str, str, int]], links, tables=None) -> list[bool]:
    """Per (source port, destination port, UDP source port): does its path (healthy tables unless
    given) cross any of `links`? The model's answer to 'which QPs does this failure hit'."""
    if not flows:
        return []
    port = {p.name: p.id for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]}
    w = walk(
        fab, [port[s] for s, _, _ in flows], [port[d] for _, d, _ in flows], [sp for _, _, sp in flows], tables=tables
    )
    wanted = set(int(x) for x in links)
    return [any(int(d) // 2 in wanted for d in row if d >= 0) for row in w.dlinks]


def alternate(fab: Fabric, src_port: str, dst_port: str) -> tuple[str, str] | None:
    """The QP's other path for host failover: the GPU's other port, and the destination's
    address for that port's role (ZCube: cons -> rail, rail -> cons). None: one port per GPU."""
    if fab.ports_per_gpu < 2:
        return None
    port = {p.name: p for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]}
    s, d = port[src_port], port[dst_port]
    other = next(p for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu] if p.node == s.node and p.id != s.id)
    da = int(dst_address(fab, s.node, other.role, d.node))
    return other.name, fab.ports[da].name
