"""Forwarding tables -> OpenFlow-ready entries (what the controller installs), and a matcher
that picks the entry a switch would pick (for tests and tools)."""

from __future__ import annotations

from . import ids
from .ecmp import ecmp_table, ecmp_window
from .tables import Tables

PRIORITY_HOST, PRIORITY_DEFAULT, PRIORITY_UDP_BUCKET = 1000, 500, 100  # bucket: added to base


def flow_entries(tables: Tables, switch: str) -> list[dict]:
    """The switch's table as OpenFlow-ready entries (what the controller installs).

    Single-port entries match ipv4_dst; an ECMP entry becomes one entry per hash bucket,
    matching ipv4_dst plus masked udp_src bits, and a non-UDP fallback to member 0.
    """
    node = tables.fabric.node_by_name[switch]
    row = tables.switch_rows[node.id]
    seed = int(tables.seeds[row])
    lanes, n_lanes = tables.ecmp_lanes
    lane = int(lanes[row])
    out = []
    for e in tables.entries(switch):
        base = PRIORITY_HOST if e["prefix_len"] == 32 else PRIORITY_DEFAULT
        mask = ids.int_to_ip((0xFFFFFFFF << (32 - e["prefix_len"])) & 0xFFFFFFFF)
        ports = e["out_ports"]
        match = {"ipv4_dst": e["dst_ip"], "ipv4_mask": mask}
        out.append({"priority": base, **match, "udp_src": None, "out_port": ports[0]})
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
