"""A tbf qdisc set over rtnetlink in one round trip: the emulation's PAUSE and RESUME.

Why tbf, and why netlink: htb cannot pause (measured, docs/congestion.md "Lossless mode in the
emulation"): a class whose rate is cut keeps the token debt of the frame it let through and stays
stuck for up to that frame's time at the cut rate after it is restored. tbf's change resets its
tokens and keeps its queue, so a tbf leaf under the port's htb class is a gate: rate near zero
holds every queued frame, the line rate again releases them at once. The `tc` binary takes ~4 ms
per change here; one netlink message with its acknowledgement takes well under one, and the
acknowledgement is the time the gate is known shut (the reaction time's end).

Opening is two steps. tbf's change does not re-run the device's queue: the watchdog the shut
gate armed fires only when the next frame would have been paid for at the shut rate (seconds),
and nothing else dequeues until a frame is enqueued. So `kick_frame` is sent on the port after
every open: an ARP probe for 0.0.0.0, which the far switch's kernel ignores (a frame with a
protocol handler, so no interface counts it as dropped: a PFC frame was, measured) and its
OpenFlow tables' table-miss entry discards.
"""

from __future__ import annotations

import os
import socket
import struct
import time

from traffic.port import in_netns

NETLINK_ROUTE = 0
RTM_NEWQDISC, RTM_DELQDISC = 36, 37
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
NLMSG_ERROR = 2
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_BURST = 1, 6
TC_LINKLAYER_ETHERNET = 1
LEAF_HANDLE = 0x00100000  # 10: (what the collector samples)
LEAF_PARENT = 0x00010001  # htb class 1:1
_NLH = struct.Struct("=IHHII")
_TCM = struct.Struct("=BxxxiIII")
# struct tc_ratespec {u8 cell_log; u8 linklayer; u16 overhead; s16 cell_align; u16 mpu; u32 rate;}
_RATESPEC = struct.Struct("=BBHhHI")
# struct tc_tbf_qopt {tc_ratespec rate, peakrate; u32 limit, buffer, mtu;}
_TBF_QOPT_TAIL = struct.Struct("=III")


def _attr(kind: int, payload: bytes) -> bytes:
    head = struct.pack("=HH", 4 + len(payload), kind)
    return head + payload + b"\0" * ((-len(payload)) % 4)


def tbf_options(rate_bytes_per_s: int, burst_bytes: int, limit_bytes: int) -> bytes:
    """TCA_OPTIONS of a tbf: the rate (linklayer Ethernet, so the kernel needs no rate table), the
    queue limit, and the burst in bytes (TCA_TBF_BURST: the kernel derives the bucket from it)."""
    if not 0 < rate_bytes_per_s < 1 << 32:
        raise ValueError(f"tbf rate {rate_bytes_per_s} B/s is outside 1..2^32-1 (no 64-bit rates needed here)")
    rate = _RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, rate_bytes_per_s)
    peak = _RATESPEC.pack(0, 0, 0, 0, 0, 0)
    parms = rate + peak + _TBF_QOPT_TAIL.pack(limit_bytes, 0, 0)
    return _attr(TCA_TBF_PARMS, parms) + _attr(TCA_TBF_BURST, struct.pack("=I", burst_bytes))


def open_socket(netns_pid: int | None = None) -> socket.socket:
    """A NETLINK_ROUTE socket in the root namespace, or in that process's (a host's)."""
    with in_netns(netns_pid):
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        s.bind((0, 0))
    return s


class TbfGate:
    """The tbf leaf of one namespace's ports: `install` replaces their leaf with a tbf, `set`
    changes its rate (pause / resume). Each call returns when the kernel has acknowledged it."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.seq = 0

    def _send(self, ifindex: int, flags: int, options: bytes | None, mtype: int = RTM_NEWQDISC) -> int:
        """One RTM_NEWQDISC (or RTM_DELQDISC) of the leaf; returns the round trip in ns; raises
        OSError on the kernel's error."""
        self.seq += 1
        body = _TCM.pack(0, ifindex, LEAF_HANDLE, LEAF_PARENT, 0)
        if options is not None:
            body += _attr(TCA_KIND, b"tbf\0") + _attr(TCA_OPTIONS, options)
        msg = _NLH.pack(_NLH.size + len(body), mtype, NLM_F_REQUEST | NLM_F_ACK | flags, self.seq, 0) + body
        t0 = time.monotonic_ns()
        self.sock.send(msg)
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + _NLH.size <= len(data):
                length, mtype, _f, seq, _pid = _NLH.unpack_from(data, off)
                if mtype == NLMSG_ERROR and seq == self.seq:
                    (err,) = struct.unpack_from("=i", data, off + _NLH.size)
                    if err:
                        raise OSError(-err, f"tbf on ifindex {ifindex}: {os.strerror(-err)}")
                    return time.monotonic_ns() - t0
                if length < _NLH.size:
                    break
                off += (length + 3) & ~3

    def install(self, ifindex: int, rate_bytes_per_s: int, burst_bytes: int, limit_bytes: int) -> int:
        """Replace the port's leaf qdisc (10: under htb class 1:1) with an open tbf, on an idle
        port: the kernel will not change a qdisc's kind in place, so the old leaf is deleted first
        (frames queued in it would be dropped, and counted)."""
        t = self._send(ifindex, 0, None, RTM_DELQDISC)
        return t + self._send(
            ifindex, NLM_F_CREATE | NLM_F_EXCL, tbf_options(rate_bytes_per_s, burst_bytes, limit_bytes)
        )

    def set(self, ifindex: int, rate_bytes_per_s: int, burst_bytes: int, limit_bytes: int) -> int:
        """Change the tbf's rate in place: its queue stays, its bucket refills to burst_bytes."""
        return self._send(ifindex, 0, tbf_options(rate_bytes_per_s, burst_bytes, limit_bytes))


ETH_P_ARP = 0x0806


def kick_frame(src_mac: str) -> bytes:
    """A 60-byte ARP probe (request, sender and target address 0.0.0.0) from this port's MAC:
    enqueued behind the held frames, it makes the kernel dequeue from the reopened gate."""
    mac = bytes.fromhex(src_mac.replace(":", ""))
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + bytes(4) + bytes(6) + bytes(4)
    frame = b"\xff" * 6 + mac + struct.pack("!H", ETH_P_ARP) + arp
    return frame + bytes(60 - len(frame))
