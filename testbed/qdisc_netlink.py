"""Egress-queue statistics for every interface in one netlink dump (RTM_GETQDISC).

Why hand-parsed: `tc -s -j` costs ~7 ms per call and pyroute2 ~21 ms per full dump here;
sampling ~130 qdiscs every 10 ms needs a dump that costs about a millisecond of CPU.
"""

from __future__ import annotations

import os
import socket
import struct

import numpy as np

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


TCA_STATS = 3  # the legacy struct tc_stats that the kernel still appends to every qdisc message
# Its attribute header as one word (rta_len | rta_type << 16). sizeof(struct tc_stats) is 40 on
# x86-64 (trailing padding to the u64's alignment: "0Q"), so rta_len is 44 there.
_STATS_HDR = (4 + struct.calcsize("@QIIIIIII0Q")) | TCA_STATS << 16


class LeafSampler:
    """Sample one known leaf qdisc (one handle) on each of a fixed list of interfaces.

    The same RTM_GETQDISC dump and the same counters as `QdiscReader.dump`, made for the
    collector's hot loop (1,024 switch ports every 10 ms), where the general reader cost ~7 ms
    of CPU per sample. Why it is cheaper (scripts/bench/collector_cost.py measures it):

    - the dump carries every qdisc of the namespace (htb roots, clsact, any noqueue), 3-4
      messages per port, and the kernel cannot filter it (tc_dump_qdisc ignores tcm_ifindex).
      Python costs ~0.5 us per message touched, so no message is touched in Python: the whole
      dump is received into one preallocated buffer (`recv_into`, no fresh 1 MB `recv` buffer
      per ~32 KB chunk) and read with numpy as an array of host-endian u32 words;
    - the chain of message starts (each start plus its length is the next) is the only
      sequential part. It is the same from one sample to the next as long as the qdiscs do not
      change, so the previous sample's chain is checked in one vectorised comparison and only
      walked again in Python when the check fails;
    - the wanted leaves' counters come from the legacy TCA_STATS struct: one flat block holding
      the same values the kernel copies into TCA_STATS2's basic and queue blocks
      (gnet_stats_copy_basic/_queue fill both), found by a vectorised attribute walk.

    `sample()` returns four lists (sent bytes, queue packets, backlog bytes, drops) in the order
    of `ifindexes`; an interface whose leaf is absent, or of another kind, is None in all four.
    """

    def __init__(self, ifindexes: list[int], handle: int, kinds: tuple[bytes, ...]):
        self.ifindexes = list(ifindexes)
        if len(set(self.ifindexes)) != len(self.ifindexes):
            raise ValueError("LeafSampler: an interface is listed twice")
        self.pos = np.full(max(self.ifindexes, default=0) + 1, -1, np.int64)  # ifindex -> position
        self.pos[self.ifindexes] = np.arange(len(self.ifindexes))
        self.handle = handle
        # TCA_KIND as whole words: header (rta_len | TCA_KIND << 16), then the NUL-terminated,
        # zero-padded name (the kernel zeroes attribute padding).
        self.kind_words = []
        for k in kinds:
            name = k + b"\0"
            name += bytes(-len(name) % 4)
            self.kind_words.append(
                np.array([(4 + len(k) + 1) | TCA_KIND << 16, *struct.unpack(f"={len(name) // 4}I", name)], np.uint32)
            )
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))
        self.seq = 0
        self.buf = bytearray(1 << 20)  # grows (doubling) if a dump is larger
        self.chain = np.zeros(0, np.int64)  # the last dump's message starts, in words

    def close(self) -> None:
        self.sock.close()

    def sample(self) -> tuple[list, list, list, list]:
        self.seq += 1
        req = _NLH.pack(_NLH.size + _TCM.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + _TCM.pack(
            0, 0, 0, 0, 0
        )
        self.sock.send(req)
        got = 0
        while True:
            # A chunk is at most 32 KB (the kernel caps a netlink socket's max_recvmsg_len there).
            if len(self.buf) - got < (64 << 10):
                self.buf = self.buf + bytes(len(self.buf))
            with memoryview(self.buf) as mv:
                n = self.sock.recv_into(mv[got:], 64 << 10)
            if not n:
                raise OSError("RTM_GETQDISC: the netlink socket returned nothing before the dump's end")
            got += n
            # The dump's last chunk ends with NLMSG_DONE: 20 bytes, as this socket never asks for
            # extended acks. A failed dump is a lone NLMSG_ERROR. parse() checks either for real.
            length, mtype = struct.unpack_from("=IH", self.buf, got - 20) if n >= 20 else (0, 0)
            first = struct.unpack_from("=H", self.buf, got - n + 4)[0] if n >= 16 else 0
            if (length == 20 and mtype == NLMSG_DONE) or first == NLMSG_ERROR:
                out = self.parse(self.buf, got, self.seq)
                if out is not None:
                    return out

    def _walk(self, w, n: int):
        """The message starts of words w[:n], walked from the start (~0.1 us per message)."""
        if self.chain.size and self.chain[-1] < n:
            c = self.chain
            if np.array_equal(c[1:], c[:-1] + ((w[c[:-1]] + 3) >> 2)) and c[-1] + ((int(w[c[-1]]) + 3) >> 2) == n:
                return c
        starts, k = [], 0
        with memoryview(w) as mv:
            while k < n:
                starts.append(k)
                length = mv[k]
                if length < _NLH.size:
                    break
                k += (length + 3) >> 2
        self.chain = np.array(starts, np.int64)
        return self.chain

    def parse(self, buf, got: int, seq: int):
        """The four lists of sample() from the dump bytes buf[:got] (whole messages, starting at
        a message; len(buf) >= got + 64), or None if they do not end with the dump's NLMSG_DONE.
        Kept apart from the socket so that tests can feed it captured bytes.

        Word offsets (netlink is host-endian, messages 4-aligned): nlmsghdr is words 0-3 (len,
        type | flags << 16, seq, pid), tcmsg words 4-8 (family, ifindex, handle, parent, info),
        the first attribute (always TCA_KIND, tc_fill_qdisc puts it first) word 9."""
        n = got >> 2
        w = np.frombuffer(buf, np.uint32, count=n + 16)  # 16 spare words: headers of short messages
        c = self._walk(w, n)
        types = w[c + 1] & 0xFFFF
        for k in c[types == NLMSG_ERROR]:
            (err,) = struct.unpack_from("=i", buf, 4 * int(k) + _NLH.size)
            if err:
                raise OSError(-err, f"RTM_GETQDISC: {os.strerror(-err)}")
            types[c == k] = NLMSG_DONE  # an ack: the end, like the old reader
        if not c.size or not (types == NLMSG_DONE).any():
            return None
        q = c[(types == RTM_NEWQDISC) & (w[c + 6] == self.handle) & (w[c + 2] == seq)]
        ifx = w[q + 5].astype(np.int64)
        q, ifx = q[ifx < self.pos.size], ifx[ifx < self.pos.size]
        p = self.pos[ifx]
        q, p = q[p >= 0], p[p >= 0]
        ok = np.zeros(q.size, bool)
        for kw in self.kind_words:
            ok |= (w[q[:, None] + 9 + np.arange(kw.size)] == kw).all(axis=1)
        q, p = q[ok], p[ok]
        # Walk the attributes after TCA_KIND, all leaves at once, to TCA_STATS.
        end = q + (w[q] >> 2)
        a = q + 9 + (((w[q + 9] & 0xFFFF) + 3) >> 2)
        for _ in range(64):
            h = w[np.minimum(a, n)]
            stop = (a >= end) | (h == _STATS_HDR) | ((h & 0xFFFF) < 4)
            if stop.all():
                break
            a = np.where(stop, a, a + (((h & 0xFFFF) + 3) >> 2))
        hit = (a < end) & (w[np.minimum(a, n)] == _STATS_HDR)
        a, p = a[hit], p[hit]
        # struct tc_stats: u64 bytes, u32 packets, drops, overlimits, bps, pps, qlen, backlog
        out = []
        for vals in (w[a + 1].astype(np.int64) | w[a + 2].astype(np.int64) << 32, w[a + 8], w[a + 9], w[a + 4]):
            col = np.full(len(self.ifindexes), -1, np.int64)
            col[p] = vals
            out.append(col)
        lists = tuple(col.tolist() for col in out)
        if p.size < len(self.ifindexes):
            for i in np.flatnonzero(out[0] < 0).tolist():
                for col in lists:
                    col[i] = None
        return lists
