"""The lossless mode's gate (testbed/emulation/tbf_netlink.py) on a real veth: what netlink set is
what `tc` reads back, a shut gate holds every queued frame without dropping one, and opening it
releases them at the htb class's rate once a frame kicks the queue (no token debt, unlike an htb
rate cut). No fabric."""

import json
import socket
import subprocess
import time
import uuid

import pytest

from testbed.emulation import tbf_netlink

RATE_BPS = 10_000_000
FRAME = 4218
LIMIT = 2000 * FRAME
PAUSED_BYTES_PER_S = 1_000  # a frame costs 4 s at this rate: nothing passes in a short pause


def _tc(*args) -> list:
    return json.loads(subprocess.run(["tc", "-s", "-j", *args], check=True, capture_output=True, text=True).stdout)


@pytest.fixture
def veth():
    a = f"zpfc{uuid.uuid4().hex[:4]}a"
    b = a[:-1] + "b"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        for dev in (a, b):
            subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"], check=True)
            subprocess.run(["ip", "link", "set", dev, "mtu", str(FRAME - 14), "up"], check=True)
        batch = (
            f"qdisc add dev {a} root handle 1: htb default 1\n"
            f"class add dev {a} parent 1: classid 1:1 htb rate {RATE_BPS}bit ceil {RATE_BPS}bit "
            f"burst {FRAME} cburst {FRAME} quantum {FRAME}\n"
            f"qdisc add dev {a} parent 1:1 handle 10: pfifo limit 1000\n"
        )
        subprocess.run(["tc", "-batch", "-"], input=batch, text=True, check=True)
        yield a
    finally:
        subprocess.run(["ip", "link", "del", a], check=False)


def _leaf(dev: str) -> dict:
    return next(q for q in _tc("qdisc", "show", "dev", dev) if q["handle"] == "10:")


def test_install_and_set_are_what_tc_reads_back(veth):
    gate = tbf_netlink.TbfGate(tbf_netlink.open_socket())
    ifindex = socket.if_nametoindex(veth)
    rtt_ns = gate.install(ifindex, 2 * RATE_BPS // 8, FRAME, LIMIT)
    q = _leaf(veth)
    assert q["kind"] == "tbf" and q["parent"] == "1:1"
    assert q["options"]["rate"] == 2 * RATE_BPS // 8 and abs(q["options"]["burst"] - FRAME) <= 1  # tc shows no limit
    rtt2 = gate.set(ifindex, PAUSED_BYTES_PER_S, FRAME, LIMIT)
    assert _leaf(veth)["options"]["rate"] == PAUSED_BYTES_PER_S
    print(f"install {rtt_ns / 1e3:.0f} us, change {rtt2 / 1e3:.0f} us (netlink round trips)")
    assert rtt2 < 5_000_000
    with pytest.raises(OSError):
        gate.set(ifindex + 10_000, PAUSED_BYTES_PER_S, FRAME, LIMIT)  # no such device: the kernel's error, raised
    # the kick frame (an ARP probe) has a protocol handler at the far end: nothing counts it as dropped there
    dropped = f"/sys/class/net/{veth[:-1]}b/statistics/rx_dropped"
    before = int(open(dropped).read())
    gate.set(ifindex, 2 * RATE_BPS // 8, FRAME, LIMIT)
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((veth, 0))
    for _ in range(5):
        tx.send(tbf_netlink.kick_frame("02:00:00:00:00:01"))
    time.sleep(0.2)
    assert int(open(dropped).read()) == before


def test_a_shut_gate_holds_every_frame_and_opening_releases_them_at_line_rate(veth):
    gate = tbf_netlink.TbfGate(tbf_netlink.open_socket())
    ifindex = socket.if_nametoindex(veth)
    gate.install(ifindex, 2 * RATE_BPS // 8, FRAME, LIMIT)
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((veth, 0))
    frame = b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb5" + bytes(FRAME - 14)
    for _ in range(200):  # ~0.7 s of frames at 10 Mb/s
        tx.send(frame)
    time.sleep(0.1)
    gate.set(ifindex, PAUSED_BYTES_PER_S, FRAME, LIMIT)
    shut = _leaf(veth)
    time.sleep(0.3)
    held = _leaf(veth)
    gate.set(ifindex, 2 * RATE_BPS // 8, FRAME, LIMIT)
    time.sleep(0.1)
    unkicked = _leaf(veth)  # open, but nothing re-ran the queue yet
    tx.send(tbf_netlink.kick_frame("02:00:00:00:00:01"))
    t_open = time.monotonic()
    time.sleep(0.1)
    opened = _leaf(veth)
    dt = time.monotonic() - t_open
    passed_paused = held["bytes"] - shut["bytes"]
    rate_after = (opened["bytes"] - unkicked["bytes"]) * 8 / dt
    print(
        f"while shut 0.3 s: {passed_paused} B passed, backlog {held['backlog']} B; "
        f"after opening: {rate_after / 1e6:.2f} Mb/s over {dt * 1e3:.0f} ms"
    )
    assert passed_paused <= FRAME  # at most the one frame the refilled bucket lets through
    assert held["drops"] == 0 and held["backlog"] >= 100 * FRAME
    assert unkicked["bytes"] - held["bytes"] <= FRAME  # why the gate kicks the queue after opening
    assert 0.8 * RATE_BPS <= rate_after <= 1.25 * RATE_BPS  # htb's rate, at once: no debt to repay
