"""Routing oracle: the flow entries a run installed (flows.json), checked against the cabling
alone (fabric.json's nodes, ports and links), with shortest paths computed here and not by
testbed/fabric.

Why: the emulation and the ns-3 replay both execute flows.json, so their link bytes agree
whatever flows.json says. This oracle asks whether what it says is right, from the graph:
- every (source NIC, destination NIC) pair the entries route is delivered, loop-free, to the
  destination, along a shortest path of the switch graph (breadth-first search below);
- where the shortest path is unique (ZCube by construction), the entries give exactly it;
- where there are several (ECMP), the source ports that reach a switch divide over its members
  in equal shares, within SHARE_TOLERANCE: per (source, destination, switch), so a hash whose
  choice at one hop repeats the choice made upstream (polarised: the old XOR hash over the same
  bits) shows as a member that gets almost nothing of what arrives.
The source ports are every value a queue pair can draw (RoCE's dynamic range, 49152-65535).
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..records import read_json

SPORTS = np.arange(49152, 65536, dtype=np.int64)  # the UDP source ports a QP draws (resolve.py's range)
# Two tolerances on the ECMP shares (k members, share s of the source ports reaching the switch):
# - per switch and destination, over every source's arrivals: |s - 1/k| * k <= SHARE_TOLERANCE;
# - per (source, destination, switch) with >= MIN_ARRIVALS source ports arriving: s * k >=
#   STARVE_FLOOR for every member. Per-switch tables over overlapping windows of the same 14 bits
#   are not exactly independent per hop (measured: a member down to 0.44 of its fair share for
#   one pair), but a polarised hash, whose choice repeats the upstream one, gives a member nothing.
SHARE_TOLERANCE = 0.25
STARVE_FLOOR = 0.2
MIN_ARRIVALS = 256


def _ip(s: str | None) -> int:
    if not s:
        return 0
    a, b, c, d = (int(x) for x in s.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


@dataclass
class Graph:
    """fabric.json as plain arrays: which port is whose, and which port faces which."""

    node_name: dict[int, str]
    is_switch: dict[int, bool]
    port_node: dict[int, int]
    port_number: dict[int, int]
    port_name: dict[int, str]
    port_ip: dict[int, int]
    peer: dict[int, int]
    by_number: dict[tuple[int, int], int] = field(default_factory=dict)

    @classmethod
    def load(cls, fabric_json: Path) -> Graph:
        doc = read_json(fabric_json)
        rows = lambda kind: [dict(zip(doc[f"{kind}_fields"], r)) for r in doc[f"{kind}s"]]  # noqa: E731
        nodes, ports, links = rows("node"), rows("port"), rows("link")
        peer = {}
        for lk in links:
            peer[lk["a"]], peer[lk["b"]] = lk["b"], lk["a"]
        g = cls(
            {n["id"]: n["name"] for n in nodes},
            {n["id"]: n["role"] == "switch" for n in nodes},
            {p["id"]: p["node"] for p in ports},
            {p["id"]: p["number"] for p in ports},
            {p["id"]: p["name"] for p in ports},
            {p["id"]: _ip(p.get("ip")) for p in ports},
            peer,
        )
        g.by_number = {(p["node"], p["number"]): p["id"] for p in ports}
        return g

    def nic_ports(self) -> list[int]:
        return [p for p, n in self.port_node.items() if not self.is_switch[n] and p in self.peer and self.port_ip[p]]

    def switch_hops(self, node: int) -> list[tuple[int, int]]:
        """(egress port, next switch) for each cable from a switch to a switch."""
        if not hasattr(self, "_hops"):
            hops: dict[int, list] = {n: [] for n, sw in self.is_switch.items() if sw}
            for p, n in self.port_node.items():
                if self.is_switch[n] and p in self.peer and self.is_switch[self.port_node[self.peer[p]]]:
                    hops[n].append((p, self.port_node[self.peer[p]]))
            self._hops = {n: sorted(v) for n, v in hops.items()}
            self._dist: dict[int, dict[int, int]] = {}
        return self._hops[node]

    def distances_to(self, target: int) -> dict[int, int]:
        """Switch hops from every switch to `target` (breadth-first search over switch cables)."""
        self.switch_hops(target)
        if target in self._dist:
            return self._dist[target]
        hops = self._hops
        dist, todo = {target: 0}, deque([target])
        while todo:
            n = todo.popleft()
            for _, m in hops[n]:
                if m not in dist:
                    dist[m] = dist[n] + 1
                    todo.append(m)
        self._dist[target] = dist
        return dist

    def shortest_paths(self, first: int, last: int, most: int = 2) -> list[tuple[int, ...]]:
        """Up to `most` shortest paths from switch `first` to switch `last`, as egress ports
        (a cable is a distinct path even beside a parallel one)."""
        dist = self.distances_to(last)
        if first not in dist:
            return []
        out: list[tuple[int, ...]] = []

        def go(n: int, acc: tuple[int, ...]) -> None:
            if len(out) >= most:
                return
            if n == last:
                out.append(acc)
                return
            for p, m in self.switch_hops(n):
                if dist.get(m, -1) == dist[n] - 1:
                    go(m, acc + (p,))

        go(first, ())
        return out


class Table:
    """One switch's entries, evaluated for every source port at once (highest priority wins)."""

    def __init__(self, entries: list[dict]):
        rows = sorted(entries, key=lambda e: -e["priority"])
        self.dst = np.array([_ip(e["ipv4_dst"]) for e in rows], dtype=np.int64)
        self.mask = np.array([_ip(e["ipv4_mask"]) for e in rows], dtype=np.int64)
        self.uval = np.array([e["udp_src"][0] if e["udp_src"] is not None else 0 for e in rows], dtype=np.int64)
        self.umask = np.array([e["udp_src"][1] if e["udp_src"] is not None else 0 for e in rows], dtype=np.int64)
        self.out = np.array([e["out_port"] for e in rows], dtype=np.int64)
        self.prio = np.array([e["priority"] for e in rows], dtype=np.int64)
        self._cache: dict[int, np.ndarray] = {}
        self._groups: dict[int, np.ndarray] = {}

    def out_ports(self, dst_ip: int) -> np.ndarray:
        """The out port number for every value in SPORTS (-1: no entry matches)."""
        if dst_ip not in self._cache:
            res = np.full(SPORTS.size, -1, dtype=np.int64)
            rows = np.nonzero((dst_ip & self.mask) == (self.dst & self.mask))[0]  # in priority order
            # entries of one priority and one udp_src mask are buckets of one hash: look them up at once
            for key in dict.fromkeys((int(self.prio[i]), int(self.umask[i])) for i in rows):
                sel = rows[(self.prio[rows] == key[0]) & (self.umask[rows] == key[1])]
                order = np.argsort(self.uval[sel], kind="stable")
                vals, outs = self.uval[sel][order], self.out[sel][order]
                want = SPORTS & key[1]
                pos = np.minimum(np.searchsorted(vals, want), vals.size - 1)
                hit = (res < 0) & (vals[pos] == want)
                res[hit] = outs[pos][hit]
            self._cache[dst_ip] = res
        return self._cache[dst_ip]

    def group(self, dst_ip: int) -> np.ndarray:
        """The out ports some source port takes toward dst_ip: the ECMP group's members."""
        if dst_ip not in self._groups:
            self._groups[dst_ip] = np.unique(self.out_ports(dst_ip))
        return self._groups[dst_ip]


@dataclass
class Report:
    pairs: int = 0
    routed: int = 0
    unrouted: list = field(default_factory=list)  # (src, dst): no entry at the first switch (pair not served)
    misdelivered: list = field(default_factory=list)  # (src, dst, where): loops or a wrong host
    not_shortest: list = field(default_factory=list)  # (src, dst, hops, shortest)
    not_the_unique_path: list = field(default_factory=list)  # (src, dst)
    unique_pairs: int = 0
    switch_checks: int = 0  # (switch, destination) groups judged over every source's arrivals
    max_share_deviation: float = 0.0  # max |s - 1/k| * k over them
    worst_switch: tuple | None = None  # (switch, shares)
    share_failures: int = 0
    ecmp_checks: int = 0  # (source, destination, switch) with >= MIN_ARRIVALS arrivals
    min_member_share: float = 1.0  # min s * k over them
    most_starved: tuple | None = None  # (src, dst, switch, shares)
    starved: int = 0
    required: bool = False  # the pairs were named (a schedule's): each must be routed

    @property
    def ok(self) -> bool:
        return not (
            self.misdelivered
            or self.not_shortest
            or self.not_the_unique_path
            or self.share_failures
            or self.starved
            or self.routed == 0
            or (self.required and self.unrouted)
        )

    def as_dict(self) -> dict:
        short = lambda v: v[:5]  # noqa: E731
        return {
            "ok": self.ok,
            "pairs": self.pairs,
            "routed": self.routed,
            "unrouted": len(self.unrouted),
            "misdelivered": short(self.misdelivered),
            "not_shortest": short(self.not_shortest),
            "not_the_unique_path": short(self.not_the_unique_path),
            "unique_pairs": self.unique_pairs,
            "switch_checks": self.switch_checks,
            "max_share_deviation": self.max_share_deviation,
            "share_tolerance": SHARE_TOLERANCE,
            "worst_switch": self.worst_switch,
            "share_failures": self.share_failures,
            "ecmp_checks": self.ecmp_checks,
            "min_member_share": self.min_member_share,
            "starve_floor": STARVE_FLOOR,
            "most_starved": self.most_starved,
            "starved": self.starved,
        }


def check(fabric_json: Path, flows_json: Path, pairs: list[tuple[str, str]] | None = None) -> Report:
    """Walk every source port of every NIC pair (or of `pairs`, by port name, each of which must
    then be routed) through the entries."""
    g = Graph.load(fabric_json)
    flows = read_json(flows_json)
    node_of = {name: n for n, name in g.node_name.items()}
    tables = {node_of[sw]: Table(doc["entries"]) for sw, doc in flows["switches"].items()}
    nics = g.nic_ports()
    by_name = {g.port_name[p]: p for p in nics}
    todo = (
        [(by_name[a], by_name[b]) for a, b in pairs]
        if pairs is not None
        else [(a, b) for a in nics for b in nics if g.port_node[a] != g.port_node[b]]
    )
    rep = Report(required=pairs is not None)
    agg: dict[tuple[int, int], np.ndarray] = {}  # (switch, destination) -> source ports per member, all sources
    for src, dst in todo:
        rep.pairs += 1
        paths = _walk(g, tables, src, dst, rep, agg)
        if paths is not None:
            rep.routed += 1
            _judge_paths(g, rep, src, dst, paths)
    _judge_switch_shares(g, rep, agg)
    return rep


def _walk(g: Graph, tables: dict, src: int, dst: int, rep: Report, agg: dict) -> dict | None:
    """Follow every source port of one pair through the entries, switch by switch; returns the
    paths taken (egress ports -> source ports on it), or None when a walk misroutes or the pair is
    not served (recorded in `rep`). ECMP shares are accounted on the way."""
    name = (g.port_name[src], g.port_name[dst])
    first = g.port_node[g.peer[src]]
    dst_ip = g.port_ip[dst]
    n_switches = sum(g.is_switch.values())
    paths: dict[tuple[int, ...], int] = defaultdict(int)
    # (switch, egress ports so far, indices into SPORTS that took this way)
    stack = [(first, (), np.arange(SPORTS.size))]
    while stack:
        node, acc, idx = stack.pop()
        if node not in tables or len(acc) > n_switches:
            rep.misdelivered.append((*name, g.node_name[node]))
            return None
        outs = tables[node].out_ports(dst_ip)[idx]
        if (outs < 0).any():
            # no entry at the first switch: the fabric does not serve this pair (ZCube routes cons
            # ports to rail addresses only); a route that started and then dead-ends is a misroute
            if acc:
                rep.misdelivered.append((*name, f"dead end at {g.node_name[node]}"))
            else:
                rep.unrouted.append(name)
            return None
        group = tables[node].group(dst_ip)  # every member the switch's entries offer this destination
        counts = np.array([np.count_nonzero(outs == m) for m in group]) if len(group) > 1 else np.array([idx.size])
        if len(group) > 1:
            _account_ecmp(g, rep, agg, name, node, dst_ip, counts, idx.size)
        for m in group[counts > 0]:
            port = g.by_number.get((node, int(m)))
            if port is None or port not in g.peer:
                rep.misdelivered.append((*name, f"{g.node_name[node]} port {int(m)}"))
                return None
            nxt_port = g.peer[port]
            nxt = g.port_node[nxt_port]
            sel = idx[outs == m]
            if g.is_switch[nxt]:
                stack.append((nxt, acc + (port,), sel))
            elif nxt_port == dst:
                paths[acc] += sel.size
            else:
                rep.misdelivered.append((*name, f"delivered to {g.port_name[nxt_port]}"))
                return None
    return paths


def _account_ecmp(
    g: Graph, rep: Report, agg: dict, name: tuple, node: int, dst_ip: int, counts: np.ndarray, arrivals: int
) -> None:
    """One switch's split of one pair's arriving source ports over its ECMP group: summed per
    (switch, destination) for the share check, and judged per arrival when there are enough."""
    key = (node, dst_ip)
    agg.setdefault(key, np.zeros(len(counts), dtype=np.int64))
    agg[key] += counts
    if arrivals >= MIN_ARRIVALS:
        floor = float(counts.min() / arrivals * len(counts))
        rep.ecmp_checks += 1
        if floor < rep.min_member_share:
            rep.min_member_share = floor
            rep.most_starved = (*name, g.node_name[node], [round(float(c / arrivals), 3) for c in counts])
        rep.starved += floor < STARVE_FLOOR


def _judge_paths(g: Graph, rep: Report, src: int, dst: int, paths: dict) -> None:
    """Every path a routed pair took must be a shortest one, and the unique one where there is one."""
    name = (g.port_name[src], g.port_name[dst])
    shortest = g.shortest_paths(g.port_node[g.peer[src]], g.port_node[g.peer[dst]])
    want = len(shortest[0]) if shortest else None
    for p in paths:
        if want is None or len(p) != want:
            rep.not_shortest.append((*name, len(p) + 1, None if want is None else want + 1))
            break
    if len(shortest) == 1:
        rep.unique_pairs += 1
        if set(paths) != {shortest[0]}:
            rep.not_the_unique_path.append(name)


def _judge_switch_shares(g: Graph, rep: Report, agg: dict) -> None:
    """Each (switch, destination) group's share per member, over every source's arrivals, within
    SHARE_TOLERANCE of uniform."""
    for (node, _), counts in agg.items():
        if counts.sum() < MIN_ARRIVALS:
            continue
        dev = float(np.max(np.abs(counts / counts.sum() - 1 / len(counts))) * len(counts))
        rep.switch_checks += 1
        if dev > rep.max_share_deviation:
            rep.max_share_deviation, rep.worst_switch = (
                dev,
                (g.node_name[node], [round(float(c / counts.sum()), 3) for c in counts]),
            )
        rep.share_failures += dev > SHARE_TOLERANCE


def scheduled_pairs(fdir: Path) -> list[tuple[str, str]]:
    """The (source NIC, destination NIC) pairs a fabric's repeats posted messages on."""
    pairs: set[tuple[str, str]] = set()
    for sched in sorted((Path(fdir) / "raw").glob("rep*/schedule.json")):
        pairs |= {(m["src_port"], m["dst_port"]) for m in read_json(sched)["messages"]}
    return sorted(pairs)


def check_run(root: Path) -> dict:
    """The oracle on every fabric folder of a run (or of a folder holding fabric.json itself)."""
    root = Path(root)
    dirs = (
        [root] if (root / "fabric.json").exists() else sorted(d for d in root.iterdir() if (d / "fabric.json").exists())
    )
    return {d.name: check(d / "fabric.json", d / "flows.json").as_dict() for d in dirs if (d / "flows.json").exists()}
