"""The emulation's ECN marker (testbed/emulation/bpf/ecn_marker.bpf.c) on its own: its marking
curve against red.py from the program's own counters, the checksum it patches, Not-ECT left
alone, the phantom queue draining at the configured rate, and marks on a real veth pair with the
phantom queue on one end and the marker on the other. No fabric."""

import math
import socket
import struct
import subprocess
import time
import uuid

import pytest

from testbed.congestion.red import mark_probability
from testbed.emulation import ecn

FRAME = 1000
KMIN, KMAX, PMAX, BIN = 100_000, 400_000, 0.2, 25_000
LO = 1  # BPF_PROG_TEST_RUN: the loopback device sends (phantom) and receives (marker)


def ipv4_frame(tos: int, size: int = FRAME) -> bytes:
    eth = bytes(12) + b"\x08\x00"
    ip = bytes([0x45, tos]) + struct.pack("!H", size - 14) + bytes(4) + bytes([64, 17, 0, 0]) + bytes([10, 0, 0, 1])
    ip += bytes([10, 0, 0, 2])
    return eth + ip + bytes(size - len(eth) - len(ip))


@pytest.fixture
def marker():
    m = ecn.Marker(f"test-{uuid.uuid4().hex[:8]}").load()
    try:
        yield m
    finally:
        m.unload()
    assert not m.dir.exists()


def test_the_marking_curve_matches_red_py_per_bin(marker, tmp_path):
    """The marker reads the port's phantom queue as a frame leaves; with the queue held still
    (rate 0) at five depths in each 25 KB bin from 0 to 775 KB, 200 ECT frames leave at each
    depth. The marks per bin are within 4.5 standard deviations of red.py's expectation at the
    backlog left behind the frames (the phantom queue less the frame itself)."""
    marker.configure(LO, ecn.PortConfig(0, KMIN, KMAX, PMAX, BIN))
    marker.tie(LO, LO)
    depths = [k * BIN // 5 for k in range(31 * 5)]
    for q in depths:
        marker.set_queue(LO, q + FRAME)
        out = marker.test_run(ipv4_frame(0x02), 200, tmp_path)
    assert out[15] & 3 == 3  # the last frames (770 KB behind) left marked CE
    got = marker.counters().set_index("bin")
    lines = []
    for b in range(0, 31):
        mine = [q for q in depths if q // BIN == b]
        p = [mark_probability(q, KMIN, KMAX, PMAX) for q in mine]
        n = int(got.loc[b, "frames"])
        want, sd = 200 * sum(p), math.sqrt(200 * sum(x * (1 - x) for x in p))
        lines.append(
            f"bin {b:2d} ({b * BIN:>7,}+): {n} frames, {int(got.loc[b, 'marked'])} marked, {want:.1f} expected"
        )
        assert n == 200 * len(mine)
        assert abs(got.loc[b, "marked"] - want) <= max(4.5 * sd, 0.5), lines[-1]
    print("\n".join(lines))


def test_a_marked_frame_keeps_a_valid_ip_checksum(marker, tmp_path):
    """The marker patches the IPv4 header checksum when it sets CE (RFC 1624): the result is
    what a full recomputation gives."""
    marker.configure(LO, ecn.PortConfig(0, 0, 1, 1.0, BIN))
    marker.tie(LO, LO)
    marker.set_queue(LO, 10 * FRAME)
    frame = bytearray(ipv4_frame(0x02))
    frame[24:26] = struct.pack("!H", _ip_checksum(bytes(frame[14:34])))
    out = marker.test_run(bytes(frame), 1, tmp_path)
    assert out[15] == 0x03 and _ip_checksum(out[14:34]) == 0  # a valid header sums to zero
    assert out[:15] == bytes(frame[:15]) and out[34:] == bytes(frame[34:])


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def test_not_ect_frames_pass_unmarked_and_uncounted(marker, tmp_path):
    marker.configure(LO, ecn.PortConfig(0, 0, 1, 1.0, BIN))  # everything beyond 1 byte would be marked
    marker.tie(LO, LO)
    marker.test_run(ipv4_frame(0x00), 100, tmp_path, program="phantom")
    out = marker.test_run(ipv4_frame(0x00), 100, tmp_path)
    assert out[15] & 3 == 0 and marker.counters().empty
    q = marker.queues().set_index("ifindex")
    assert q.loc[LO, "queue_bytes"] == 100 * FRAME  # it still occupies the queue


def test_the_phantom_queue_drains_at_the_port_rate(marker, tmp_path):
    """100 frames at once, then 50 ms idle at 1 MB/s: the next frame finds about 50 KB ahead."""
    marker.configure(LO, ecn.PortConfig(1_000_000, KMIN, KMAX, PMAX, BIN))
    marker.test_run(ipv4_frame(0x02), 100, tmp_path, program="phantom")
    t = time.monotonic()
    time.sleep(0.05)
    marker.test_run(ipv4_frame(0x02), 1, tmp_path, program="phantom")
    idle = time.monotonic() - t
    q = int(marker.queues().set_index("ifindex").loc[LO, "queue_bytes"])
    want = max(0.0, 100 * FRAME - idle * 1_000_000) + FRAME
    print(f"after {idle * 1e3:.1f} ms idle: {q} B queued, {want:.0f} expected")
    assert abs(q - want) <= 5_000  # 5 ms of the timing between the two bpftool calls
    assert marker.counters().empty  # the phantom queue never marks


@pytest.mark.parametrize("far_end", ["switch", "nic"])
def test_a_veth_port_marks_roce_frames_as_they_leave_and_their_icrc_stays_valid(marker, far_end):
    """The phantom queue on a real veth's egress, the marker on its peer, RoCEv2 frames sent on a
    packet socket as the agents send them and received on one as the agents (and OVS) receive them.
    With the queue never draining, Kmin 0 and Pmax 1, every ECT(0) frame after the first leaves
    CE-marked (the first leaves nothing behind it), and the receiver's parser (ICRC, which masks
    the TOS byte) accepts every one. Then, draining at 1 GB/s with frames 20 ms apart, none is.
    The far end known as a switch port (by ifindex) and as a GPU NIC (by its MAC)."""
    from traffic import roce

    a = f"zecn{uuid.uuid4().hex[:4]}a"
    b = a[:-1] + "b"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        for dev in (a, b):  # no IPv6: its router solicitations would queue ahead of our frames
            subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"], check=True)
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        ifindex = socket.if_nametoindex(a)
        marker.configure(ifindex, ecn.PortConfig(0, 0, 1, 1.0, BIN))
        dst_mac = "02:5a:00:00:00:02"
        subprocess.run(["ip", "link", "set", b, "address", dst_mac], check=True)
        marker.attach(a, b, peer_mac=dst_mac if far_end == "nic" else None)
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL, as OVS listens
        rx.bind((b, 0))
        rx.settimeout(2)
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        tx.bind((a, 0))
        src, dst = roce.Endpoint("02:5a:00:00:00:01", "10.251.0.1"), roce.Endpoint(dst_mac, "10.251.0.2")
        f = roce.FrameBuilder(src, dst, 50000, 0x11, tos=roce.ECT0)

        def send(n: int, gap_s: float) -> list[int]:
            marker.reset(ifindex)
            ecns = []
            for k in range(n):
                tx.send(f.frame(roce.WRITE_ONLY, k, True, b"kv" * 100, reth=(0, 0, 200)))
                while True:
                    got = rx.recv(4096)
                    try:
                        p = roce.parse(got)
                    except roce.MalformedPacket:
                        continue  # not ours (IPv6 router solicitations and the like)
                    ecns.append(p.ecn)
                    break
                time.sleep(gap_s)
            return ecns

        ecns = send(20, 0)
        assert ecns[0] == roce.ECT0 and set(ecns[1:]) == {roce.CE}, ecns
        c = marker.counters()
        mine = c[c.ifindex == ifindex]
        assert int(mine.frames.sum()) == 20 and int(mine.marked.sum()) == 19 and int(mine.unmarkable.sum()) == 0
        marker.configure(ifindex, ecn.PortConfig(1_000_000_000, 0, 1, 1.0, BIN))
        assert set(send(10, 0.02)) == {roce.ECT0}
    finally:
        subprocess.run(["ip", "link", "del", a], check=False)


def test_zlab_clean_removes_a_recorded_pin_and_only_that(tmp_path, monkeypatch):
    """A run that recorded its marker's pin directory and died: clean_run removes the pins; a
    marker no run recorded stays."""
    from testbed.lab import clean, registry

    monkeypatch.setenv("ZLAB_STATE_DIR", str(tmp_path))
    name = f"test-{uuid.uuid4().hex[:8]}"
    reg = registry.Registry(name)
    reg.bpf_pin(str(ecn.PIN_ROOT / name))
    ours, other = ecn.Marker(name).load(), ecn.Marker(f"test-{uuid.uuid4().hex[:8]}").load()
    reg.close(remove=False)
    try:
        (rec,) = [r for r in registry.load_runs() if r.run_id == name]
        assert clean.clean_run(rec, dry_run=True) == [f"bpf pins {ours.dir}"] and ours.dir.exists()
        assert clean.clean_run(rec) == [f"bpf pins {ours.dir}"]
        assert not ours.dir.exists() and other.dir.exists()
    finally:
        ours.unload()
        other.unload()


def test_the_lldp_sink_keeps_lldp_frames_from_counting_as_drops_on_clsact_ports():
    """OVS listens on a switch port with a packet socket; once the port has a clsact qdisc (the
    marker's), the kernel counts every received frame it has no protocol handler for (LLDP:
    discovery and link probes) as dropped although OVS got it. With ecn.LldpSink open it does not."""
    a = f"zlds{uuid.uuid4().hex[:4]}a"
    b = a[:-1] + "b"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        for dev in (a, b):
            subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"], check=True)
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        ovs = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL on b, as OVS
        ovs.bind((b, 0))
        subprocess.run(["tc", "qdisc", "add", "dev", b, "clsact"], check=True)
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        tx.bind((a, 0))
        lldp = bytes.fromhex("0180c200000e") + bytes.fromhex("025a00000001") + b"\x88\xcc" + bytes(46)

        def counted(n: int) -> int:
            path = f"/sys/class/net/{b}/statistics/rx_dropped"
            before = int(open(path).read())
            for _ in range(n):
                tx.send(lldp)
            time.sleep(0.2)
            return int(open(path).read()) - before

        assert counted(5) == 5  # the kernel's artefact
        sink = ecn.LldpSink()
        try:
            assert counted(5) == 0
        finally:
            sink.close()
        ovs.setblocking(False)
        got = 0
        try:
            while True:
                got += ovs.recv(2048)[12:14] == b"\x88\xcc"
        except BlockingIOError:
            pass
        assert got == 10  # OVS's socket received every one either way
    finally:
        subprocess.run(["ip", "link", "del", a], check=False)


def test_the_config_writer_changes_a_port_as_bpftool_would(marker, tmp_path):
    """What ConfigWriter writes (one bpf(2) call) is what the program then uses: a port set to drain
    at 0 B/s keeps every byte, the same port reset to 1 MB/s drains again."""
    w = ecn.ConfigWriter(str(marker.maps / "cfg"))
    try:
        w.set(LO, ecn.PortConfig(0, KMIN, KMAX, PMAX, BIN))
        marker.test_run(ipv4_frame(0x02), 10, tmp_path, program="phantom")
        time.sleep(0.05)
        marker.test_run(ipv4_frame(0x02), 1, tmp_path, program="phantom")
        assert int(marker.queues().set_index("ifindex").loc[LO, "queue_bytes"]) == 11 * FRAME
        w.set(LO, ecn.PortConfig(1_000_000, KMIN, KMAX, PMAX, BIN))
        time.sleep(0.05)
        marker.test_run(ipv4_frame(0x02), 1, tmp_path, program="phantom")
        assert int(marker.queues().set_index("ifindex").loc[LO, "queue_bytes"]) <= 2 * FRAME  # 11 KB drained in 11 ms
    finally:
        w.close()
