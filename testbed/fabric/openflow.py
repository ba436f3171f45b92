"""Forwarding tables -> OpenFlow-ready entries (what the controller installs), and a matcher
that picks the entry a switch would pick (for tests and tools)."""

from __future__ import annotations

import numpy as np

from . import ids
from .addrcover import masked_cover
from .ecmp import ecmp_table, ecmp_window
from .tables import Tables

PRIORITY_HOST, PRIORITY_DEFAULT, PRIORITY_UDP_BUCKET = 1000, 500, 100  # bucket: added to base
# A masked ECMP entry: the destinations of one multi-port group, as few masked matches (addrcover).
# Between the default and the /32s; no fabric address is matched by two entries of one priority.
PRIORITY_MASKED = 750


def flow_entries(tables: Tables, switch: str) -> list[dict]:
    """The switch's table as OpenFlow-ready entries (what the controller installs).

    Single-port entries match ipv4_dst; an ECMP entry becomes one entry per hash bucket,
    matching ipv4_dst plus masked udp_src bits, and a non-UDP fallback to member 0. The
    destinations of one ECMP group share its buckets (the hash depends on the switch and the
    group's size only), so they are matched together by an exact masked cover of their
    addresses instead of one set of buckets each: 128,099 entries per spine of a 1,024-GPU ROFT
    become at most 6,192 (addrcover.py says why).
    """
    fab = tables.fabric
    node = fab.node_by_name[switch]
    row = tables.switch_rows[node.id]
    seed = int(tables.seeds[row])
    lanes, n_lanes = tables.ecmp_lanes
    lane = int(lanes[row])
    singles, by_group = [], {}
    for e in tables.entries(switch):
        if e["prefix_len"] == 32 and len(e["out_ports"]) > 1:
            by_group.setdefault(tuple(e["out_ports"]), []).append(ids.ip_to_int(e["dst_ip"]))
        else:
            singles.append(e)
    if "fabric_ips" not in fab._cache:
        fab._cache["fabric_ips"] = np.array(sorted(ids.ip_to_int(p.ip) for p in fab.ports if p.ip), dtype=np.int64)
    fabric_ips = fab._cache["fabric_ips"]
    out = []
    for e in singles:
        base = PRIORITY_HOST if e["prefix_len"] == 32 else PRIORITY_DEFAULT
        mask = (0xFFFFFFFF << (32 - e["prefix_len"])) & 0xFFFFFFFF
        out += _entries(base, ids.ip_to_int(e["dst_ip"]), mask, e["out_ports"], seed, lane, n_lanes)
    for ports, members in by_group.items():
        others = np.setdiff1d(fabric_ips, members)
        for value, mask in masked_cover(members, others):
            base = PRIORITY_HOST if mask == 0xFFFFFFFF else PRIORITY_MASKED
            out += _entries(base, value, mask, list(ports), seed, lane, n_lanes)
    return out


def _entries(base: int, dst: int, mask: int, ports: list[int], seed: int, lane: int, n_lanes: int) -> list[dict]:
    """One match's entries: the non-UDP fallback to member 0, and the ECMP buckets if several ports."""
    match = {"ipv4_dst": ids.int_to_ip(dst), "ipv4_mask": ids.int_to_ip(mask)}
    out = [{"priority": base, **match, "udp_src": None, "out_port": ports[0]}]
    if len(ports) > 1:
        shift, bits = ecmp_window(seed, len(ports), lane, n_lanes)
        table = ecmp_table(seed, len(ports), bits)
        for b in range(1 << bits):
            out.append(
                {
                    "priority": base + PRIORITY_UDP_BUCKET,
                    **match,
                    "udp_src": [b << shift, ((1 << bits) - 1) << shift],
                    "out_port": ports[int(table[b])],
                }
            )
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
