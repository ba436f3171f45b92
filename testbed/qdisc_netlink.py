"""Egress-queue statistics for every interface in one netlink dump (RTM_GETQDISC).

Why hand-parsed: `tc -s -j` costs ~7 ms per call and pyroute2 ~21 ms per full dump here;
sampling ~130 qdiscs every 10 ms needs a dump that costs about a millisecond of CPU.
"""

from __future__ import annotations

import os
import socket
import struct

NETLINK_ROUTE = 0
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
_NLH = struct.Struct("=IHHII")
_TCM = struct.Struct("=BxxxiIII")
_RTA = struct.Struct("=HH")
_BASIC = struct.Struct("=QI")
_QUEUE = struct.Struct("=IIIII")


class QdiscReader:
    """Dump qdisc stats: {(ifindex, handle): (kind, bytes, packets, qlen, backlog_bytes, drops)}."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def dump(self, want_kind: bytes | tuple[bytes, ...] | None = None) -> dict:
        if isinstance(want_kind, bytes):
            want_kind = (want_kind,)
        self.seq += 1
        req = _NLH.pack(_NLH.size + _TCM.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + _TCM.pack(
            0, 0, 0, 0, 0
        )
        self.sock.send(req)
        out = {}
        while True:
            data = self.sock.recv(1 << 20)
            off = 0
            while off + _NLH.size <= len(data):
                length, mtype, _flags, seq, _pid = _NLH.unpack_from(data, off)
                if length < _NLH.size:
                    return out
                if mtype == NLMSG_DONE:
                    return out
                if mtype == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, off + _NLH.size)
                    if err:
                        raise OSError(-err, f"RTM_GETQDISC: {os.strerror(-err)}")
                    return out
                if mtype == RTM_NEWQDISC and seq == self.seq:
                    self._parse(data, off + _NLH.size, off + length, out, want_kind)
                off += (length + 3) & ~3

    @staticmethod
    def _parse(data: bytes, start: int, end: int, out: dict, want_kind) -> None:
        _fam, ifindex, handle, parent, _info = _TCM.unpack_from(data, start)
        off = start + _TCM.size
        kind = b""
        basic = queue = None
        while off + 4 <= end:
            alen, atype = _RTA.unpack_from(data, off)
            if alen < 4:
                break
            if atype == TCA_KIND:
                kind = data[off + 4 : off + alen].rstrip(b"\0")
                if want_kind is not None and kind not in want_kind:
                    return
            elif atype & 0x7FFF == TCA_STATS2:
                inner, iend = off + 4, off + alen
                while inner + 4 <= iend:
                    ilen, itype = _RTA.unpack_from(data, inner)
                    if ilen < 4:
                        break
                    if itype == TCA_STATS_BASIC:
                        basic = _BASIC.unpack_from(data, inner + 4)
                    elif itype == TCA_STATS_QUEUE:
                        queue = _QUEUE.unpack_from(data, inner + 4)
                    inner += (ilen + 3) & ~3
            off += (alen + 3) & ~3
        if basic and queue:
            out[(ifindex, handle)] = (kind.decode(), basic[0], basic[1], queue[0], queue[1], queue[2])
