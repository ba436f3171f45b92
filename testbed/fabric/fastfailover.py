"""Fast-failover protection as a pure function of the fabric: which backup port every switch
entry switches to, by itself, the moment its port goes down — before any controller acts.

Why computed here and checked: a switch can only repair locally (OpenFlow fast-failover
groups watch a port and fall back to another bucket). Each backup is the next hop the routing
model's degraded tables use at the same switch when that one cable fails (failures.degrade with
the fabric's repair policy); entries the detours need at other switches (ZCube's transit
rules) are pre-installed, since healthy traffic never matches them. Then every cable's
protection is walked: its coverage is the share of the GPU port pairs the degraded tables
deliver that the fast-failover tables deliver with nobody reacting (a switch cannot repair
what only a far switch could — a ROFT spine that lost its leaf); backups that would lose a
pair that survives without them, or loop, are dropped. The answer is recorded, not assumed.
"""

from __future__ import annotations

import numpy as np

from . import failures as fl
from . import ids
from .addrcover import matches
from .model import Fabric
from .openflow import PRIORITY_HOST, PRIORITY_MASKED, flow_entries
from .paths import forwarding_tables, walk
from .tables import Tables

SAMPLE_SPORTS = (49152, 50321, 53117, 57004, 60013, 64999)  # ECMP entropy values each check walks


def _switch_cables(fab: Fabric) -> list[int]:
    return [l.id for l in fab.links if all(fab.nodes[fab.ports[p].node].role == "switch" for p in (l.a, l.b))]


def protection(fab: Fabric, policy: str) -> dict:
    """{"backups": {switch row: {address port id: {primary port id: backup port id}}},
    "transit": {(switch row, address): port id}, "rejected": [cables whose backups would hurt],
    "coverage": {cable: share of the degraded-deliverable pairs the backups deliver at once}}."""
    H = forwarding_tables(fab)
    n_ports = len(fab.ports)
    backups: dict[int, dict[int, dict[int, int]]] = {}
    transit: dict[tuple[int, int], int] = {}
    per_cable: dict[int, list[tuple[int, int, int, int]]] = {}  # cable -> [(row, addr, primary, backup)]
    degraded: dict[int, Tables] = {}
    for c in _switch_cables(fab):
        D = fl.degrade(fab, fl.Failures(cables=frozenset([c])), policy).tables
        degraded[c] = D
        link = fab.links[c]
        mine = []
        for P in (link.a, link.b):
            r = int(H.switch_rows[fab.port_node[P]])
            row = H.next_group[r]
            addrs = np.nonzero(row >= 0)[0]
            for a in addrs:
                g = int(row[a])
                if P not in H.group_members(g):
                    continue
                dg = int(D.next_group[r, a])
                if dg < 0:
                    continue
                mine.append((r, int(a), P, int(D.group_members(dg)[0])))
        per_cable[c] = mine
        new = (H.next_group < 0) & (D.next_group >= 0) & (D.next_group < n_ports)
        for r, a in zip(*np.nonzero(new)):
            transit.setdefault((int(r), int(a)), int(D.next_group[r, a]))
    rejected, coverage = [], {}
    for c in list(per_cable):
        per_cable[c] = _repick(fab, H, c, per_cable[c], transit)
    for c, mine in per_cable.items():
        cov = _holds(fab, H, degraded[c], c, mine, transit)
        if cov is None:
            rejected.append(c)
            continue
        coverage[c] = cov
        for r, a, P, B in mine:
            backups.setdefault(r, {}).setdefault(a, {})[P] = B
    return {
        "backups": backups,
        "transit": transit,
        "rejected": rejected,
        "coverage": coverage,
        "cables": len(per_cable),
    }


def _holds(fab: Fabric, H: Tables, D: Tables, cable: int, mine, transit) -> float | None:
    """With `cable` down and nobody reacting yet: the share of the pairs the model's degraded
    tables deliver that the fast-failover tables deliver too (over a few ECMP entropy values);
    None when the backups would lose a pair that survives without them, or make a loop."""
    n_ports = len(fab.ports)
    ng = H.next_group.copy()
    groups = list(H.multi_groups)
    index = {g: n_ports + i for i, g in enumerate(groups)}
    for (r, a), p in transit.items():
        if ng[r, a] < 0:
            ng[r, a] = p
    for r, a, P, B in mine:
        members = H.group_members(int(H.next_group[r, a]))
        new = tuple(B if m == P else m for m in members)
        if len(new) == 1:
            ng[r, a] = new[0]
        else:
            if new not in index:
                index[new] = n_ports + len(groups)
                groups.append(new)
            ng[r, a] = index[new]
    # the down cable's ports lead nowhere: a walk that still uses them fails (checked below)
    F = Tables(fab, ng, groups)
    gp = fab.n_gpus * fab.ports_per_gpu
    src, dst = np.meshgrid(np.arange(gp), np.arange(gp), indexing="ij")
    keep = fab.port_node[src.ravel()] != fab.port_node[dst.ravel()]
    src, dst = src.ravel()[keep], dst.ravel()[keep]
    plain = H  # before anyone reacts: the healthy tables, the cable simply dead
    covered = total = 0
    for sp in SAMPLE_SPORTS:
        want = walk(fab, src, dst, sp, tables=D)
        before = walk(fab, src, dst, sp, tables=plain)
        got = walk(fab, src, dst, sp, tables=F)
        ok_d = want.n_hops > 0
        ok_before = (before.n_hops > 0) & ~((before.dlinks // 2) == cable).any(axis=1)
        ok_ff = (got.n_hops > 0) & ~((got.dlinks // 2) == cable).any(axis=1)
        if (ok_before & ~ok_ff).any() or (got.n_hops == -2).any():
            return None  # the backups would lose a pair that survives without them, or loop
        covered += int((ok_d & ok_ff).sum())
        total += int(ok_d.sum())
    return covered / total if total else 1.0


def _repick(fab: Fabric, H: Tables, cable: int, mine, transit) -> list[tuple[int, int, int, int]]:
    """Keep each backup whose hop-by-hop walk (healthy tables + the shared transit entries, this
    cable dead) reaches the address; else try the switch's other live switch-facing ports (the
    shared transit entries come from different failures, so the model's own detour may now loop);
    else leave that entry unprotected."""
    from .tables import port_peer

    peer = port_peer(fab)
    link = fab.links[cable]
    dead = {link.a, link.b}
    gp = fab.n_gpus * fab.ports_per_gpu

    def delivers(r: int, a: int, first: int) -> bool:
        port = first
        for _ in range(8):
            if port in dead:
                return False
            nxt = peer[port]
            if nxt == a:
                return True
            if nxt < gp:
                return False
            rr = int(H.switch_rows[fab.port_node[nxt]])
            g = int(H.next_group[rr, a])
            if g < 0:
                g = transit.get((rr, a), -1)
            if g < 0:
                return False
            members = [m for m in H.group_members(g) if m not in dead]
            if not members:
                return False
            port = members[0]
        return False

    out = []
    for r, a, P, B in mine:
        if delivers(r, a, B):
            out.append((r, a, P, B))
            continue
        node = fab.switches[r].id
        for q in fab.ports:
            if (
                q.node == node
                and q.id not in dead
                and fab.port_link[q.id] >= 0
                and peer[q.id] >= gp
                and delivers(r, a, q.id)
            ):
                out.append((r, a, P, q.id))
                break
    return out


def _matched(entry: dict, addresses: list[int]) -> np.ndarray:
    """Which addresses an entry's ipv4_dst match selects."""
    return matches(ids.ip_to_int(entry["ipv4_dst"]), ids.ip_to_int(entry["ipv4_mask"]), addresses)


def annotate(fab: Fabric, prot: dict) -> dict[str, dict]:
    """Per switch name: its healthy entries with `ff_backup` (a port number) where protected,
    and the transit entries to pre-install — what the controller installs in fast-failover mode."""
    H = forwarding_tables(fab)
    out = {}
    for r, sw in enumerate(fab.switches):
        entries = flow_entries(H, sw.name)
        b = prot["backups"].get(r, {})
        row = H.next_group[r]
        port_id = {p.number: p.id for p in fab.ports if p.node == sw.id}
        exact = {fab.port_by_ip[x["ipv4_dst"]].id for x in entries if x["ipv4_mask"] == "255.255.255.255"}
        multi = [int(a) for a in np.nonzero(row >= len(fab.ports))[0] if int(a) not in exact]
        multi_ip = [ids.ip_to_int(fab.ports[a].ip) for a in multi]
        masked = np.zeros(len(multi), dtype=bool)  # carried by a masked group entry, not the default
        for e in entries:
            if e["ipv4_mask"] != "255.255.255.255" and e["priority"] >= PRIORITY_MASKED:
                masked |= _matched(e, multi_ip)
        for e in entries:
            if e["ipv4_mask"] == "255.255.255.255":
                carried = [fab.port_by_ip[e["ipv4_dst"]].id]
            else:  # the default or a masked group entry: every address it carries shares its group
                hit = _matched(e, multi_ip)
                hit = hit if e["priority"] >= PRIORITY_MASKED else hit & ~masked
                carried = [multi[i] for i in np.nonzero(hit)[0]]
            if not carried:
                continue
            P = port_id[e["out_port"]]
            found = {b.get(a, {}).get(P) for a in carried}
            if len(found) > 1:
                raise ValueError(
                    f"{sw.name}: one entry ({e['ipv4_dst']}/{e['ipv4_mask']}) would need different backups"
                )
            B = found.pop()
            if B is not None:
                e["ff_backup"] = fab.ports[B].number
        transit = [
            {
                "priority": PRIORITY_HOST,
                "ipv4_dst": fab.ports[a].ip,
                "ipv4_mask": "255.255.255.255",
                "udp_src": None,
                "out_port": fab.ports[p].number,
                "transit": True,
            }
            for (rr, a), p in sorted(prot["transit"].items())
            if rr == r
        ]
        out[sw.name] = {"entries": entries, "transit": transit}
    return out
