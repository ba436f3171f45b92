"""RoCEv2 wire format: Ethernet / IPv4 / UDP(4791) / IB BTH [/ RETH | AETH] / payload / ICRC.

Why frames are built here and not by the kernel: the ICRC covers the IP and UDP headers
(with TTL, TOS, checksums and BTH reserved bits masked). Sending whole frames on a packet
socket, with IP ID 0 and DF set, makes every covered byte known in advance, so the hot path
only appends a CRC continued from a per-QP precomputed prefix.
"""

from __future__ import annotations

import socket
import struct
import zlib
from dataclasses import dataclass

ROCE_UDP_PORT = 4791
ETH_HDR, IP_HDR, UDP_HDR, BTH_LEN, RETH_LEN, AETH_LEN, ICRC_LEN = 14, 20, 8, 12, 16, 4, 4
OFF_IP, OFF_UDP, OFF_BTH = ETH_HDR, ETH_HDR + IP_HDR, ETH_HDR + IP_HDR + UDP_HDR
OFF_EXT = OFF_BTH + BTH_LEN
MIN_FRAME = OFF_EXT + ICRC_LEN
ETH_P_IP = 0x0800
PKEY_DEFAULT = 0xFFFF

# RC opcodes (IBTA vol. 1, table 38)
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY, ACKNOWLEDGE = 0x06, 0x07, 0x08, 0x0A, 0x11
CNP = 0x81  # RoCEv2 Congestion Notification Packet (IBTA RoCEv2 annex A17): BTH + 16 reserved bytes
CNP_RESERVED = 16
# IP ECN codepoints (RFC 3168): RoCEv2 data leaves the sender ECT(0); a congested switch marks CE
NOT_ECT, ECT0, CE = 0b00, 0b10, 0b11
OPCODE_NAMES = {
    WRITE_FIRST: "RDMA WRITE First",
    WRITE_MIDDLE: "RDMA WRITE Middle",
    WRITE_LAST: "RDMA WRITE Last",
    WRITE_ONLY: "RDMA WRITE Only",
    ACKNOWLEDGE: "Acknowledge",
    CNP: "CNP",
}
HAS_RETH = frozenset((WRITE_FIRST, WRITE_ONLY))
# AETH syndromes
AETH_ACK = 0x1F  # ACK, credit field "invalid" (no end-to-end credits)
AETH_NAK_PSN_SEQ = 0x60  # NAK, PSN sequence error
PSN_MOD = 1 << 24
PATH_MTUS = (256, 512, 1024, 2048, 4096)

_BTH = struct.Struct("!BBHII")
_RETH = struct.Struct("!QII")
_AETH = struct.Struct("!I")
_IP = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
_ICRC = struct.Struct("<I")


class MalformedPacket(ValueError):
    """A frame that is not a valid RoCEv2 packet for us: dropped and counted, never raised out."""


def psn_add(psn: int, n: int) -> int:
    return (psn + n) % PSN_MOD


def psn_diff(a: int, b: int) -> int:
    """a - b in 24-bit serial-number arithmetic, in [-2^23, 2^23)."""
    d = (a - b) % PSN_MOD
    return d - PSN_MOD if d >= PSN_MOD // 2 else d


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def ip_checksum(header: bytes) -> int:
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


@dataclass(frozen=True)
class Endpoint:
    """One NIC port as the wire sees it."""

    mac: str
    ip: str


class FrameBuilder:
    """Per-QP header templates: only BTH fields, payload and the CRC change per packet."""

    def __init__(self, src: Endpoint, dst: Endpoint, sport: int, dest_qp: int, tos: int = 0, ttl: int = 64):
        self.src, self.dst, self.sport, self.dest_qp = src, dst, sport, dest_qp
        self._eth = mac_bytes(dst.mac) + mac_bytes(src.mac) + struct.pack("!H", ETH_P_IP)
        self._saddr, self._daddr = socket.inet_aton(src.ip), socket.inet_aton(dst.ip)
        self.tos, self.ttl = tos, ttl
        self._prefix_cache: dict[int, tuple[bytes, int]] = {}

    def _headers(self, udp_payload_len: int) -> tuple[bytes, int]:
        """(eth+ip+udp bytes, CRC32 of the masked pseudo-header) for this length, cached."""
        got = self._prefix_cache.get(udp_payload_len)
        if got is None:
            total = IP_HDR + UDP_HDR + udp_payload_len
            ip0 = _IP.pack(0x45, self.tos, total, 0, 0x4000, self.ttl, 17, 0, self._saddr, self._daddr)
            ip = ip0[:10] + struct.pack("!H", ip_checksum(ip0)) + ip0[12:]
            udp = _UDP.pack(self.sport, ROCE_UDP_PORT, UDP_HDR + udp_payload_len, 0)
            masked_ip = _IP.pack(0x45, 0xFF, total, 0, 0x4000, 0xFF, 17, 0xFFFF, self._saddr, self._daddr)
            masked_udp = udp[:6] + b"\xff\xff"
            crc = zlib.crc32(b"\xff" * 8 + masked_ip + masked_udp)
            got = (self._eth + ip + udp, crc)
            if len(self._prefix_cache) < 64:
                self._prefix_cache[udp_payload_len] = got
        return got

    def frame(
        self,
        opcode: int,
        psn: int,
        ackreq: bool = False,
        payload: bytes = b"",
        reth: tuple[int, int, int] | None = None,
        aeth: tuple[int, int] | None = None,
    ) -> bytes:
        ext = b""
        if reth is not None:
            ext = _RETH.pack(*reth)
        elif aeth is not None:
            ext = _AETH.pack((aeth[0] << 24) | (aeth[1] & 0xFFFFFF))
        udp_len = BTH_LEN + len(ext) + len(payload) + ICRC_LEN
        head, crc = self._headers(udp_len)
        # BTH byte 1: SE, MigReq (1: the QP's path migration state is "migrated", as NICs send it), pad count, TVer
        flags = 0x40 if opcode == CNP else 0
        bth = _BTH.pack(opcode, flags, PKEY_DEFAULT, self.dest_qp & 0xFFFFFF, (0x80000000 if ackreq else 0) | psn)
        masked_bth = bth[:4] + b"\xff" + bth[5:]
        crc = zlib.crc32(payload, zlib.crc32(ext, zlib.crc32(masked_bth, crc)))
        return b"".join((head, bth, ext, payload, _ICRC.pack(crc & 0xFFFFFFFF)))

    def cnp(self) -> bytes:
        """A CNP to this builder's destination QP (the sender being told to slow down): BTH with
        opcode 0x81 and PSN 0, 16 reserved zero bytes, ICRC."""
        return self.frame(CNP, 0, payload=bytes(CNP_RESERVED))


@dataclass(frozen=True, slots=True)
class Parsed:
    saddr: bytes  # 4-byte IPv4 addresses (socket.inet_ntoa for text)
    daddr: bytes
    sport: int
    opcode: int
    dest_qp: int
    ackreq: bool
    psn: int
    reth: tuple[int, int, int] | None
    aeth: tuple[int, int] | None
    payload: memoryview
    ecn: int = NOT_ECT  # the IP header's ECN field: ECT0 on data from a DCQCN sender, CE once marked

    @property
    def src_ip(self) -> str:
        return socket.inet_ntoa(self.saddr)

    @property
    def dst_ip(self) -> str:
        return socket.inet_ntoa(self.daddr)


_pseudo_crc: dict[bytes, int] = {}  # IP+UDP header bytes -> CRC of the masked pseudo-header


def _pseudo_header_crc(ipudp: bytes) -> int:
    crc = _pseudo_crc.get(ipudp)
    if crc is None:
        ip = bytearray(ipudp[:IP_HDR])
        ip[1], ip[8], ip[10], ip[11] = 0xFF, 0xFF, 0xFF, 0xFF
        crc = zlib.crc32(bytes(ip) + ipudp[IP_HDR : IP_HDR + 6] + b"\xff\xff", zlib.crc32(b"\xff" * 8))
        if len(_pseudo_crc) < 4096:
            _pseudo_crc[ipudp] = crc
    return crc


def parse(frame: bytes) -> Parsed:
    """Validate and split one Ethernet frame; MalformedPacket on anything wrong."""
    n = len(frame)
    if n < MIN_FRAME:
        raise MalformedPacket("truncated")
    if frame[12] != 0x08 or frame[13] != 0x00 or frame[OFF_IP] != 0x45 or frame[OFF_IP + 9] != 17:
        raise MalformedPacket("not IPv4/UDP")
    total = (frame[OFF_IP + 2] << 8) | frame[OFF_IP + 3]
    if ETH_HDR + total > n or total < IP_HDR + UDP_HDR + BTH_LEN + ICRC_LEN:
        raise MalformedPacket("truncated")
    end = ETH_HDR + total  # ignore Ethernet padding
    sport, dport, ulen, _ = _UDP.unpack_from(frame, OFF_UDP)
    if dport != ROCE_UDP_PORT or ulen != total - IP_HDR:
        raise MalformedPacket("not RoCEv2")
    mv = memoryview(frame)
    crc = _pseudo_header_crc(bytes(mv[OFF_IP:OFF_BTH]))
    crc = zlib.crc32(mv[OFF_BTH : OFF_BTH + 4], crc)
    crc = zlib.crc32(mv[OFF_BTH + 5 : end - ICRC_LEN], zlib.crc32(b"\xff", crc))
    if _ICRC.unpack_from(frame, end - ICRC_LEN)[0] != crc:
        raise MalformedPacket("bad ICRC")
    opcode, _flags, _pkey, qp, apsn = _BTH.unpack_from(frame, OFF_BTH)
    off = OFF_EXT
    reth = aeth = None
    if opcode in HAS_RETH:
        if end - ICRC_LEN - off < RETH_LEN:
            raise MalformedPacket("truncated RETH")
        reth = _RETH.unpack_from(frame, off)
        off += RETH_LEN
    elif opcode == ACKNOWLEDGE:
        if end - ICRC_LEN - off < AETH_LEN:
            raise MalformedPacket("truncated AETH")
        (word,) = _AETH.unpack_from(frame, off)
        aeth = (word >> 24, word & 0xFFFFFF)
        off += AETH_LEN
    elif opcode == CNP:
        if end - ICRC_LEN - off != CNP_RESERVED:
            raise MalformedPacket("CNP without its 16 reserved bytes")
    elif opcode not in (WRITE_MIDDLE, WRITE_LAST):
        raise MalformedPacket(f"unsupported opcode 0x{opcode:02x}")
    return Parsed(
        frame[OFF_IP + 12 : OFF_IP + 16],
        frame[OFF_IP + 16 : OFF_IP + 20],
        sport,
        opcode,
        qp & 0xFFFFFF,
        apsn >> 31 == 1,
        apsn & 0xFFFFFF,
        reth,
        aeth,
        mv[off : end - ICRC_LEN],
        frame[OFF_IP + 1] & 0b11,
    )


def payload_per_packet(path_mtu: int) -> int:
    if path_mtu not in PATH_MTUS:
        raise ValueError(f"path MTU must be one of {PATH_MTUS} (got {path_mtu})")
    return path_mtu


def link_mtu_needed(path_mtu: int) -> int:
    """IP MTU a link needs to carry a full RoCE packet of this path MTU (first packet has RETH)."""
    return IP_HDR + UDP_HDR + BTH_LEN + RETH_LEN + path_mtu + ICRC_LEN


def default_path_mtu(link_mtu: int) -> int:
    """Largest RoCE path MTU whose packets (with RETH) fit the link MTU."""
    fitting = [m for m in PATH_MTUS if link_mtu_needed(m) <= link_mtu]
    if not fitting:
        raise ValueError(f"link MTU {link_mtu} is too small for RoCE")
    return fitting[-1]
