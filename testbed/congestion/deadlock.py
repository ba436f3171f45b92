"""PFC deadlock as a pure function of the forwarding tables: the cyclic buffer dependency check.

Why: in a lossless fabric a packet held in a switch's ingress buffer waits for buffer at the next
hop. If the routes the tables give chain such waits into a cycle, every buffer on the cycle can
fill and pause the one before it, and nothing drains: a deadlock (Hu et al., "Deadlocks in
Datacenter Networks: Why Do They Form, and How to Avoid Them", HotNets'16; Tagger, CoNEXT'17).
No cycle in the dependency graph means no routing deadlock, whatever the load. The check needs
no traffic and no simulation: only which link a packet to a destination can leave by, having
arrived by which link, which is exactly what the tables say.

Graph: a node per directed link (the buffer its packets occupy at the receiving switch); an edge
l -> l' when a packet that arrived at a switch over l can leave it over l' toward some destination.
Only arrivals that really happen count: for each destination, the links that carry traffic to it
are found by walking the tables from every GPU port, so a turn no route takes (e.g. down then up
in a fat-tree) adds no edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..fabric.model import Fabric
from ..fabric.paths import forwarding_tables
from ..fabric.tables import Tables, port_peer


@dataclass
class DeadlockReport:
    state: str  # "healthy" or the failure's description
    dependencies: int  # edges of the buffer dependency graph
    links_used: int  # directed links that carry traffic to some destination
    cycle: list[str] = field(default_factory=list)  # directed links "a-pN->b-pM" forming a cycle, if any

    @property
    def acyclic(self) -> bool:
        return not self.cycle

    def as_dict(self) -> dict:
        return {
            "state": self.state,
            "acyclic": self.acyclic,
            "dependencies": self.dependencies,
            "links_used": self.links_used,
            "cycle": self.cycle,
        }


def _out_dlink(fab: Fabric, port: int) -> int:
    """Directed link id (2*link + direction) of a packet leaving `port`."""
    lk = int(fab.port_link[port])
    return 2 * lk + int(fab.link_ends[lk, 0] != port)


def dependencies(fab: Fabric, tables: Tables | None = None) -> tuple[set[tuple[int, int]], set[int]]:
    """(edges l -> l' between directed links, directed links carrying traffic) over every
    destination GPU port, walking the tables from every GPU port (ECMP: every member)."""
    t = tables if tables is not None else forwarding_tables(fab)
    peer = port_peer(fab)
    n_gpu_ports = fab.n_gpus * fab.ports_per_gpu
    cabled = [p for p in range(n_gpu_ports) if fab.port_link[p] >= 0]
    edges: set[tuple[int, int]] = set()
    used: set[int] = set()
    for dst in range(n_gpu_ports):
        # frontier: ports a packet to dst arrives on at a switch (the peer of the port it left by)
        seen: set[int] = set()
        frontier = [(peer[p], _out_dlink(fab, p)) for p in cabled if p != dst]
        while frontier:
            nxt = []
            for in_port, in_dlink in frontier:
                node = int(fab.port_node[in_port])
                row = t.switch_rows[node]
                if row < 0:  # arrived at a GPU
                    continue
                g = int(t.next_group[row, dst])
                if g < 0:
                    continue
                used.add(in_dlink)
                for op in t.group_members(g):
                    d = _out_dlink(fab, op)
                    edges.add((in_dlink, d))
                    if d not in seen:
                        seen.add(d)
                        nxt.append((peer[op], d))
            frontier = nxt
    return edges, used


def find_cycle(edges: set[tuple[int, int]]) -> list[int]:
    """One cycle of the directed graph as its nodes in order, or [] if it has none
    (iterative depth-first search: white / grey / black)."""
    succ: dict[int, list[int]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    colour: dict[int, int] = {}
    for root in succ:
        if colour.get(root):
            continue
        stack = [(root, iter(succ.get(root, ())))]
        path = [root]
        colour[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                path.pop()
                continue
            c = colour.get(nxt, 0)
            if c == 1:
                return path[path.index(nxt) :]
            if c == 0:
                colour[nxt] = 1
                stack.append((nxt, iter(succ.get(nxt, ()))))
                path.append(nxt)
    return []


def dlink_name(fab: Fabric, d: int) -> str:
    lk, direction = divmod(d, 2)
    a, b = (int(x) for x in fab.link_ends[lk])
    if direction:
        a, b = b, a
    return f"{fab.ports[a].name}->{fab.ports[b].name}"


def check(fab: Fabric, tables: Tables | None = None, state: str = "healthy") -> DeadlockReport:
    edges, used = dependencies(fab, tables)
    cycle = find_cycle(edges)
    return DeadlockReport(state, len(edges), len(used), [dlink_name(fab, d) for d in cycle])


FAILURE_SETS = ("none", "cables", "switches", "all", "cable-pairs")


def failure_cases(fab: Fabric, what: str):
    """The failure states to check: single cables, single switches, both, or every pair of
    switch-to-switch cables (where repairs that detour can chain into cycles)."""
    import itertools

    from ..fabric import failures as fl

    if what == "none":
        return []
    if what != "cable-pairs":
        return fl.single_failures(fab, what)
    switch = {n.id for n in fab.switches}
    fabric_links = [lk.id for lk in fab.links if all(int(fab.port_node[p]) in switch for p in fab.link_ends[lk.id])]
    return [fl.Failures(cables=frozenset(pair)) for pair in itertools.combinations(fabric_links, 2)]


def check_failures(fab: Fabric, what: str, policy: str | None, sample: int | None = None, seed: int = 0, progress=None):
    """One report per failure state (failure_cases), on the tables the kind's repair policy
    installs; a random sample of the states when `sample` is given."""
    from ..fabric import failures as fl

    cases = failure_cases(fab, what)
    if sample is not None and sample < len(cases):
        idx = np.random.default_rng(seed).choice(len(cases), size=sample, replace=False)
        cases = [cases[i] for i in sorted(idx)]
    out = []
    for k, f in enumerate(cases, 1):
        deg = fl.degrade(fab, f, policy)
        out.append(check(fab, deg.tables, state=f.describe(fab)))
        if progress:
            progress(k, len(cases))
    return out
