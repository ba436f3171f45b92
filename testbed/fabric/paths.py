"""Paths as walks of the forwarding tables, and the host-side address and split rules.

Why walks: the tables are what the controller installs, so every path the model reports —
route(), the load estimator, validation — is where a packet really goes. The address and
split rules are the fabric kind's (kind.py hooks); this module only dispatches to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ecmp import ecmp_member
from .kinds import kind_of
from .model import Fabric
from .params import SpecError
from .tables import Tables, port_peer


@dataclass(frozen=True)
class Hop:
    switch: str
    in_port: int
    out_port: int


@dataclass(frozen=True)
class Route:
    src_port: str  # interface name
    dst_port: str
    dst_ip: str
    hops: tuple[Hop, ...]
    links: tuple[int, ...]  # directed link ids (2*link + direction)

    @property
    def switches(self) -> tuple[str, ...]:
        return tuple(h.switch for h in self.hops)


def forwarding_tables(fabric: Fabric) -> Tables:
    """The fabric's tables, built once by its kind's rule and cached on the fabric."""
    cache = fabric._cache
    if "tables" not in cache:
        cache["tables"] = kind_of(fabric).tables(fabric)
    return cache["tables"]


def dst_address(fab: Fabric, src_gpu, src_role: str, dst_gpu):
    """Destination port id for traffic leaving src_gpu's `src_role` port (vectorised): the
    kind's address rule (ZCube: cons -> the destination's rail address and vice versa)."""
    return kind_of(fab).dst_address(fab, np.asarray(src_gpu), src_role, np.asarray(dst_gpu))


def split_fractions(fab: Fabric, policy: str | None = None) -> list[tuple[str, float]]:
    """Port-split policy: which source ports a transfer uses and the share of bytes on each."""
    kind = kind_of(fab)
    kind.check_split(policy)
    return kind.split(fab, policy)


def src_port_id(fab: Fabric, gpu, role: str):
    """Port id of GPU `gpu`'s port with `role` (GPU ports come first, in role order)."""
    return np.asarray(gpu) * fab.ports_per_gpu + fab.gpu_port_roles.index(role)


@dataclass
class Walk:
    out_ports: np.ndarray  # (F, H) switch output port ids per hop, -1 padded
    n_hops: np.ndarray  # (F,) switches crossed; -1 = dropped (no entry), -2 = hop limit (loop)
    dlinks: np.ndarray  # (F, H+1) directed link ids, -1 padded (first: the source NIC link)


def walk(fab: Fabric, src_ports, dst_addrs, sport, max_hops: int = 8, tables: Tables | None = None) -> Walk:
    """Follow the forwarding tables (the healthy ones unless `tables` is given, e.g. degraded
    ones from failures.py) for many flows at once. sport: UDP source port per flow, or -1 for a
    non-UDP packet (takes ECMP member 0)."""
    t = tables if tables is not None else forwarding_tables(fab)
    peer = port_peer(fab)
    src_ports = np.atleast_1d(np.asarray(src_ports, dtype=np.int64))
    dst_addrs = np.atleast_1d(np.asarray(dst_addrs, dtype=np.int64))
    F = src_ports.size
    sport = np.broadcast_to(np.asarray(sport, dtype=np.int64), (F,))
    out = np.full((F, max_hops), -1, dtype=np.int64)
    dl = np.full((F, max_hops + 1), -1, dtype=np.int64)
    n_hops = np.zeros(F, dtype=np.int64)
    ends = fab.link_ends
    first = peer[src_ports]
    lk = fab.port_link[src_ports]
    dl[:, 0] = 2 * lk + (ends[lk, 0] != src_ports)
    cur = fab.port_node[first]
    active = np.ones(F, dtype=bool)
    for h in range(max_hops):
        idx = np.nonzero(active)[0]
        if idx.size == 0:
            break
        rows = t.switch_rows[cur[idx]]
        grp = t.next_group[rows, dst_addrs[idx]]
        missing = grp < 0
        n_hops[idx[missing]] = -1
        active[idx[missing]] = False
        idx, rows, grp = idx[~missing], rows[~missing], grp[~missing]
        size = t.group_size[grp]
        member = np.zeros(idx.size, dtype=np.int64)
        multi = size > 1
        if multi.any():
            lane, lanes = t.ecmp_lanes
            member[multi] = ecmp_member(t.seeds[rows[multi]], sport[idx[multi]], size[multi], lane[rows[multi]], lanes)
        op = t.group_ports[grp, member]
        out[idx, h] = op
        lk = fab.port_link[op]
        dl[idx, h + 1] = 2 * lk + (ends[lk, 0] != op)
        nxt = peer[op]
        done = nxt == dst_addrs[idx]
        n_hops[idx[done]] = h + 1
        active[idx[done]] = False
        wrong = ~done & (fab.port_node[nxt] < fab.n_gpus)  # delivered to the wrong GPU port
        n_hops[idx[wrong]] = -1
        active[idx[wrong]] = False
        cur[idx] = fab.port_node[nxt]
    n_hops[active] = -2
    return Walk(out, n_hops, dl)


def route(fab: Fabric, src: str, dst: str, sport: int = 49152, tables: Tables | None = None) -> Route:
    """Path of one flow from GPU port `src` (interface name or IP) toward GPU `dst`.

    `dst` may be a GPU name (the address rule picks its port) or a GPU port's name or IP.
    """
    sp = gpu_port_ref(fab, src)
    if dst in fab.node_by_name:
        dst_gpu = fab.node_by_name[dst].id
        da = int(dst_address(fab, fab.ports[sp].node, fab.ports[sp].role, dst_gpu))
    else:
        da = gpu_port_ref(fab, dst)
    w = walk(fab, [sp], [da], sport, tables=tables)
    k = int(w.n_hops[0])
    if k < 0:
        raise LookupError(
            f"no route from {fab.ports[sp].name} to {fab.ports[da].name}: "
            f"{'no table entry' if k == -1 else 'forwarding loop'}"
        )
    peer = port_peer(fab)
    hops, in_port = [], peer[sp]
    for h in range(k):
        op = int(w.out_ports[0, h])
        node = fab.nodes[fab.ports[op].node]
        hops.append(Hop(node.name, fab.ports[in_port].number, fab.ports[op].number))
        in_port = peer[op]
    return Route(
        fab.ports[sp].name,
        fab.ports[da].name,
        fab.ports[da].ip,
        tuple(hops),
        tuple(int(x) for x in w.dlinks[0, : k + 1]),
    )


def gpu_port_ref(fab: Fabric, ref: str) -> int:
    gp = fab.n_gpus * fab.ports_per_gpu
    if ref in fab.port_by_ip:
        p = fab.port_by_ip[ref]
        return p.id
    for p in fab.ports[:gp]:
        if p.name == ref:
            return p.id
    raise SpecError(
        f"{ref!r} is not a GPU port name or address of {fab.spec} (e.g. {fab.ports[0].name} / {fab.ports[0].ip})"
    )
