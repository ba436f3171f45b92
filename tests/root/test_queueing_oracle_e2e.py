"""Queueing oracles on the emulation's side: one port shaped as the emulation shapes every port
(htb at the line rate, a one-frame bucket, a pfifo leaf; testbed/emulation/config.tc_commands),
between two network namespaces, driven by the real agent (traffic/agent.py). No OVS: the question
is the shaped port and the transport's pacer, against closed forms (testbed/referee/oracles.py).

- D/D/1: messages released periodically below capacity never wait: each message's last frame
  arrives when the pacer releases it, (wire bytes - last frame) / rate after its release.
- M/D/1: Poisson releases (a seeded draw) at rho 0.5: the mean wait, over repeats, against
  Lindley's recursion on the very same releases (exact for the sample) and Pollaczek-Khinchine.
A message's wait is its last frame's arrival, less its release, less that idle-path time.
Tolerances are stated per check and are wide enough for a shared 2-core machine's timer jitter
(the agent's loop tick is 1 ms; a frame is 4.17 ms here)."""

import os
import subprocess
import time

import numpy as np
import pytest

from testbed.emulation.config import tc_commands
from testbed.referee import oracles
from traffic.agent import Agent, PortSpec

RATE_BPS = 8_000_000  # 1 byte per microsecond
FRAME_US = (oracles.PAYLOAD + oracles.OVERHEAD + oracles.RETH) * 8e6 / RATE_BPS  # 4,170 µs: the bucket


def sh(cmd: str) -> None:
    subprocess.run(cmd, shell=True, check=True, capture_output=True)


@pytest.fixture(scope="module")
def port():
    """Two namespaces joined by a veth pair, both ends shaped as the emulation shapes a port."""
    tag = f"zq{os.getpid() % 10000}"
    a_ns, b_ns = f"{tag}a", f"{tag}b"
    sh(
        f"ip netns add {a_ns}; ip netns add {b_ns}; ip link add {tag}a0 type veth peer name {tag}b0; "
        f"ip link set {tag}a0 netns {a_ns}; ip link set {tag}b0 netns {b_ns}"
    )
    holders = []
    try:
        for ns, dev in ((a_ns, f"{tag}a0"), (b_ns, f"{tag}b0")):
            sh(f"ip netns exec {ns} ip link set {dev} mtu 9000 up")
            sh(
                f"ip netns exec {ns} nft add table inet zlab && ip netns exec {ns} nft add chain inet zlab input "
                f"'{{ type filter hook input priority 0; }}' && ip netns exec {ns} nft add rule inet zlab input "
                f"udp dport 4791 drop"
            )
            for c in tc_commands(dev, RATE_BPS, 9000, 1000, oracles.PAYLOAD + oracles.OVERHEAD + oracles.RETH):
                sh(f"ip netns exec {ns} tc {c}")
            holders.append(subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "600"]))
        time.sleep(0.3)
        yield tag, holders
    finally:
        for h in holders:
            h.kill()
        subprocess.run(f"ip netns del {a_ns}; ip netns del {b_ns}", shell=True, capture_output=True)


def replay(port, releases_us: np.ndarray, size_bytes: int) -> np.ndarray:
    """Post one message of size_bytes at each release (µs from now + 0.3 s); return each one's
    wait in µs: last frame in, less the release, less the idle-path time."""
    tag, holders = port
    agent = Agent()
    try:
        agent.add_port(PortSpec(f"{tag}a0", "A", "02:00:00:00:00:01", "10.99.0.1", RATE_BPS, holders[0].pid))
        agent.add_port(PortSpec(f"{tag}b0", "B", "02:00:00:00:00:02", "10.99.0.2", RATE_BPS, holders[1].pid))
        conn = agent.connect(f"{tag}a0", f"{tag}b0", 50000)
        t0 = time.monotonic_ns() + 300_000_000
        for r in releases_us:
            agent.post(conn, size_bytes, at_ns=t0 + int(r * 1e3))
        agent.run(deadline_ns=t0 + int(releases_us[-1] * 1e3) + 30_000_000_000)
        recs = sorted(agent.done, key=lambda r: r["t_due_ns"])
    finally:
        agent.close()
    assert len(recs) == len(releases_us) and all(r["integrity_ok"] for r in recs)
    n = -(-size_bytes // oracles.PAYLOAD)
    last_frame = size_bytes - (n - 1) * oracles.PAYLOAD + oracles.OVERHEAD + (oracles.RETH if n == 1 else 0)
    idle_us = (oracles.wire_bytes(size_bytes) - last_frame) * 8e6 / RATE_BPS
    return np.array([(r["t_last_rx_ns"] - r["t_due_ns"]) / 1e3 - idle_us for r in recs])


def test_dd1_through_one_shaped_port_never_waits(port):
    """32 messages of 4 frames every 1.25 service times, three repeats: the mean wait within half a
    frame of 0 in every repeat, and 95 % of messages within one frame."""
    size = 4 * oracles.PAYLOAD
    service_us = oracles.wire_bytes(size) * 8e6 / RATE_BPS
    means = []
    for _ in range(3):
        w = replay(port, np.arange(32) * service_us / 0.8, size)
        means.append(float(w.mean()))
        assert abs(w.mean()) <= 0.5 * FRAME_US, (w.mean(), FRAME_US)
        assert np.quantile(np.abs(w), 0.95) <= FRAME_US, np.quantile(np.abs(w), 0.95)
    print(f"D/D/1 through a shaped port: mean wait per repeat {[round(m) for m in means]} µs (frame {FRAME_US:.0f} µs)")


def test_md1_through_one_shaped_port(port):
    """Poisson releases of 2-frame messages at rho 0.5, 600 per repeat, two repeats (seeds 1, 2).
    The idle-path time (the pacer's 1 ms of credit and htb's second frame let a message finish a
    little early) is calibrated inside each repeat, on the messages that Lindley's recursion says
    found the port idle (about half): the same releases, at the same moment, under the same machine
    load. A separate D/D/1 calibration run before the repeats drifted with the CI machine's load
    (-345 µs under CI, -715 to -795 µs idle) and failed a CI run at 6.0 %. Less the calibration,
    the mean wait of the repeats is within 5 % of Lindley's recursion on the same releases, and
    within 25 % of Pollaczek-Khinchine (a 600-message sample: Lindley's own spread)."""
    size = 2 * oracles.PAYLOAD
    service_us = oracles.wire_bytes(size) * 8e6 / RATE_BPS
    rho = 0.5
    got, lindley, offsets = [], [], []
    for seed in (1, 2):
        rel = np.cumsum(np.random.default_rng(seed).exponential(service_us / rho, 600))
        rel -= rel[0]
        expected = oracles.lindley_us(rel, service_us)
        raw = replay(port, rel, size)
        idle = expected == 0
        assert idle.sum() >= 100, idle.sum()  # enough idle arrivals to calibrate on
        offsets.append(float(raw[idle].mean()))
        got.append(float((raw - offsets[-1]).mean()))
        lindley.append(float(expected.mean()))
    pk = rho * service_us / (2 * (1 - rho))
    print(
        f"M/D/1 through a shaped port (idle path {[round(o) for o in offsets]} µs off the formula): mean wait "
        f"{np.mean(got):.0f} µs, Lindley {np.mean(lindley):.0f} µs, Pollaczek-Khinchine {pk:.0f} µs "
        f"(per repeat {[round(g) for g in got]} vs {[round(x) for x in lindley]})"
    )
    assert abs(np.mean(got) / np.mean(lindley) - 1) <= 0.05
    assert abs(np.mean(got) / pk - 1) <= 0.25
