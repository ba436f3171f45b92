"""ZCube(n, 2): two switch groups joined as a complete bipartite graph, two NIC ports per GPU.

GPU g's `cons` port goes to A[g // n] (consecutive servers, ToR-like); its `rail` port goes to
B[g % m] (same index, rail-like), with m = gpus / n switches per group (m = n when square).
Every A has `links_per_pair` links to every B. Everything ZCube-specific lives here: the
generator, the per-port address rule, the forwarding tables, the count identities, the unique
two-switch path check and the drawing hints (docs/fabrics.md).
"""

from __future__ import annotations

import math

import numpy as np

from . import ids
from .builder import FabricBuilder, gbps_to_bps
from .kind import FabricKind
from .model import Fabric
from .params import Param, canonical_spec, require, resolve_params
from .tables import Tables, port_peer, ports_between

NAME = "zcube"
SPLITS = ("half", "cons", "rail")
# the kind's switch groups (dpid code, name format, drawing colour) and its GPU ports' address planes
GROUPS = (ids.SwitchGroup("A", 0xA, "za{index}", "#fdae6b"), ids.SwitchGroup("B", 0xB, "zb{index}", "#a1d99b"))
PLANES = {"cons": 1, "rail": 2}  # 10.<plane>.x.y: a GPU's cons and rail ports sit in different /16s
PARAMS = (
    Param("n", int, None, "GPUs per switch (GPU-facing ports per switch); N = n*n when square"),
    Param("gpus", int, 0, "total GPUs; 0 = n*n (square). Else a multiple of n: Zhipu's rectangular form"),
    Param("links_per_pair", int, 1, "parallel links between every A and every B switch"),
    Param("gpus_per_server", int, 0, "GPUs per server, must divide n; 0 = gcd(n, 8)"),
    Param("gpu_gbps", float, 400.0, "bandwidth per GPU; each of its two ports runs at half"),
    Param("radix", int, 0, "switch port budget; 0 = exactly the ports used"),
    Param("shortcut", bool, False, "use the 1-switch path for pairs sharing a switch (halves their throughput)"),
    Param("split", str, "half", "port-split policy per transfer: half (one QP per port), cons or rail only", SPLITS),
    Param(
        "copper",
        str,
        "none",
        "cable medium rule: none = all fibre, nic-a = NIC->A links copper (rack-local)",
        ("none", "nic-a"),
    ),
)


def build(given: dict) -> Fabric:
    p = resolve_params(NAME, PARAMS, given)
    require(p["n"] is not None, NAME, "parameter n (GPUs per switch) is required, e.g. zcube:n=4")
    n = p["n"]
    require(n >= 2, NAME, f"n must be >= 2 (got n={n}): ZCube(1,2) has no fabric")
    gpus = p["gpus"] or n * n
    require(
        gpus <= ids.MAX_GPUS,
        NAME,
        f"{gpus} GPUs exceed the address plan's {ids.MAX_GPUS} GPUs (square ZCube: n <= {math.isqrt(ids.MAX_GPUS)})",
    )
    require(gpus > 0 and gpus % n == 0, NAME, f"gpus={gpus} must be a positive multiple of n={n}")
    m = gpus // n
    require(m >= 2, NAME, f"gpus={gpus} gives {m} switch per group; need at least 2")
    lpp = p["links_per_pair"]
    require(lpp >= 1, NAME, f"links_per_pair must be >= 1 (got {lpp})")
    s = p["gpus_per_server"] or math.gcd(n, 8)
    require(s >= 1 and n % s == 0, NAME, f"gpus_per_server={s} must divide n={n} so A switches hold whole servers")
    require(p["gpu_gbps"] > 0, NAME, "gpu_gbps must be positive")
    used = n + m * lpp
    radix = p["radix"] or used
    require(
        used <= radix,
        NAME,
        f"port budget exceeded: each switch needs {n} GPU + {m * lpp} fabric ports = {used} > radix {radix}",
    )
    p.update(n=n, gpus=gpus, gpus_per_server=s, radix=radix)
    port_bps = gbps_to_bps(p["gpu_gbps"] / 2)

    b = FabricBuilder(NAME, GROUPS, PLANES)
    for g in range(gpus):
        b.gpu(g, server=g // s, local_rank=g % s, roles=("cons", "rail"), rate_bps=port_bps, rail=g % m)
    a_nodes = [b.switch("A", 1, j, radix) for j in range(m)]
    b_nodes = [b.switch("B", 1, i, radix) for i in range(m)]
    a_ports, b_ports = {}, {}
    for group_nodes, store in ((a_nodes, a_ports), (b_nodes, b_ports)):
        for sw in group_nodes:
            for num in range(1, used + 1):
                store[(sw, num)] = b.switch_port(sw, num, "down" if num <= n else "fabric", port_bps)
    nic_medium = "copper" if p["copper"] == "nic-a" else "fibre"
    for g in range(gpus):
        b.link(2 * g, a_ports[(a_nodes[g // n], g % n + 1)], port_bps, "nic", nic_medium)
        b.link(2 * g + 1, b_ports[(b_nodes[g % m], g // m + 1)], port_bps, "nic", "fibre")
    for j in range(m):
        for i in range(m):
            for l in range(lpp):
                b.link(
                    a_ports[(a_nodes[j], n + 1 + i * lpp + l)],
                    b_ports[(b_nodes[i], n + 1 + j * lpp + l)],
                    port_bps,
                    "fabric",
                    "fibre",
                )
    params = dict(p, switches_per_group=m, port_gbps=p["gpu_gbps"] / 2)
    return b.finish(canonical_spec(NAME, PARAMS, p), params)


def tables(fab: Fabric) -> Tables:
    """A[j]: own GPUs' cons addresses locally; rail address of GPU h toward B[h % m].
    B[i]: own GPUs' rail addresses locally; cons address of GPU h toward A[h // n]."""
    n, m, lpp = fab.params["n"], fab.params["switches_per_group"], fab.params["links_per_pair"]
    N = fab.n_gpus
    peer = port_peer(fab)
    between = ports_between(fab)
    a_nodes = [sw.id for sw in fab.switches if sw.group == "A"]
    b_nodes = [sw.id for sw in fab.switches if sw.group == "B"]
    rows = {sw.id: r for r, sw in enumerate(fab.switches)}
    ng = np.full((len(fab.switches), 2 * N), -1, dtype=np.int64)
    h = np.arange(N)
    cons, rail = 2 * h, 2 * h + 1
    # local delivery: the switch port cabled to each GPU port
    ng[[rows[a_nodes[g // n]] for g in range(N)], cons] = peer[cons]
    ng[[rows[b_nodes[g % m]] for g in range(N)], rail] = peer[rail]
    # fabric: the parallel link is chosen by the destination (deterministic). Toward B, by the
    # destination's position on its B switch (h // m). Toward A, by which of the B switches' rounds
    # the destination's position on its A switch falls in ((h % n) // m): the GPUs of one server
    # that share a B switch sit m positions apart on every A switch, so a rank-aligned
    # server-to-server transfer (rank r to rank r, the usual P/D mapping) puts each of them on
    # its own link. The position itself ((h % n) % lpp) put both on one link whenever lpp divides
    # m: the 32-GPU form's KV shards then took twice as long as on ROFT (the flow engine, 32 GPUs).
    for a in a_nodes:
        toward_b = np.array([between[(a, b)] for b in b_nodes])  # (m, lpp)
        ng[rows[a], rail] = toward_b[h % m, (h // m) % lpp]
    for b in b_nodes:
        toward_a = np.array([between[(b, a)] for a in a_nodes])
        ng[rows[b], cons] = toward_a[h // n, ((h % n) // m) % lpp]
    return Tables(fab, ng, [])


REPAIR_POLICIES = ("none", "host", "detour", "both")


def _live_ports(fab: Fabric, link_down: np.ndarray, dead_rows) -> np.ndarray:
    """[switch row u, switch row v] -> u's first live port toward v (-1: none; none at all for the
    rows of failed switches)."""
    if "fabric_link_rows" not in fab._cache:
        rows = {sw.id: r for r, sw in enumerate(fab.switches)}
        fl = [l for l in fab.links if l.kind == "fabric"]
        fab._cache["fabric_link_rows"] = tuple(
            np.array(x, dtype=np.int64)
            for x in zip(
                *[(l.id, rows[fab.ports[l.a].node], rows[fab.ports[l.b].node], l.a, l.b) for l in reversed(fl)]
            )
        )
    lid, ra, rb, pa, pb = fab._cache["fabric_link_rows"]
    S = len(fab.switches)
    lp = np.full((S, S), -1, dtype=np.int64)
    ok = ~link_down[lid]
    lp[ra[ok], rb[ok]] = pa[ok]  # reversed order: among parallel cables the first live one is written last
    lp[rb[ok], ra[ok]] = pb[ok]
    for r in dead_rows:
        lp[r, :] = -1
        lp[:, r] = -1
    return lp


def repair(fab: Fabric, ng: np.ndarray, link_down: np.ndarray, policy: str, failures) -> int:
    """Table repair (policies detour, both).

    A failed A-B cable: a parallel cable of the same pair if one survives, else a three-link
    detour A_i -> B_x -> A_y -> B_j through transit entries at B_x (symmetric for B_j -> A_i),
    spread round-robin over the live (x, y) choices. A GPU port left without a cable (its NIC
    cable or its switch down): its GPU is reachable only at the other port, so switches of that
    port's own group get an entry for it through one switch of the other group. Returns the
    entries set. Pure on `ng` (the caller's copy)."""
    if policy not in ("detour", "both"):
        return 0
    n, m = fab.params["n"], fab.params["switches_per_group"]
    N = fab.n_gpus
    row = {sw.id: r for r, sw in enumerate(fab.switches)}
    a_rows = np.array([row[sw.id] for sw in fab.switches if sw.group == "A"])
    b_rows = np.array([row[sw.id] for sw in fab.switches if sw.group == "B"])
    dead_sw = set(failures.switches)
    lp = _live_ports(fab, link_down, [row[sw] for sw in dead_sw])
    changed = 0
    h = np.arange(N)
    for lk in np.nonzero(link_down)[0]:
        link = fab.links[lk]
        u, v = fab.ports[link.a].node, fab.ports[link.b].node
        if link.kind != "fabric" or u in dead_sw or v in dead_sw:
            continue
        for src, dst in ((row[u], row[v]), (row[v], row[u])):
            if src in a_rows:  # A_i -> B_j: rail addresses of B_j's GPUs
                addrs = 2 * h[h % m == int(np.nonzero(b_rows == dst)[0][0])] + 1
                mids, lasts = b_rows, a_rows
            else:  # B_j -> A_i: cons addresses of A_i's GPUs
                addrs = 2 * h[h // n == int(np.nonzero(a_rows == dst)[0][0])]
                mids, lasts = a_rows, b_rows
            direct = int(lp[src, dst])
            ok = (
                ((lp[src, mids] >= 0) & (mids != dst))[:, None]
                & (lp[np.ix_(mids, lasts)] >= 0)
                & ((lp[lasts, dst] >= 0) & (lasts != src))[None, :]
            )
            xs, ys = np.nonzero(ok)
            for k, d in enumerate(addrs):
                out = int(ng[src, d])
                if out >= 0 and not link_down[fab.port_link[out]]:
                    continue  # a parallel cable still carries it
                if direct >= 0:
                    ng[src, d] = direct
                    changed += 1
                    continue
                if xs.size == 0:
                    continue
                x, y = mids[xs[k % xs.size]], lasts[ys[k % xs.size]]
                if ng[x, d] < 0:
                    ng[x, d] = lp[x, y]
                    changed += 1
                ng[src, d] = lp[src, x]
                changed += 1
    peer = port_peer(fab)
    gp = np.arange(2 * N)
    down = link_down[fab.port_link[gp]]
    for port in np.nonzero(down & ~down[gp ^ 1])[0]:
        other = int(port) ^ 1  # the GPU's live port: its address is the only one left
        home = row[fab.ports[peer[other]].node]  # the switch that delivers it
        same, mids = (a_rows, b_rows) if fab.ports[other].role == "cons" else (b_rows, a_rows)
        for k, sw in enumerate(r for r in same if r != home and lp[r].max() >= 0):
            if ng[sw, other] >= 0:
                continue
            via = mids[(lp[sw, mids] >= 0) & (lp[mids, home] >= 0)]
            if via.size:
                x = via[(other + k) % via.size]
                ng[sw, other] = lp[sw, x]
                changed += 1
                if ng[x, other] < 0:
                    ng[x, other] = lp[x, home]
                    changed += 1
    return changed


def dst_address(fab: Fabric, src_gpu, src_role: str, dst_gpu):
    """The per-port rule: cons traffic goes to the destination's rail address and vice versa,
    so it crosses exactly A(src) -> B(dst) (or B(src) -> A(dst)). With the shortcut policy,
    pairs that share the source port's switch use the same-plane address (1 switch)."""
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


def split(fab: Fabric, policy: str | None = None) -> list[tuple[str, float]]:
    policy = policy or fab.params["split"]
    if policy == "half":
        return [("cons", 0.5), ("rail", 0.5)]
    return [(policy, 1.0)]


def expected_diameter(fab: Fabric) -> int:
    return 2  # with or without the shortcut: pairs on different switches cross two


def identity_checks(fab: Fabric) -> list[tuple[str, str | None]]:
    return [("zcube counts", _counts(fab)), ("zcube unique path per source port", _unique_paths(fab))]


def _counts(fab: Fabric) -> str | None:
    m, lpp, N = fab.params["switches_per_group"], fab.params["links_per_pair"], fab.n_gpus
    c = fab.counts()
    want = {"switches": 2 * m, "nic_links": 2 * N, "fabric_links": m * m * lpp}
    bad = [f"{k} = {c[k]}, expected {v}" for k, v in want.items() if c[k] != v]
    return "; ".join(bad) or None


def _unique_paths(fab: Fabric) -> str | None:
    """A 2-switch path from a.cons must be A(a) -> B(b): a.cons touches only A(a), b.rail only
    B(b). It is unique iff A(a)-B(b) has exactly one link and no A-A / B-B links exist."""
    groups = np.array([n.group for n in fab.nodes])
    ends = fab.link_ends
    fabric_links = np.array([l.kind == "fabric" for l in fab.links])
    na, nb = fab.port_node[ends[fabric_links, 0]], fab.port_node[ends[fabric_links, 1]]
    if (groups[na] == groups[nb]).any():
        return "links inside a switch group (A-A or B-B) create extra paths"
    m = fab.params["switches_per_group"]
    rank = {n.id: n.index for n in fab.switches}
    pair = np.zeros((m, m), dtype=np.int64)
    ai = np.array([rank[x] if groups[x] == "A" else rank[y] for x, y in zip(na, nb)], dtype=np.int64)
    bi = np.array([rank[y] if groups[x] == "A" else rank[x] for x, y in zip(na, nb)], dtype=np.int64)
    np.add.at(pair, (ai, bi), 1)
    if fab.params["links_per_pair"] == 1 and (pair != 1).any():
        return f"{int((pair != 1).sum())} A-B pairs do not have exactly one link"
    if (pair != fab.params["links_per_pair"]).any():
        return "A-B pairs differ in link count"
    return None


def draw_row(node) -> int:
    """B one row above A, so the K(m,m) core is visible."""
    return 2 if node.group == "B" else node.tier


KIND = FabricKind(
    NAME,
    "ZCube(n,2): A/B switch groups in K(m,m), 2 NIC ports per GPU, no spine",
    PARAMS,
    build=build,
    tables=tables,
    expected_diameter=expected_diameter,
    dst_address=dst_address,
    split=split,
    split_policies=SPLITS,
    identity_checks=identity_checks,
    draw_row=draw_row,
    switch_groups=GROUPS,
    address_planes=PLANES,
    repair_policies=REPAIR_POLICIES,
    failover_policies=("host", "both"),
    repair=repair,
    controller_policy="detour",
    row_labels={0: "GPUs", 1: "A (cons)", 2: "B (rail)"},
    draw_note="grey: cons port -> A and A-B fabric; red: rail port -> B",
)
