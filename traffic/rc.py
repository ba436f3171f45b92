"""Reliable Connected (RC) RDMA WRITE semantics as pure state machines (no sockets, no clock).

Requester: messages -> PSN-sequenced packets (First/Middle/Last or Only, RETH on the first),
AckReq on each message's last packet and every `ackreq_every` packets, go-back-N on NAK or
retransmission timeout, completion when the last packet is acknowledged.
Responder: in-order acceptance, coalesced ACKs, one NAK per sequence gap, duplicate re-ACK,
message assembly with length and CRC checks. Time is passed in (ns) so tests drive it.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

from . import roce
from .roce import PSN_MOD, psn_add, psn_diff


@dataclass
class Message:
    msg_id: int
    size_bytes: int
    data: bytes
    va: int = 0
    rkey: int = 0x5A4C
    first_psn: int = 0
    n_packets: int = 0
    t_post_ns: int = 0  # when the agent released it to the QP
    t_due_ns: int | None = None  # when it was scheduled to be released (None: at once)
    t_first_tx_ns: int | None = None
    t_complete_ns: int | None = None
    data_crc: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def last_psn(self) -> int:
        return psn_add(self.first_psn, self.n_packets - 1)


@dataclass
class QPCounters:
    packets: int = 0
    bytes: int = 0  # frame bytes on the wire
    payload_bytes: int = 0
    retransmits: int = 0
    naks: int = 0
    timeouts: int = 0
    acks: int = 0
    duplicates: int = 0
    out_of_sequence: int = 0
    length_errors: int = 0


class Requester:
    def __init__(
        self,
        builder: roce.FrameBuilder,
        path_mtu: int = 4096,
        start_psn: int = 0,
        ackreq_every: int = 16,
        window_pkts: int = 64,
        rto_ns: int = 200_000_000,
        rto_max_ns: int = 2_000_000_000,
    ):
        self.b = builder
        self.mtu = roce.payload_per_packet(path_mtu)
        self.ackreq_every = ackreq_every
        self.window = window_pkts
        self.rto_base_ns = self.rto_ns = rto_ns
        self.rto_max_ns = rto_max_ns
        self.next_psn = start_psn  # PSN of the next packet to (re)send
        self.una = start_psn  # oldest unacknowledged PSN
        self.high = start_psn  # one past the highest PSN ever sent
        self.tail_psn = start_psn  # one past the last PSN assigned to a posted message
        self.pending: deque[Message] = deque()  # posted, not yet complete, in PSN order
        self.c = QPCounters()
        self.last_progress_ns = 0
        self.rtt_probe: dict[int, int] = {}  # AckReq PSN -> first send time (Karn: not resent)
        self.rtt_samples_ns: list[int] = []
        # loss repairs: [t go-back-N began (NAK or timeout), t the PSN it went back to was acknowledged
        # or None]; what tells a QP that lost frames to a failure from one that only queued behind it
        self.repairs_ns: list[list[int | None]] = []
        self._repair_psn: int | None = None
        self.rto_min_ns = rto_ns
        self.srtt_ns: float | None = None
        self.rttvar_ns = 0.0

    # ---- posting --------------------------------------------------------------------
    def post(self, msg: Message, now_ns: int) -> None:
        if msg.size_bytes < 0 or len(msg.data) != msg.size_bytes:
            raise ValueError("message data must have size_bytes bytes")
        msg.n_packets = max(1, -(-msg.size_bytes // self.mtu))
        msg.first_psn = self.tail_psn
        msg.t_post_ns = now_ns
        msg.data_crc = zlib.crc32(msg.data)
        self.tail_psn = psn_add(self.tail_psn, msg.n_packets)
        if not self.pending or self.una == self.next_psn:
            self.last_progress_ns = now_ns
        self.pending.append(msg)

    @property
    def outstanding(self) -> int:
        return psn_diff(self.next_psn, self.una)

    def has_data(self) -> bool:
        if self.tail_psn == self.next_psn:
            return False
        return psn_diff(self.tail_psn, self.next_psn) > 0 and psn_diff(self.next_psn, self.una) < self.window

    def idle(self) -> bool:
        return not self.pending

    def _locate(self, psn: int) -> tuple[Message, int]:
        m = self.pending[0]
        k = (psn - m.first_psn) % PSN_MOD
        if k < m.n_packets:
            return m, k
        for m in self.pending:
            k = psn_diff(psn, m.first_psn)
            if 0 <= k < m.n_packets:
                return m, k
        raise LookupError(f"PSN {psn} belongs to no pending message")

    def next_frame(self, now_ns: int) -> bytes | None:
        """The next packet to transmit, or None if nothing may be sent now."""
        if not self.has_data():
            return None
        psn = self.next_psn
        m, k = self._locate(psn)
        chunk = m.data[k * self.mtu : (k + 1) * self.mtu]
        if m.n_packets == 1:
            op = roce.WRITE_ONLY
        elif k == 0:
            op = roce.WRITE_FIRST
        elif k == m.n_packets - 1:
            op = roce.WRITE_LAST
        else:
            op = roce.WRITE_MIDDLE
        last = k == m.n_packets - 1
        ackreq = last or (psn % self.ackreq_every == self.ackreq_every - 1)
        reth = (m.va, m.rkey, m.size_bytes) if op in roce.HAS_RETH else None
        frame = self.b.frame(op, psn, ackreq, chunk, reth=reth)
        retransmit = psn_diff(psn, self.high) < 0
        if retransmit:
            self.c.retransmits += 1
            self.rtt_probe.pop(psn, None)
        else:
            self.high = psn_add(psn, 1)
            if ackreq:
                self.rtt_probe[psn] = now_ns
        if m.t_first_tx_ns is None:
            m.t_first_tx_ns = now_ns
        self.next_psn = psn_add(psn, 1)
        self.c.packets += 1
        self.c.bytes += len(frame)
        self.c.payload_bytes += len(chunk)
        return frame

    # ---- feedback -------------------------------------------------------------------
    def on_ack(self, syndrome: int, psn: int, now_ns: int) -> list[Message]:
        """ACK: everything through psn is acknowledged. NAK (PSN sequence error): the
        responder expects psn; everything before it arrived; resend from psn (go-back-N)."""
        done: list[Message] = []
        if syndrome >> 5 == 0b011:  # NAK
            self.c.naks += 1
            acked_through = psn_add(psn, -1)
            if psn_diff(psn, self.una) >= 0 and psn_diff(self.high, psn) > 0:
                done = self._advance(acked_through, now_ns)
                self._go_back(psn, now_ns)
            return done
        self.c.acks += 1
        t = self.rtt_probe.pop(psn, None)
        if t is not None:
            self._rtt_sample(now_ns - t)
        return self._advance(psn, now_ns)

    def _rtt_sample(self, rtt: int) -> None:
        """RFC 6298 smoothing. Why adaptive, unlike a NIC's fixed RC timeout: emulated time is
        dilated and queues are deep, so a fixed timeout fires spuriously under incast and
        go-back-N then resends whole windows until the fabric collapses."""
        self.rtt_samples_ns.append(rtt)
        if self.srtt_ns is None:
            self.srtt_ns, self.rttvar_ns = float(rtt), rtt / 2.0
        else:
            self.rttvar_ns = 0.75 * self.rttvar_ns + 0.25 * abs(self.srtt_ns - rtt)
            self.srtt_ns = 0.875 * self.srtt_ns + 0.125 * rtt
        self.rto_base_ns = max(self.rto_min_ns, int(self.srtt_ns + 4 * self.rttvar_ns))
        self.rto_ns = max(self.rto_ns, self.rto_base_ns)

    def _go_back(self, psn: int, now_ns: int) -> None:
        """Resend from psn. A go-back during an open repair extends it to the furthest PSN gone back
        to, rather than opening another."""
        self.next_psn = psn
        if self._repair_psn is None:
            self.repairs_ns.append([now_ns, None])
            self._repair_psn = psn
        elif psn_diff(psn, self._repair_psn) > 0:
            self._repair_psn = psn

    def _advance(self, acked_through: int, now_ns: int) -> list[Message]:
        new_una = psn_add(acked_through, 1)
        if psn_diff(new_una, self.una) <= 0 or psn_diff(self.high, new_una) < 0:
            return []  # stale or bogus
        self.una = new_una
        if self._repair_psn is not None and psn_diff(new_una, self._repair_psn) > 0:
            self.repairs_ns[-1][1] = now_ns
            self._repair_psn = None
        if psn_diff(self.next_psn, self.una) < 0:
            self.next_psn = self.una
        self.last_progress_ns = now_ns
        self.rto_ns = self.rto_base_ns
        for p in [p for p in self.rtt_probe if psn_diff(p, self.una) < 0]:
            del self.rtt_probe[p]
        done = []
        while self.pending and psn_diff(self.pending[0].last_psn, acked_through) <= 0:
            m = self.pending.popleft()
            m.t_complete_ns = now_ns
            done.append(m)
        return done

    def on_timer(self, now_ns: int) -> bool:
        """Retransmission timeout: nothing acknowledged for rto while packets are in flight."""
        if self.outstanding > 0 and now_ns - self.last_progress_ns >= self.rto_ns:
            self.c.timeouts += 1
            self._go_back(self.una, now_ns)
            self.last_progress_ns = now_ns
            self.rto_ns = min(2 * self.rto_ns, self.rto_max_ns)
            return True
        return False


@dataclass
class Received:
    """A message as the responder assembled it."""

    size_bytes: int
    received_bytes: int
    crc: int
    t_first_rx_ns: int
    t_last_rx_ns: int
    ok: bool


class Responder:
    def __init__(self, builder: roce.FrameBuilder, start_psn: int = 0, ack_coalesce: int = 16):
        self.b = builder  # builds frames back toward the requester
        self.epsn = start_psn
        self.ack_coalesce = ack_coalesce
        self.unacked = 0
        self.nak_outstanding = False
        self.msn = 0
        self.c = QPCounters()
        self._cur: dict | None = None

    def ack_frame(self, psn: int) -> bytes:
        f = self.b.frame(roce.ACKNOWLEDGE, psn, aeth=(roce.AETH_ACK, self.msn))
        self.c.acks += 1
        return f

    def on_packet(self, p: roce.Parsed, now_ns: int) -> tuple[bytes | None, Received | None]:
        """(frame to send back or None, completed message or None)."""
        d = psn_diff(p.psn, self.epsn)
        if d < 0:  # duplicate (our ACK was lost or a go-back-N resend): re-ACK
            self.c.duplicates += 1
            return self.ack_frame(psn_add(self.epsn, -1)), None
        if d > 0:  # gap: NAK once per gap, drop
            self.c.out_of_sequence += 1
            if not self.nak_outstanding:
                self.nak_outstanding = True
                self.c.naks += 1
                return self.b.frame(roce.ACKNOWLEDGE, self.epsn, aeth=(roce.AETH_NAK_PSN_SEQ, self.msn)), None
            return None, None
        # in sequence
        op = p.opcode
        if op in roce.HAS_RETH:
            if self._cur is not None:
                self.c.length_errors += 1  # a new message while one was open
            self._cur = {"size": p.reth[2], "got": 0, "crc": 0, "t_first": now_ns}
        elif self._cur is None:
            self.c.length_errors += 1  # Middle/Last with no First
            self.epsn = psn_add(self.epsn, 1)
            return None, None
        cur = self._cur
        cur["got"] += len(p.payload)
        cur["crc"] = zlib.crc32(p.payload, cur["crc"])
        self.epsn = psn_add(self.epsn, 1)
        self.nak_outstanding = False
        self.unacked += 1
        self.c.packets += 1
        self.c.payload_bytes += len(p.payload)
        done = None
        if op in (roce.WRITE_LAST, roce.WRITE_ONLY):
            ok = cur["got"] == cur["size"]
            if not ok:
                self.c.length_errors += 1
            done = Received(cur["size"], cur["got"], cur["crc"], cur["t_first"], now_ns, ok)
            self._cur = None
            self.msn = (self.msn + 1) % PSN_MOD
        if p.ackreq or self.unacked >= self.ack_coalesce or done is not None:
            self.unacked = 0
            return self.ack_frame(p.psn), done
        return None, done
