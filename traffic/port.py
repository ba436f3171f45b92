"""A NIC port as a packet socket in its host's network namespace, with a pacer.

Why one process can own every host's ports: a socket stays in the namespace it was created
in, so the agent enters each host's namespace (setns) just long enough to open its sockets.
"""

from __future__ import annotations

import ctypes
import os
import platform
import socket
import struct
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
ETH_P_IP = 0x0800
SOL_PACKET = 263
PACKET_QDISC_BYPASS = 20  # left off: frames must pass the host's shaping qdisc
SO_ATTACH_FILTER = 26
_libc = ctypes.CDLL("libc.so.6", use_errno=True)

# classic BPF: IPv4, UDP, not a fragment, destination port 4791 (cf. tcpdump -dd)
_BPF = [
    (0x28, 0, 0, 0x0000000C),
    (0x15, 0, 8, 0x00000800),
    (0x30, 0, 0, 0x00000017),
    (0x15, 0, 6, 0x00000011),
    (0x28, 0, 0, 0x00000014),
    (0x45, 4, 0, 0x00001FFF),
    (0xB1, 0, 0, 0x0000000E),
    (0x48, 0, 0, 0x00000010),
    (0x15, 0, 1, 0x000012B7),
    (0x06, 0, 0, 0x00040000),
    (0x06, 0, 0, 0x00000000),
]


class _EpollEvent(ctypes.Structure):
    # struct epoll_event is packed on x86-64 (12 bytes), naturally aligned elsewhere
    _pack_ = 1 if platform.machine() in ("x86_64", "AMD64") else 0
    _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class PreciseEpoll:
    """epoll whose timeout is in nanoseconds (epoll_pwait2, Linux >= 5.11).

    Why: select.epoll.poll rounds its timeout up to whole milliseconds, so a message due in
    0.2 ms was released up to 1 ms late, and the KV time measured from its planned release
    grew by that much. Falls back to millisecond epoll where epoll_pwait2 is missing.
    """

    MAX_EVENTS = 64

    def __init__(self, ep):
        self.ep = ep
        self._fn = getattr(_libc, "epoll_pwait2", None)
        self._buf = (_EpollEvent * self.MAX_EVENTS)()
        self.precise = self._fn is not None
        if self._fn is not None:
            self._fn.argtypes = [
                ctypes.c_int,
                ctypes.POINTER(_EpollEvent),
                ctypes.c_int,
                ctypes.POINTER(_Timespec),
                ctypes.c_void_p,
            ]
            self._fn.restype = ctypes.c_int

    def poll_ns(self, timeout_ns: int) -> list[int]:
        """File descriptors that became ready within timeout_ns (0: do not wait)."""
        if self._fn is None:
            return [fd for fd, _ in self.ep.poll(max(0.0, timeout_ns / 1e9))]
        ts = _Timespec(timeout_ns // 1_000_000_000, timeout_ns % 1_000_000_000)
        n = self._fn(self.ep.fileno(), self._buf, self.MAX_EVENTS, ctypes.byref(ts), None)
        if n < 0:
            err = ctypes.get_errno()
            if err == 4:  # EINTR: a signal; the caller loops anyway
                return []
            raise OSError(err, f"epoll_pwait2: {os.strerror(err)}")
        return [self._buf[i].data & 0xFFFFFFFF for i in range(n)]


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def in_netns(pid: int | None):
    """Run the block inside the network namespace of process `pid` (None: stay here)."""
    if pid is None:
        yield
        return
    here = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        _setns(there)
        yield
    finally:
        _setns(here)
        os.close(here)
        os.close(there)


PACKET_STATISTICS = 6


def socket_drops(sock: socket.socket) -> int:
    """Frames the kernel dropped on this packet socket since the last call (PACKET_STATISTICS
    reads and resets tpacket_stats {tp_packets, tp_drops}): a receive buffer the agent did not
    drain in time."""
    _, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return drops


def open_packet_socket(ifname: str, netns_pid: int | None, buf_bytes: int = 8 << 20) -> socket.socket:
    with in_netns(netns_pid):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        prog = b"".join(struct.pack("HBBI", *ins) for ins in _BPF)
        buf = ctypes.create_string_buffer(prog)
        fprog = struct.pack("HL", len(_BPF), ctypes.addressof(buf))  # the kernel copies the program
        s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buf_bytes)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buf_bytes)
        s.bind((ifname, ETH_P_IP))
        s.setblocking(False)
        socket_drops(s)  # start the socket's drop count at zero
    # drain anything that arrived before the filter was attached
    try:
        while True:
            s.recv(65536)
    except BlockingIOError:
        pass
    return s


class Pacer:
    """Token bucket in bytes at rate_bps. A frame may leave when the bucket is not negative; it
    then takes its length out, so frames leave exactly at line rate. `burst_bytes` is only the
    credit an idle port may bank — the slack that absorbs the event loop waking late (its
    timeouts are whole milliseconds) — so at most one frame plus that slack ever leaves ahead of
    the exact schedule."""

    def __init__(self, rate_bps: float, burst_bytes: int, now_ns: int):
        self.rate_bps = float(rate_bps)
        self.burst = burst_bytes
        self.tokens = 0.0
        self.t = now_ns

    def refill(self, now_ns: int) -> None:
        self.tokens = min(self.burst, self.tokens + (now_ns - self.t) * self.rate_bps / 8e9)
        self.t = now_ns

    def ready(self) -> bool:
        return self.tokens >= 0

    def consume(self, nbytes: int) -> None:
        self.tokens -= nbytes

    def wait_ns(self) -> int:
        """ns until a frame may leave."""
        return 0 if self.tokens >= 0 else int(-self.tokens * 8e9 / self.rate_bps) + 1
