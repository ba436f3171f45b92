"""Validation of a fabric model: port budgets, counts, reachability, loops, diameter, ZCube's
unique path per source port — vectorised so it runs on 16,384 GPUs in seconds.

Reachability is checked on the forwarding tables themselves (what the controller installs),
with a dynamic programme over (switch, address): dist = switches a packet crosses from that
switch until delivery, every ECMP member required to deliver. Unreachable or looping entries
never get a finite distance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .kinds import kind_of
from .model import Fabric
from .paths import dst_address, forwarding_tables
from .tables import port_peer

INF = np.int16(1000)
MAX_PAIRS_FOR_PATH_LENGTH = 4096  # GPUs; average path length needs every ordered pair


@dataclass
class Report:
    ok: bool = True
    checks: dict[str, str] = field(default_factory=dict)  # name -> "ok" or the failure
    diameter_switches: int | None = None
    avg_path_links: float | None = None

    def add(self, name: str, failure: str | None) -> None:
        self.checks[name] = "ok" if failure is None else failure
        if failure is not None:
            self.ok = False

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "checks": self.checks,
            "diameter_switches": self.diameter_switches,
            "avg_path_links": self.avg_path_links,
        }


def validate(fab: Fabric) -> Report:
    kind = kind_of(fab)
    rep = Report()
    rep.add("port budget", _port_budget(fab))
    rep.add("cabling", _cabling(fab))
    for name, failure in kind.identity_checks(fab):
        rep.add(name, failure)
    dist = switch_distances(fab)
    unreachable, diameter = _reachability(fab, dist)
    rep.add("every GPU port pair reachable, no loops", unreachable)
    rep.diameter_switches = diameter
    expected = kind.expected_diameter(fab)
    rep.add(
        f"diameter {expected} switches",
        None if diameter == expected else f"diameter is {diameter} switches, expected {expected}",
    )
    if fab.n_gpus <= MAX_PAIRS_FOR_PATH_LENGTH:
        rep.avg_path_links = average_path_links(fab, dist)
    return rep


def _port_budget(fab: Fabric) -> str | None:
    used = np.bincount(fab.port_node[fab.port_link >= 0], minlength=len(fab.nodes))
    bad = [f"{sw.name} uses {used[sw.id]} ports > radix {sw.radix}" for sw in fab.switches if used[sw.id] > sw.radix]
    return "; ".join(bad[:5]) or None


def _cabling(fab: Fabric) -> str | None:
    """Every GPU port has exactly one cable, to a switch; no GPU-GPU cables; no dual-cabled port."""
    gp = fab.n_gpus * fab.ports_per_gpu
    ends = fab.link_ends.ravel()
    counts = np.bincount(ends, minlength=len(fab.ports))
    if (counts > 1).any():
        return f"{int((counts > 1).sum())} ports have more than one cable"
    if (counts[:gp] != 1).any():
        return f"{int((counts[:gp] != 1).sum())} GPU ports are not cabled"
    peer = port_peer(fab)
    if (fab.port_node[peer[:gp]] < fab.n_gpus).any():
        return "a GPU port is cabled to another GPU"
    return None


def switch_distances(fab: Fabric) -> np.ndarray:
    """(switches, addresses) int16: switches crossed from there to delivery; INF if never."""
    t = forwarding_tables(fab)
    peer = port_peer(fab)
    n_ports = len(fab.ports)
    S, A = t.next_group.shape
    G = t.group_ports.shape[0]
    # per group: the distinct next switch rows (-2: delivers to a GPU port directly)
    nxt_port = np.where(t.group_ports >= 0, peer[np.maximum(t.group_ports, 0)], -1)
    nxt_node = np.where(nxt_port >= 0, fab.port_node[np.maximum(nxt_port, 0)], -1)
    nxt_row = np.where(nxt_node >= 0, t.switch_rows[np.maximum(nxt_node, 0)], -1)
    ng = t.next_group
    valid = ng >= 0
    g_safe = np.where(valid, ng, 0)
    addr = np.broadcast_to(np.arange(A), (S, A))
    # delivered in this switch: a singleton group whose port is cabled to the address itself
    single = g_safe < n_ports
    delivered = valid & single & (nxt_port[g_safe, 0] == addr)
    dist = np.where(delivered, 1, INF).astype(np.int16)
    single_row = np.where(single, nxt_row[g_safe, 0], -1)
    multi_ids = np.unique(ng[valid & ~single])
    member_rows = [sorted({int(r) for r in nxt_row[g, : t.group_size[g]] if r >= 0}) for g in multi_ids]
    local = np.zeros(G, dtype=np.int64)
    local[multi_ids] = np.arange(multi_ids.size)
    multi_pos = valid & ~single
    multi_local = local[g_safe]
    for _ in range(S + 1):
        prev = dist
        via_single = np.where(single_row >= 0, dist[np.maximum(single_row, 0), addr] + 1, INF)
        new = np.where(valid & single & ~delivered, via_single, dist)
        if multi_ids.size:
            gm = np.full((multi_ids.size, A), INF, dtype=np.int16)
            for i, rows in enumerate(member_rows):
                if rows:
                    gm[i] = dist[rows].max(axis=0) + 1
            new = np.where(multi_pos, gm[multi_local, addr], new)
        dist = np.minimum(new, INF).astype(np.int16)
        if np.array_equal(dist, prev):
            break
    return dist


def _source_sets(fab: Fabric):
    """(source port ids, matching destination address arrays) per source role, all pairs."""
    g = np.arange(fab.n_gpus)
    return [(role, g * fab.ports_per_gpu + k) for k, role in enumerate(fab.gpu_port_roles)]


def _reachability(fab: Fabric, dist: np.ndarray):
    t = forwarding_tables(fab)
    peer = port_peer(fab)
    N = fab.n_gpus
    worst = 0
    bad = 0
    example = None
    for role, src_ports in _source_sets(fab):
        rows = t.switch_rows[fab.port_node[peer[src_ports]]]
        # distinct attachment switches: the destination set per source GPU differs only in
        # the shortcut case, handled by taking the address rule per (source switch) block
        for r in np.unique(rows):
            srcs = np.nonzero(rows == r)[0]
            rep = srcs[0]
            dst = np.delete(np.arange(N), rep)
            addrs = dst_address(fab, np.full(dst.size, rep), role, dst)
            d = dist[r, addrs]
            # every other GPU on this switch sees the same addresses except its own
            bad_here = int((d >= INF).sum())
            if bad_here and example is None:
                a = int(addrs[np.argmax(d >= INF)])
                example = f"{fab.switches[r].name} -> {fab.ports[a].name}"
            bad += bad_here * srcs.size
            finite = d[d < INF]
            if finite.size:
                worst = max(worst, int(finite.max()))
    failure = None if bad == 0 else f"{bad} GPU port pairs never delivered (e.g. {example})"
    return failure, worst


def average_path_links(fab: Fabric, dist: np.ndarray) -> float:
    """Mean GPU-to-GPU links over ordered pairs, each pair taking its best source port
    (the spec's figure: ZCube(32,2) 2.939 with shortcuts, ROFT 1,024 GPUs 5.472)."""
    t = forwarding_tables(fab)
    peer = port_peer(fab)
    N = fab.n_gpus
    g = np.arange(N)
    best = np.full((N, N), np.iinfo(np.int16).max, dtype=np.int32)
    for role, src_ports in _source_sets(fab):
        rows = t.switch_rows[fab.port_node[peer[src_ports]]]
        addrs = dst_address(fab, g[:, None], role, g[None, :])
        best = np.minimum(best, dist[rows[:, None], addrs].astype(np.int32) + 1)
    off = ~np.eye(N, dtype=bool)
    return float(best[off].mean())
