"""Routing as pure functions of the topology: forwarding tables, flow hash, path walks.

Why one mechanism: the per-switch forwarding tables are what the controller installs; every
path the model reports (route(), the load estimator, validation) is obtained by walking those
same tables, so model and emulation cannot disagree about where a packet goes.

Addresses are GPU NIC ports: address index == GPU port id (GPU ports come first).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import ids
from .model import Fabric

U64 = np.uint64


def splitmix64(x):
    """Stateless 64-bit mixer (SplitMix64 finaliser); vectorised over uint64 arrays."""
    x = np.asarray(x, dtype=U64)
    with np.errstate(over="ignore"):
        x = x + U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def switch_seed(dpid):
    """Per-switch ECMP seed, from the dpid: different seeds avoid hash polarisation."""
    return splitmix64(np.asarray(dpid, dtype=U64) ^ U64(0x5A4C4142))  # "ZLAB"


def ecmp_bits(k: int) -> int:
    """Bucket bits for a k-way group: >= 4 buckets per member, at least 16 buckets."""
    return min(12, max(4, int(np.ceil(np.log2(max(k, 1)))) + 2))


def ecmp_window(seed: int, k: int) -> tuple[int, int, int]:
    """(shift, bits, xor) of the UDP-source-port bits a switch hashes for a k-way group."""
    bits = ecmp_bits(k)
    seed = int(seed)
    return seed % (16 - bits + 1), bits, (seed >> 16) & ((1 << bits) - 1)


def ecmp_member(seed, sport, k):
    """ECMP choice: bucket = ((sport >> shift) ^ xor) & (2^bits - 1), member = bucket % k.

    RoCEv2 puts a flow's entropy in the UDP source port (the rest of its 5-tuple is fixed per
    QP pair), so hashing those bits with a per-switch window and XOR is a 5-tuple hash that an
    OpenFlow switch executes exactly as masked udp_src matches: model and emulation agree
    packet for packet. Non-UDP packets (probes) take member 0. Vectorised over arrays.
    """
    seed = np.asarray(seed, dtype=U64)
    k = np.asarray(k, dtype=np.int64)
    sport = np.asarray(sport, dtype=np.int64)
    bits = np.minimum(12, np.maximum(4, np.ceil(np.log2(np.maximum(k, 1))).astype(np.int64) + 2))
    shift = (seed % (16 - bits + 1).astype(U64)).astype(np.int64)
    xor = ((seed >> U64(16)).astype(np.int64)) & ((1 << bits) - 1)
    bucket = ((sport >> shift) ^ xor) & ((1 << bits) - 1)
    return np.where(sport >= 0, bucket % np.maximum(k, 1), 0)


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
            out.append({"dst_ip": fab.ports[a].ip, "prefix_len": 32,
                        "out_ports": [port_num[p] for p in self.group_members(g)]})
        if default_group is not None:
            out.append({"dst_ip": "10.0.0.0", "prefix_len": 8,
                        "out_ports": [port_num[p] for p in self.group_members(default_group)]})
        return out


PRIORITY_HOST, PRIORITY_DEFAULT, PRIORITY_UDP_BUCKET = 1000, 500, 100  # bucket: added to base


def flow_entries(tables: "Tables", switch: str) -> list[dict]:
    """The switch's table as OpenFlow-ready entries (what the controller installs).

    Single-port entries match ipv4_dst; an ECMP entry becomes one entry per hash bucket,
    matching ipv4_dst plus masked udp_src bits, and a non-UDP fallback to member 0.
    """
    node = tables.fabric.node_by_name[switch]
    seed = int(tables.seeds[tables.switch_rows[node.id]])
    out = []
    for e in tables.entries(switch):
        base = PRIORITY_HOST if e["prefix_len"] == 32 else PRIORITY_DEFAULT
        mask = ids.int_to_ip((0xFFFFFFFF << (32 - e["prefix_len"])) & 0xFFFFFFFF)
        ports = e["out_ports"]
        match = {"ipv4_dst": e["dst_ip"], "ipv4_mask": mask}
        out.append({"priority": base, **match, "udp_src": None, "out_port": ports[0]})
        if len(ports) > 1:
            shift, bits, xor = ecmp_window(seed, len(ports))
            for b in range(1 << bits):
                out.append({"priority": base + PRIORITY_UDP_BUCKET, **match,
                            "udp_src": [(b ^ xor) << shift, ((1 << bits) - 1) << shift],
                            "out_port": ports[b % len(ports)]})
    return out


def match_flow_entries(entries: list[dict], dst_ip: str, sport: int | None) -> dict | None:
    """Highest-priority entry matching a packet, as a switch would pick it (for tests/tools)."""
    dst = ids.ip_to_int(dst_ip)
    best = None
    for e in entries:
        m = ids.ip_to_int(e["ipv4_mask"])
        if dst & m != ids.ip_to_int(e["ipv4_dst"]) & m:
            continue
        if e["udp_src"] is not None and (sport is None or sport & e["udp_src"][1] != e["udp_src"][0]):
            continue
        if best is None or e["priority"] > best["priority"]:
            best = e
    return best


def forwarding_tables(fabric: Fabric) -> Tables:
    cache = fabric._cache
    if "tables" not in cache:
        if fabric.kind == "zcube":
            cache["tables"] = _zcube_tables(fabric)
        elif fabric.kind == "roft":
            cache["tables"] = _roft_tables(fabric)
        else:
            raise ValueError(f"no routing for fabric kind {fabric.kind!r}")
    return cache["tables"]


def _ports_between(fabric: Fabric) -> dict[tuple[int, int], list[int]]:
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


def _zcube_tables(fab: Fabric) -> Tables:
    """A[j]: own GPUs' cons addresses locally; rail address of GPU h toward B[h % m].
    B[i]: own GPUs' rail addresses locally; cons address of GPU h toward A[h // n]."""
    n, m, lpp = fab.params["n"], fab.params["switches_per_group"], fab.params["links_per_pair"]
    N = fab.n_gpus
    peer = port_peer(fab)
    between = _ports_between(fab)
    a_nodes = [sw.id for sw in fab.switches if sw.group == "A"]
    b_nodes = [sw.id for sw in fab.switches if sw.group == "B"]
    rows = {sw.id: r for r, sw in enumerate(fab.switches)}
    ng = np.full((len(fab.switches), 2 * N), -1, dtype=np.int64)
    h = np.arange(N)
    cons, rail = 2 * h, 2 * h + 1
    # local delivery: the switch port cabled to each GPU port
    ng[[rows[a_nodes[g // n]] for g in range(N)], cons] = peer[cons]
    ng[[rows[b_nodes[g % m]] for g in range(N)], rail] = peer[rail]
    # fabric: parallel link chosen by the destination's position on its switch (deterministic)
    for j, a in enumerate(a_nodes):
        toward_b = np.array([between[(a, b)] for b in b_nodes])  # (m, lpp)
        ng[rows[a], rail] = toward_b[h % m, (h // m) % lpp]
    for i, b in enumerate(b_nodes):
        toward_a = np.array([between[(b, a)] for a in a_nodes])
        ng[rows[b], cons] = toward_a[h // n, (h % n) % lpp]
    return Tables(fab, ng, [])


def _roft_tables(fab: Fabric) -> Tables:
    """Leaves deliver their rail's GPUs and send the rest up (ECMP); upper tiers send each
    address down toward its leaf (ECMP over parallel links), or up (ECMP) if not below."""
    N = fab.n_gpus
    peer = port_peer(fab)
    between = _ports_between(fab)
    rows = {sw.id: r for r, sw in enumerate(fab.switches)}
    ng = np.full((len(fab.switches), N), -1, dtype=np.int64)
    multi: list[tuple[int, ...]] = []
    index: dict[tuple[int, ...], int] = {}
    n_ports = len(fab.ports)

    def group(ports) -> int:
        ports = tuple(int(p) for p in ports)
        if len(ports) == 1:
            return ports[0]
        if ports not in index:
            index[ports] = n_ports + len(multi)
            multi.append(ports)
        return index[ports]

    g = np.arange(N)
    leaf_of = fab.port_node[peer[g]]  # GPU -> its leaf node id
    order = np.argsort(leaf_of, kind="stable")
    cuts = np.searchsorted(leaf_of[order], np.unique(leaf_of))
    gpus_below = dict(zip(np.unique(leaf_of).tolist(), np.split(order, cuts[1:])))
    neighbours: dict[int, set[int]] = {}
    up_ports: dict[int, list[int]] = {}
    for (x, y), ps in between.items():
        neighbours.setdefault(x, set()).add(y)
        if fab.nodes[y].tier > fab.nodes[x].tier:
            up_ports.setdefault(x, []).extend(ps)
    by_number = lambda p: fab.ports[p].number  # noqa: E731
    leaves = [sw for sw in fab.switches if sw.group == "leaf"]
    for sw in fab.switches:
        r = rows[sw.id]
        if sw.id in up_ports:  # not below: up, ECMP over every uplink
            ng[r, :] = group(sorted(up_ports[sw.id], key=by_number))
        if sw.group == "leaf":
            local = gpus_below[sw.id]
            ng[r, local] = peer[local]
        elif sw.tier == 2:  # spine, or aggregation inside its pod: down toward the GPU's leaf
            for leaf in neighbours[sw.id]:
                if fab.nodes[leaf].group == "leaf":
                    ng[r, gpus_below[leaf]] = group(between[(sw.id, leaf)])
        else:  # core: down toward the aggregation switch of the GPU's pod in this core's plane
            for leaf in leaves:
                aggs = neighbours[leaf.id] & neighbours[sw.id]
                if aggs:
                    (agg,) = aggs
                    ng[r, gpus_below[leaf.id]] = group(between[(sw.id, agg)])
    return Tables(fab, ng, multi)


# ---- host side: which address a transfer's subflows go to -----------------------------

def dst_address(fab: Fabric, src_gpu, src_role: str, dst_gpu):
    """Destination port id for traffic leaving src_gpu's `src_role` port (vectorised).

    ZCube's rule: cons traffic goes to the destination's rail address and vice versa, so it
    crosses exactly A(src) -> B(dst) (or B(src) -> A(dst)). With the shortcut policy, pairs
    that share the source port's switch use the same-plane address (1 switch).
    """
    src_gpu = np.asarray(src_gpu)
    dst_gpu = np.asarray(dst_gpu)
    if fab.kind == "roft":
        return dst_gpu.copy()
    n, m = fab.params["n"], fab.params["switches_per_group"]
    if src_role == "cons":
        same = (src_gpu // n) == (dst_gpu // n)
        other, own = 2 * dst_gpu + 1, 2 * dst_gpu
    elif src_role == "rail":
        same = (src_gpu % m) == (dst_gpu % m)
        other, own = 2 * dst_gpu, 2 * dst_gpu + 1
    else:
        raise ValueError(f"ZCube GPU ports are cons and rail, not {src_role!r}")
    if fab.params.get("shortcut"):
        return np.where(same, own, other)
    return other


def split_fractions(fab: Fabric, policy: str | None = None) -> list[tuple[str, float]]:
    """Port-split policy: which source ports a transfer uses and the share of bytes on each."""
    if fab.kind == "roft":
        return [("nic", 1.0)]
    policy = policy or fab.params["split"]
    if policy == "half":
        return [("cons", 0.5), ("rail", 0.5)]
    if policy in ("cons", "rail"):
        return [(policy, 1.0)]
    raise ValueError(f"unknown split policy {policy!r}; valid: half, cons, rail")


def src_port_id(fab: Fabric, gpu, role: str):
    gpu = np.asarray(gpu)
    if fab.kind == "roft":
        return gpu.copy()
    return 2 * gpu + (0 if role == "cons" else 1)


# ---- walking the tables ------------------------------------------------------------------

@dataclass
class Walk:
    out_ports: np.ndarray  # (F, H) switch output port ids per hop, -1 padded
    n_hops: np.ndarray  # (F,) switches crossed; -1 = dropped (no entry), -2 = hop limit (loop)
    dlinks: np.ndarray  # (F, H+1) directed link ids, -1 padded (first: the source NIC link)


def walk(fab: Fabric, src_ports, dst_addrs, sport, max_hops: int = 8) -> Walk:
    """Follow the forwarding tables for many flows at once. sport: UDP source port per flow,
    or -1 for a non-UDP packet (takes ECMP member 0)."""
    t = forwarding_tables(fab)
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
            member[multi] = ecmp_member(t.seeds[rows[multi]], sport[idx[multi]], size[multi])
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


def route(fab: Fabric, src: str, dst: str, sport: int = 49152) -> Route:
    """Path of one flow from GPU port `src` (interface name or IP) toward GPU `dst`.

    `dst` may be a GPU name (the address rule picks its port) or a GPU port's name or IP.
    """
    sp = _gpu_port(fab, src)
    if dst in fab.node_by_name:
        dst_gpu = fab.node_by_name[dst].id
        da = int(dst_address(fab, fab.ports[sp].node, fab.ports[sp].role, dst_gpu))
    else:
        da = _gpu_port(fab, dst)
    w = walk(fab, [sp], [da], sport)
    k = int(w.n_hops[0])
    if k < 0:
        raise LookupError(f"no route from {fab.ports[sp].name} to {fab.ports[da].name}: "
                          f"{'no table entry' if k == -1 else 'forwarding loop'}")
    peer = port_peer(fab)
    hops, in_port = [], peer[sp]
    for h in range(k):
        op = int(w.out_ports[0, h])
        node = fab.nodes[fab.ports[op].node]
        hops.append(Hop(node.name, fab.ports[in_port].number, fab.ports[op].number))
        in_port = peer[op]
    return Route(fab.ports[sp].name, fab.ports[da].name, fab.ports[da].ip, tuple(hops),
                 tuple(int(x) for x in w.dlinks[0, : k + 1]))


def _gpu_port(fab: Fabric, ref: str) -> int:
    gp = fab.n_gpus * fab.ports_per_gpu
    if ref in fab.port_by_ip:
        p = fab.port_by_ip[ref]
        return p.id
    for p in fab.ports[:gp]:
        if p.name == ref:
            return p.id
    raise KeyError(f"{ref!r} is not a GPU port name or address of {fab.spec} "
                   f"(e.g. {fab.ports[0].name} / {fab.ports[0].ip})")
