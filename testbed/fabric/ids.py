"""Identifiers computed from fabric coordinates, never looked up.

Why: the Mininet builder, the controller and the analysis must agree on every dpid, MAC, IP
and interface name without sharing state; computing them from coordinates makes that free.
"""

from __future__ import annotations

import ipaddress

IFNAME_MAX = 15  # Linux IFNAMSIZ - 1

# Address plane per GPU NIC port role: 10.<plane>.x.y
PLANE = {"nic": 0, "cons": 1, "rail": 2}
# Switch group codes used in the dpid's upper bytes.
GROUP_CODE = {"A": 0xA, "B": 0xB, "leaf": 0x1, "spine": 0x2, "agg": 0x3, "core": 0x4}
MAX_GPUS = 65534  # the address plan has 16 bits for a GPU


def gpu_name(gpu: int) -> str:
    return f"g{gpu}"


def switch_name(group: str, index: int, segment: int = -1, pod: int = -1) -> str:
    """Short, unique names: za3/zb3 (ZCube), l1r2 (leaf of segment 1, rail 2), sp3, ag3, co3."""
    if group in ("A", "B"):
        return f"z{group.lower()}{index}"
    if group == "leaf":
        return f"l{segment}r{index}"
    return {"spine": "sp", "agg": "ag", "core": "co"}[group] + str(index)


def ifname(node_name: str, port_number: int) -> str:
    name = f"{node_name}-p{port_number}"
    if len(name) > IFNAME_MAX:
        raise ValueError(f"interface name {name!r} exceeds {IFNAME_MAX} characters")
    return name


def dpid(group: str, index: int, segment: int = -1) -> int:
    """64-bit datapath id: group code, segment, index — unique per switch, readable in hex."""
    seg = segment + 1 if segment >= 0 else 0
    return (GROUP_CODE[group] << 40) | (seg << 20) | index


def gpu_ip(gpu: int, role: str) -> str:
    """10.<plane>.<hi>.<lo> with hi.lo = gpu + 1 (never .0.0, never the /16 broadcast)."""
    if not 0 <= gpu < MAX_GPUS:
        raise ValueError(f"GPU index {gpu} outside the address plan (max {MAX_GPUS - 1})")
    h = gpu + 1
    return f"10.{PLANE[role]}.{h >> 8}.{h & 0xFF}"


def gpu_ip_int(gpu, role: str):
    """Integer form of gpu_ip; works on numpy arrays too (for vectorised hashing)."""
    return (10 << 24) | (PLANE[role] << 16) | (gpu + 1)


def gpu_mac(gpu: int, role: str) -> str:
    """Locally administered unicast MAC 02:5a:<plane>:00:<hi>:<lo> ('5a' = 'Z')."""
    h = gpu + 1
    return f"02:5a:{PLANE[role]:02x}:00:{h >> 8:02x}:{h & 0xFF:02x}"


def ip_to_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def int_to_ip(value: int) -> str:
    return str(ipaddress.IPv4Address(int(value)))


def switch_port_mac(dpid_value: int, port_number: int) -> str:
    """06:<group>:<segment/pod>:<index>:<port>: locally administered, distinct from GPU MACs."""
    group = (dpid_value >> 40) & 0xFF
    seg = (dpid_value >> 20) & 0xFF
    index = dpid_value & 0xFFF
    b = [0x06, group, seg, (index >> 4) & 0xFF, ((index & 0xF) << 4) | ((port_number >> 8) & 0xF), port_number & 0xFF]
    return ":".join(f"{x:02x}" for x in b)
