"""Identifiers computed from fabric coordinates, never looked up.

Why: the Mininet builder, the controller and the analysis must agree on every dpid, MAC, IP
and interface name without sharing state; computing them from coordinates makes that free.
What is kind-specific — a kind's switch groups (names, dpid codes) and the address plane of
each GPU port role — each kind declares in its own module (zcube.py, roft.py); the rules that
turn them into identifiers are here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IFNAME_MAX = 15  # Linux IFNAMSIZ - 1
MAX_GPUS = 65534  # the address plan has 16 bits for a GPU
SINGLE_PORT_PLANES = {"nic": 0}  # a kind whose GPUs have one NIC port: 10.0.x.y


@dataclass(frozen=True)
class SwitchGroup:
    """One group of a kind's switches (Node.group): the code in its switches' dpids, the format
    of their names, and their colour in drawings."""

    name: str
    code: int  # the dpid's upper byte, 1..255; unique among the groups of one kind
    naming: str  # str.format of index, segment and pod, e.g. "l{segment}r{index}"; short and unique
    colour: str = "#cccccc"

    def switch_name(self, index: int, segment: int = -1, pod: int = -1) -> str:
        return self.naming.format(index=index, segment=segment, pod=pod)


def gpu_name(gpu: int) -> str:
    return f"g{gpu}"


def ifname(node_name: str, port_number: int) -> str:
    name = f"{node_name}-p{port_number}"
    if len(name) > IFNAME_MAX:
        raise ValueError(f"interface name {name!r} exceeds {IFNAME_MAX} characters")
    return name


def dpid(group_code: int, index: int, segment: int = -1) -> int:
    """64-bit datapath id: group code, segment, index — unique per switch, readable in hex."""
    seg = segment + 1 if segment >= 0 else 0
    return (group_code << 40) | (seg << 20) | index


def gpu_ip(gpu: int, plane: int) -> str:
    """10.<plane>.<hi>.<lo> with hi.lo = gpu + 1 (never .0.0, never the /16 broadcast)."""
    if not 0 <= gpu < MAX_GPUS:
        raise ValueError(f"GPU index {gpu} outside the address plan (max {MAX_GPUS - 1})")
    h = gpu + 1
    return f"10.{plane}.{h >> 8}.{h & 0xFF}"


def gpu_mac(gpu: int, plane: int) -> str:
    """Locally administered unicast MAC 02:5a:<plane>:00:<hi>:<lo> ('5a' = 'Z')."""
    h = gpu + 1
    return f"02:5a:{plane:02x}:00:{h >> 8:02x}:{h & 0xFF:02x}"


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
