"""Cabling check: compare every cable LLDP discovered with the blueprint — switch-to-switch
cables from the switches' LLDP, NIC cables from one LLDP frame each GPU port sends (chassis id
'host:<port>'), which its switch punts with the port it arrived on.

Reports missing, extra and swapped cables by port name. The controller only logs what LLDP saw
(controller/lldp.jsonl); this module judges it.
"""

from __future__ import annotations

import socket
import struct
from itertools import combinations
from pathlib import Path

from traffic.port import in_netns

from ..fabric import layout
from ..fabric.model import Fabric
from ..records import read_jsonl

HOST_CHASSIS_PREFIX = "host:"  # must match controllers/zlab_routes.py HOST_CHASSIS


def blueprint(fab: Fabric) -> set[frozenset]:
    """Every cable as the pair of port names it joins (NIC and fabric cables)."""
    return {frozenset((fab.ports[l.a].name, fab.ports[l.b].name)) for l in fab.links}


def discovered(lldp_records: list[dict]) -> set[frozenset]:
    out = set()
    for r in lldp_records:
        if r.get("src_host_port") and r.get("dst"):
            out.add(frozenset((r["src_host_port"], f"{r['dst']}-p{r['dst_port']}")))
        elif r.get("src") and r.get("dst"):
            out.add(frozenset((f"{r['src']}-p{r['src_port']}", f"{r['dst']}-p{r['dst_port']}")))
    return out


def host_lldp_frame(port_name: str, mac: str) -> bytes:
    """The LLDP frame a GPU port sends: chassis id 'host:<port name>' (locally assigned, subtype
    7), port id the port name, TTL 120, to the nearest-bridge group address."""

    def tlv(kind: int, value: bytes) -> bytes:
        return struct.pack("!H", (kind << 9) | len(value)) + value

    name = port_name.encode()
    body = (
        tlv(1, b"\x07" + HOST_CHASSIS_PREFIX.encode() + name)
        + tlv(2, b"\x07" + name)
        + tlv(3, struct.pack("!H", 120))
        + tlv(0, b"")
    )
    return bytes.fromhex("0180c200000e") + bytes.fromhex(mac.replace(":", "")) + struct.pack("!H", 0x88CC) + body


def probe_nic_cables(live) -> int:
    """Every GPU port sends its LLDP frame once (from inside its host's namespace)."""
    fab = live.fabric
    sent = 0
    for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]:
        with in_netns(live.host_pid(fab.nodes[p.node].name)):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        try:
            s.bind((p.name, 0))
            s.send(host_lldp_frame(p.name, p.mac))
            sent += 1
        finally:
            s.close()
    return sent


def _where(patch: dict | None, cable: frozenset) -> str:
    """'C000012 (g0-p0 R00.00/U1 <-> za0-p1 R00.02/U1)' from the patch list, or the port names."""
    row = (patch or {}).get(cable)
    if row is None:
        return " <-> ".join(sorted(cable))
    return (
        f"{row['cable_id']} ({row['a_port']} {row['a_rack']}/U{row['a_unit']} <-> "
        f"{row['b_port']} {row['b_rack']}/U{row['b_unit']})"
    )


def compare(expected: set[frozenset], seen: set[frozenset], patch: dict | None = None) -> dict:
    """patch: the run's patch list (layout.read_patch_list) to name blueprint cables by id and rack."""
    missing, extra = set(expected - seen), set(seen - expected)
    swapped = []
    for m1, m2 in combinations(sorted(missing, key=sorted), 2):
        if m1 not in missing or m2 not in missing:
            continue
        a, b = sorted(m1)
        c, d = sorted(m2)
        for x1, x2 in ((frozenset((a, d)), frozenset((c, b))), (frozenset((a, c)), frozenset((b, d)))):
            if x1 in extra and x2 in extra:
                swapped.append(
                    {
                        "expected": [" <-> ".join(sorted(m1)), " <-> ".join(sorted(m2))],
                        "found": [" <-> ".join(sorted(x1)), " <-> ".join(sorted(x2))],
                        "cables": [_where(patch, m1), _where(patch, m2)],
                    }
                )
                missing -= {m1, m2}
                extra -= {x1, x2}
                break
    fmt = lambda s: sorted(" <-> ".join(sorted(x)) for x in s)  # noqa: E731
    return {
        "ok": not (missing or extra or swapped),
        "blueprint_links": len(expected),
        "discovered_links": len(seen),
        "missing": fmt(missing),
        "missing_cables": sorted(_where(patch, m) for m in missing),
        "extra": fmt(extra),
        "swapped": swapped,
    }


def read_lldp(run_dir: Path) -> list[dict]:
    return read_jsonl(Path(run_dir) / "controller" / "lldp.jsonl")


def check_run(run_dir: Path) -> dict:
    fab = Fabric.load(Path(run_dir) / "fabric.json")
    patch_path = Path(run_dir) / "patch-list.csv"
    patch = layout.read_patch_list(patch_path.read_text()) if patch_path.exists() else None
    rep = compare(blueprint(fab), discovered(read_lldp(run_dir)), patch)
    rep["nic_cables"] = sum(1 for l in fab.links if l.kind == "nic")
    rep["fabric_cables"] = len(fab.links) - rep["nic_cables"]
    return rep


def format_report(rep: dict) -> str:
    scope = f"; {rep['nic_cables']} NIC + {rep['fabric_cables']} fabric cables" if "nic_cables" in rep else ""
    lines = [
        f"cabling check: {'CLEAN' if rep['ok'] else 'PROBLEMS FOUND'} "
        f"({rep['discovered_links']} links discovered, {rep['blueprint_links']} in the blueprint{scope})"
    ]
    for s in rep["swapped"]:
        lines.append(
            f"  swapped: cables {s['cables'][0]} and {s['cables'][1]}"
            if "cables" in s
            else f"  swapped: expected {s['expected'][0]} and {s['expected'][1]}"
        )
        lines.append(f"           found {s['found'][0]} and {s['found'][1]}")
    lines += [f"  missing: {m}" for m in rep.get("missing_cables", rep["missing"])]
    lines += [f"  extra:   {e}" for e in rep["extra"]]
    return "\n".join(lines)
