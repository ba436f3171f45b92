"""The traffic agent: one process owning every GPU port's packet socket, running all QPs.

Why one process for all hosts: the agents share 2 cores with ovs-vswitchd; one event loop
avoids a process per host and their context switches (docs/transport.md has the
measurement). Every completed message becomes one append-only JSON line (flushed), with
nanosecond CLOCK_MONOTONIC timestamps that every process on the machine shares.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import select
import time
import zlib
from collections import deque
from dataclasses import dataclass, field

from . import roce
from .cc import Timely
from .dcqcn import DcqcnQp
from .port import Pacer, PreciseEpoll, open_packet_socket, socket_drops
from .rc import Message, QPCounters, Received, Requester, Responder

MAX_RX_PER_WAKE = 512
TIMER_TICK_NS = 1_000_000
PACER_SLACK_NS = TIMER_TICK_NS
LOOP_GAP_NS = (
    2 * TIMER_TICK_NS
)  # a loop turn longer than this is recorded (a stall)  # credit an idle port may bank: one loop tick of line rate


@dataclass
class PortSpec:
    name: str  # interface name (the model's GPU port name, e.g. g0-p1)
    gpu: str
    mac: str
    ip: str
    rate_bps: float  # the emulated (scaled) line rate
    netns_pid: int | None = None


@dataclass
class PortStats:
    tx_frames: int = 0
    rx_frames: int = 0
    tx_blocked: int = 0
    socket_drops: int = 0  # frames the kernel dropped on this port's socket (receive buffer full)
    malformed: dict = field(default_factory=dict)  # reason -> count


class NicPort:
    def __init__(self, spec: PortSpec, now_ns: int, pace_fraction: float, socket_buffer_bytes: int = 8 << 20):
        self.spec = spec
        self.sock = open_packet_socket(spec.name, spec.netns_pid, socket_buffer_bytes)
        # slack: 1 ms of line rate banked at most (absorbs a late wake-up); frames leave at line rate
        self.pacer = Pacer(
            spec.rate_bps * pace_fraction,
            now_ns=now_ns,
            burst_bytes=int(spec.rate_bps * pace_fraction * PACER_SLACK_NS / 8e9),
        )
        self.ctrl: deque[bytes] = deque()  # ACK/NAK frames, sent before data
        self.requesters: list[Connection] = []
        self.rr = 0
        self.by_req_qpn: dict[int, Connection] = {}
        self.by_resp_qpn: dict[int, Connection] = {}
        self.held: bytes | None = None  # a frame the kernel refused (qdisc full), retried first
        self.stats = PortStats()

    def endpoint(self) -> roce.Endpoint:
        return roce.Endpoint(self.spec.mac, self.spec.ip)


class Connection:
    """One RC QP pair: requester on the source port, responder on the destination port."""

    def __init__(
        self,
        cid: int,
        src: NicPort,
        dst: NicPort,
        req_qpn: int,
        resp_qpn: int,
        sport: int,
        path_mtu: int,
        cc: Timely | DcqcnQp | None,
        rc_opts: dict,
    ):
        self.cid, self.src, self.dst, self.sport = cid, src, dst, sport
        self.req_qpn, self.resp_qpn = req_qpn, resp_qpn
        # a DCQCN sender marks its data ECN-capable (ECT(0)), as RoCEv2 NICs do, so switches can mark CE
        self.data_tos = roce.ECT0 if isinstance(cc, DcqcnQp) else 0
        fwd = roce.FrameBuilder(src.endpoint(), dst.endpoint(), sport, resp_qpn, tos=self.data_tos)
        back = roce.FrameBuilder(dst.endpoint(), src.endpoint(), sport, req_qpn)
        opts = dict(rc_opts)
        if "rto_ns" not in opts:
            # floor: draining four full windows at line rate; anything shorter is always spurious
            window = opts.get("window_pkts", 64)
            frame_bits = 8 * (path_mtu + roce.MIN_FRAME + roce.RETH_LEN)
            opts["rto_ns"] = max(200_000_000, int(4 * window * frame_bits / src.spec.rate_bps * 1e9))
        self.req = Requester(fwd, path_mtu=path_mtu, **opts)
        self.resp = Responder(back, ack_coalesce=rc_opts.get("ackreq_every", 16))
        self.received: deque[Received] = deque()
        self.cc = cc
        self.qp_pacer = Pacer(cc.rate_bps, 2 * 9018, 0) if cc else None
        self.posted = 0
        self.completed = 0
        self.home = (src.spec.name, dst.spec.name)  # the ports it was opened on
        self.progress_ns = 0  # last acknowledgement progress (or release onto an idle QP)
        self.stalls: list[tuple[int, int]] = []  # (last progress, resumed) gaps longer than the agent's stall_ns
        self.alt: tuple[str, str] | None = None  # alternate (source port, destination port): APM
        self.timeouts_mark = 0  # requester timeouts at the last progress
        self.migrations: list[int] = []  # when the QP moved to its alternate path
        self.ce_rx = 0  # responder: data frames that arrived CE-marked
        self.cnps_tx = 0  # responder: CNPs it sent back
        self.cnps_rx = 0  # requester: CNPs that reached it
        self.last_cnp_ns: int | None = None

    def rebuild(self, src: NicPort, dst: NicPort) -> None:
        """Move the QP pair to other ports (RoCE's automatic path migration): new headers both
        ways, same QPNs and PSN state, so go-back-N resumes from the oldest unacknowledged PSN."""
        self.src, self.dst = src, dst
        self.req.b = roce.FrameBuilder(src.endpoint(), dst.endpoint(), self.sport, self.resp_qpn, tos=self.data_tos)
        self.resp.b = roce.FrameBuilder(dst.endpoint(), src.endpoint(), self.sport, self.req_qpn)


_BLOCK = bytes((i * 131 + (i >> 8) * 7) & 0xFF for i in range(4099))  # 4099: prime, so no 4 KB period


def message_data(msg_id: int, size: int) -> bytes:
    """Deterministic content that differs per message and per offset (cheap: one rotation of a
    fixed block, repeated), so integrity checks catch misplaced or stale bytes."""
    if size <= 0:
        return b""
    k = zlib.crc32(msg_id.to_bytes(8, "little")) % len(_BLOCK)
    block = _BLOCK[k:] + _BLOCK[:k]
    return (block * (-(-size // len(block))))[:size]


class Agent:
    def __init__(
        self,
        on_record=None,
        pace_fraction: float = 1.0,
        rc_opts: dict | None = None,
        socket_buffer_bytes: int = 8 << 20,
        stall_ns: int | None = None,
        apm_timeouts: int | None = None,
        cnp_interval_ns: int | None = None,
    ):
        """on_record: called with each completed message's record (the caller decides where
        records go; the traffic core writes no files of its own). stall_ns: record a QP's
        acknowledgement gaps longer than this (failure recovery times). apm_timeouts: a QP with an
        alternate path moves to it after this many timeouts without progress. cnp_interval_ns: a
        receiving port answers CE-marked data with a CNP to the sending QP, at most one per QP per
        this interval (None: CE marks are counted, never answered)."""
        self.cnp_interval_ns = cnp_interval_ns
        self.stall_ns = stall_ns
        self.apm_timeouts = apm_timeouts
        self.ports: dict[str, NicPort] = {}
        self.conns: list[Connection] = []
        self.on_record = on_record
        self.socket_buffer_bytes = socket_buffer_bytes
        self.pace_fraction = pace_fraction
        self.rc_opts = rc_opts or {}
        self._qpn = itertools.count(0x100)
        self._msg_id = itertools.count(1)
        self._schedule: list = []  # heap of (t_ns, seq, conn, Message)
        self._seq = itertools.count()
        self.epoll = select.epoll()
        self.waiter = PreciseEpoll(self.epoll)
        self._fd_port: dict[int, NicPort] = {}
        self.done: list[dict] = []
        self.cpu_s = 0.0
        self.loop_gaps: list[tuple[int, int]] = []  # (wall ns, agent CPU ns) of loop turns > LOOP_GAP_NS

    # ---- setup ------------------------------------------------------------------------
    def add_port(self, spec: PortSpec) -> NicPort:
        if spec.name in self.ports:
            return self.ports[spec.name]
        port = NicPort(spec, time.monotonic_ns(), self.pace_fraction, self.socket_buffer_bytes)
        self.ports[spec.name] = port
        self.epoll.register(port.sock.fileno(), select.EPOLLIN)
        self._fd_port[port.sock.fileno()] = port
        return port

    def connect(
        self, src: str, dst: str, sport: int, path_mtu: int = 4096, cc: Timely | DcqcnQp | None = None
    ) -> Connection:
        s, d = self.ports[src], self.ports[dst]
        conn = Connection(len(self.conns), s, d, next(self._qpn), next(self._qpn), sport, path_mtu, cc, self.rc_opts)
        s.by_req_qpn[conn.req_qpn] = conn
        d.by_resp_qpn[conn.resp_qpn] = conn
        s.requesters.append(conn)
        self.conns.append(conn)
        return conn

    def set_alternate(self, conn: Connection, src: str, dst: str) -> None:
        """The QP's alternate path (ports already added): where APM moves it."""
        if src not in self.ports or dst not in self.ports:
            raise KeyError(f"alternate ports {src}, {dst}: add them first")
        conn.alt = (src, dst)

    def _migrate(self, conn: Connection, now: int) -> None:
        old_src, old_dst = conn.src, conn.dst
        new_src, new_dst = self.ports[conn.alt[0]], self.ports[conn.alt[1]]
        old_src.requesters.remove(conn)
        old_src.by_req_qpn.pop(conn.req_qpn, None)
        old_dst.by_resp_qpn.pop(conn.resp_qpn, None)
        conn.rebuild(new_src, new_dst)
        new_src.requesters.append(conn)
        new_src.by_req_qpn[conn.req_qpn] = conn
        new_dst.by_resp_qpn[conn.resp_qpn] = conn
        conn.alt = (old_src.spec.name, old_dst.spec.name)  # back again if this path fails too
        req = conn.req
        req.next_psn, req.rto_ns, req.last_progress_ns = req.una, req.rto_base_ns, now
        conn.timeouts_mark = req.c.timeouts
        conn.migrations.append(now)

    def post(
        self,
        conn: Connection,
        size_bytes: int,
        at_ns: int | None = None,
        meta: dict | None = None,
        data: bytes | None = None,
    ) -> Message:
        """Schedule a message at CLOCK_MONOTONIC time at_ns (None: now). Cheap: the payload is
        generated only when the message is released, and dropped once it completes."""
        mid = next(self._msg_id)
        msg = Message(mid, size_bytes, data, t_due_ns=at_ns, meta=meta or {})  # data None: made when released
        heapq.heappush(self._schedule, (at_ns if at_ns is not None else 0, next(self._seq), conn, msg))
        conn.posted += 1
        return msg

    # ---- the loop -----------------------------------------------------------------------
    def pending(self) -> int:
        return sum(c.posted - c.completed for c in self.conns)

    def run(self, deadline_ns: int | None = None, progress=None, stop_on_completion: bool = False) -> bool:
        """Run until every posted message completed (True) or the deadline passed (False).
        stop_on_completion: also return (False unless all are done) as soon as one more message
        completed, so a closed-loop driver (the serving model) reacts at that instant."""
        n_done = len(self.done)
        cpu0 = time.process_time()
        next_timer = 0
        gc_was_on = gc.isenabled()
        gc.disable()  # a collection pause releases a whole batch of messages late
        last_now, last_cpu = time.monotonic_ns(), time.thread_time_ns()
        try:
            while True:
                now = time.monotonic_ns()
                gap = now - last_now
                if gap > LOOP_GAP_NS:  # the loop itself was late: busy (cpu ~ gap) or not scheduled
                    cpu = time.thread_time_ns() - last_cpu
                    self.loop_gaps.append((gap, cpu))
                last_now, last_cpu = now, time.thread_time_ns()
                while self._schedule and self._schedule[0][0] <= now:
                    _, _, conn, msg = heapq.heappop(self._schedule)
                    if msg.data is None:
                        msg.data = message_data(msg.msg_id, msg.size_bytes)
                    if conn.req.idle():
                        conn.progress_ns = now
                    conn.req.post(msg, now)
                if now >= next_timer:
                    for c in self.conns:
                        if (
                            not c.req.idle()
                            and c.req.on_timer(now)
                            and c.alt is not None
                            and self.apm_timeouts
                            and c.req.c.timeouts - c.timeouts_mark >= self.apm_timeouts
                        ):
                            self._migrate(c, now)
                    next_timer = now + TIMER_TICK_NS
                    if progress:
                        progress(self)
                wait = self._transmit(now)
                if not self._schedule and self.pending() == 0:
                    return True
                if deadline_ns is not None and now >= deadline_ns:
                    return False
                if self._schedule:
                    wait = min(wait, self._schedule[0][0] - now)
                for fd in self.waiter.poll_ns(max(0, min(wait, TIMER_TICK_NS))):
                    self._receive(self._fd_port[fd])
                if stop_on_completion and len(self.done) != n_done:
                    return not self._schedule and self.pending() == 0
        finally:
            if gc_was_on:
                gc.enable()
            self.cpu_s += time.process_time() - cpu0

    def _send(self, port: NicPort, frame: bytes) -> bool:
        try:
            port.sock.send(frame)
        except (BlockingIOError, OSError) as exc:
            if isinstance(exc, BlockingIOError) or getattr(exc, "errno", None) in (105, 11):  # ENOBUFS, EAGAIN
                port.held = frame
                port.stats.tx_blocked += 1
                return False
            raise
        port.pacer.consume(len(frame))
        port.stats.tx_frames += 1
        return True

    def _transmit(self, now: int) -> int:
        """Send what the pacers allow; return ns until the next send could happen."""
        wait = 1 << 62
        for port in self.ports.values():
            p = port.pacer
            p.refill(now)
            while p.ready():
                if port.held is not None:
                    frame, port.held = port.held, None
                    if not self._send(port, frame):
                        break
                    continue
                if port.ctrl:
                    if not self._send(port, port.ctrl.popleft()):
                        break
                    continue
                frame = self._next_data(port, now)
                if frame is None:
                    break
                if not self._send(port, frame):
                    break
            if port.held is not None or port.ctrl or any(c.req.has_data() for c in port.requesters):
                wait = min(wait, max(p.wait_ns(), 50_000))
        return wait

    def _next_data(self, port: NicPort, now: int) -> bytes | None:
        n = len(port.requesters)
        for i in range(n):
            conn = port.requesters[(port.rr + i) % n]
            if not conn.req.has_data():
                continue
            if conn.qp_pacer is not None:
                if isinstance(conn.cc, DcqcnQp):
                    conn.cc.advance(now)  # its timers: alpha decay, rate increase
                conn.qp_pacer.rate_bps = conn.cc.rate_bps
                conn.qp_pacer.refill(now)
                if not conn.qp_pacer.ready():
                    continue
            frame = conn.req.next_frame(now)
            if frame is not None:
                if conn.qp_pacer is not None:
                    conn.qp_pacer.consume(len(frame))
                port.rr = (port.rr + i + 1) % n
                return frame
        return None

    def _receive(self, port: NicPort) -> None:
        now = time.monotonic_ns()
        for _ in range(MAX_RX_PER_WAKE):
            try:
                frame = port.sock.recv(16384)
            except BlockingIOError:
                return
            port.stats.rx_frames += 1
            try:
                p = roce.parse(frame)
            except roce.MalformedPacket as exc:
                key = str(exc).split(" 0x")[0]
                port.stats.malformed[key] = port.stats.malformed.get(key, 0) + 1
                continue
            if p.opcode == roce.ACKNOWLEDGE:
                conn = port.by_req_qpn.get(p.dest_qp)
                if conn is None:
                    port.stats.malformed["unknown QP"] = port.stats.malformed.get("unknown QP", 0) + 1
                    continue
                n_rtt = len(conn.req.rtt_samples_ns)
                una = conn.req.una
                for msg in conn.req.on_ack(p.aeth[0], p.psn, now):
                    self._complete(conn, msg)
                if conn.req.una != una:
                    if self.stall_ns is not None and now - conn.progress_ns > self.stall_ns:
                        conn.stalls.append((conn.progress_ns, now))
                    conn.progress_ns = now
                    conn.timeouts_mark = conn.req.c.timeouts
                if isinstance(conn.cc, Timely):
                    for rtt in conn.req.rtt_samples_ns[n_rtt:]:
                        conn.cc.on_rtt(rtt)
            elif p.opcode == roce.CNP:
                conn = port.by_req_qpn.get(p.dest_qp)
                if conn is None:
                    port.stats.malformed["unknown QP"] = port.stats.malformed.get("unknown QP", 0) + 1
                    continue
                conn.cnps_rx += 1
                if isinstance(conn.cc, DcqcnQp):
                    conn.cc.on_cnp(now)
            else:
                conn = port.by_resp_qpn.get(p.dest_qp)
                if conn is None:
                    port.stats.malformed["unknown QP"] = port.stats.malformed.get("unknown QP", 0) + 1
                    continue
                reply, got = conn.resp.on_packet(p, now)
                if reply is not None:
                    port.ctrl.append(reply)
                if p.ecn == roce.CE:
                    conn.ce_rx += 1
                    gap = self.cnp_interval_ns
                    if gap is not None and (conn.last_cnp_ns is None or now - conn.last_cnp_ns >= gap):
                        port.ctrl.append(conn.resp.b.cnp())
                        conn.last_cnp_ns = now
                        conn.cnps_tx += 1
                if got is not None:
                    conn.received.append(got)

    def _complete(self, conn: Connection, msg: Message) -> None:
        got = conn.received.popleft() if conn.received else None
        conn.completed += 1
        msg.data = b""  # completed: free the payload
        rec = {
            "msg_id": msg.msg_id,
            "qp": conn.cid,
            "src": conn.src.spec.name,
            "dst": conn.dst.spec.name,
            "src_gpu": conn.src.spec.gpu,
            "dst_gpu": conn.dst.spec.gpu,
            "sport": conn.sport,
            "size_bytes": msg.size_bytes,
            "packets": msg.n_packets,
            "t_post_ns": msg.t_post_ns,
            "t_due_ns": msg.t_due_ns,
            "t_first_tx_ns": msg.t_first_tx_ns,
            "t_first_rx_ns": got.t_first_rx_ns if got else None,
            "t_last_rx_ns": got.t_last_rx_ns if got else None,
            "t_complete_ns": msg.t_complete_ns,
            "integrity_ok": bool(got and got.ok and got.crc == msg.data_crc and got.received_bytes == msg.size_bytes),
            "qp_retransmits": conn.req.c.retransmits,
            "qp_naks": conn.req.c.naks,
            "qp_timeouts": conn.req.c.timeouts,
            "qp_migrations": len(conn.migrations),
            "clock": "CLOCK_MONOTONIC",
            **msg.meta,
        }
        self.done.append(rec)
        if self.on_record is not None:
            self.on_record(rec)

    # ---- results ------------------------------------------------------------------------
    def collect_socket_drops(self) -> None:
        for p in self.ports.values():
            p.stats.socket_drops += socket_drops(p.sock)

    def counters(self) -> dict:
        def qp(c: QPCounters) -> dict:
            return dict(vars(c))

        return {
            "qps": [
                {
                    "qp": c.cid,
                    "src": c.src.spec.name,
                    "dst": c.dst.spec.name,
                    "sport": c.sport,
                    "requester": qp(c.req.c),
                    "responder": qp(c.resp.c),
                    "home": list(c.home),
                    "rto_min_ns": c.req.rto_min_ns,
                    "stalls_ns": c.stalls,
                    "repairs_ns": c.req.repairs_ns,
                    "migrations_ns": c.migrations,
                    "open_since_ns": None if c.req.idle() else c.progress_ns,
                    "ecn": {
                        "ce_rx": c.ce_rx,
                        "cnps_tx": c.cnps_tx,
                        "cnps_rx": c.cnps_rx,
                        "rate_changes": c.cc.changes if isinstance(c.cc, DcqcnQp) else [],
                    },
                }
                for c in self.conns
            ],
            "ports": {n: vars(p.stats) for n, p in self.ports.items()},
            "agent_cpu_s": self.cpu_s,
            "loop_stalls": {
                "count": len(self.loop_gaps),
                "max_ns": max((g for g, _ in self.loop_gaps), default=0),
                "wall_ns": sum(g for g, _ in self.loop_gaps),
                "cpu_ns": sum(c for _, c in self.loop_gaps),
                "threshold_ns": LOOP_GAP_NS,
            },
        }

    def close(self) -> None:
        self.collect_socket_drops()
        for p in self.ports.values():
            p.sock.close()
        self.epoll.close()
