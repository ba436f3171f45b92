"""Queueing oracles on the emulation's side: one port shaped as the emulation shapes every port
(htb at the line rate, a one-frame bucket, a pfifo leaf; testbed/emulation/config.tc_commands),
between two network namespaces, driven by the real agent (traffic/agent.py). No OVS: the question
is the shaped port and the transport's pacer, against closed forms (testbed/referee/oracles.py).

- D/D/1: messages released periodically below capacity never wait: each message's last frame
  arrives when the pacer releases it, (wire bytes - last frame) / rate after its release.
- M/D/1: Poisson releases (a seeded draw) at rho 0.5: each message's wait against Lindley's
  recursion on the very same releases (exact for the sample), and the share of messages that
  waited against the closed form P(wait > 0) = rho.
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


def replay(port, releases_us: np.ndarray, size_bytes: int) -> tuple[np.ndarray, list[tuple[int, int]], float]:
    """Post one message of size_bytes at each release (µs from now + 0.3 s); return each one's
    wait in µs (last frame in, less the release, less the idle-path time) and the agent's loop
    stalls ((gap, cpu) ns: turns of its loop that came late, traffic/agent.LOOP_GAP_NS) and the
    wall time of its run in µs (the span those stalls are a share of)."""
    tag, holders = port
    agent = Agent()
    try:
        agent.add_port(PortSpec(f"{tag}a0", "A", "02:00:00:00:00:01", "10.99.0.1", RATE_BPS, holders[0].pid))
        agent.add_port(PortSpec(f"{tag}b0", "B", "02:00:00:00:00:02", "10.99.0.2", RATE_BPS, holders[1].pid))
        conn = agent.connect(f"{tag}a0", f"{tag}b0", 50000)
        start_ns = time.monotonic_ns()
        t0 = start_ns + 300_000_000
        for r in releases_us:
            agent.post(conn, size_bytes, at_ns=t0 + int(r * 1e3))
        agent.run(deadline_ns=t0 + int(releases_us[-1] * 1e3) + 30_000_000_000)
        recs = sorted(agent.done, key=lambda r: r["t_due_ns"])
        gaps, span_us = list(agent.loop_gaps), (time.monotonic_ns() - start_ns) / 1e3
    finally:
        agent.close()
    assert len(recs) == len(releases_us) and all(r["integrity_ok"] for r in recs)
    n = -(-size_bytes // oracles.PAYLOAD)
    last_frame = size_bytes - (n - 1) * oracles.PAYLOAD + oracles.OVERHEAD + (oracles.RETH if n == 1 else 0)
    idle_us = (oracles.wire_bytes(size_bytes) - last_frame) * 8e6 / RATE_BPS
    return np.array([(r["t_last_rx_ns"] - r["t_due_ns"]) / 1e3 - idle_us for r in recs]), gaps, span_us


HOST_LOST_MAX = 0.10  # a repeat whose agent loop lost more than this share of its span is void


def host_lost_share(gaps: list[tuple[int, int]], span_us: float) -> float:
    """The share of a repeat's span the agent's loop spent late (its recorded stalls). This VM's
    hypervisor steals time in bursts: /proc/stat showed 0-630 ms of steal over 10 s repeats, and
    the repeats with the most steal had the most loop stalls and the largest errors against the
    oracle. A repeat past HOST_LOST_MAX measured the host, not the port: it is void, reported,
    and replaced by a fresh draw, up to a fixed number of attempts; too many voids fail the test."""
    return sum(g for g, _ in gaps) / 1e3 / span_us


def valid_repeats(run, needed: int, attempts: int, label: str, max_stall_us: float | None = None) -> list:
    """run(attempt) -> (result, gaps, span_us) for attempt = 0, 1, ...; the first `needed` results
    whose repeat the host did not void: its loop late more than HOST_LOST_MAX of the span or, if
    max_stall_us is given, any single stall longer than that. Fails (never skips) if `attempts`
    are used up first."""
    kept, void = [], []
    for attempt in range(attempts):
        result, gaps, span_us = run(attempt)
        lost = host_lost_share(gaps, span_us)
        longest_us = max((g for g, _ in gaps), default=0) / 1e3
        if lost > HOST_LOST_MAX:
            void.append(f"attempt {attempt}: loop late {lost:.1%} of the span ({len(gaps)} stalls)")
            continue
        if max_stall_us is not None and longest_us > max_stall_us:
            void.append(
                f"attempt {attempt}: one loop stall of {longest_us / 1e3:.1f} ms (limit {max_stall_us / 1e3:.1f} ms)"
            )
            continue
        kept.append(result)
        if len(kept) == needed:
            break
    if void:
        print(f"{label}: void repeats (host stalls): {'; '.join(void)}")
    assert len(kept) == needed, f"{label}: only {len(kept)} of {needed} repeats the host held; void: {void}"
    return kept


def test_dd1_through_one_shaped_port_never_waits(port):
    """32 messages of 4 frames every 1.25 service times, three repeats: the mean wait within half a
    frame of 0 in every repeat, and 95 % of messages within one frame (repeats the host voided are
    replaced: valid_repeats).

    Why a single stall voids here, not only a share of the span: a message has a quarter of a
    service time (one frame) of slack, so a stall of s delays the next messages by s, s - 1 frame,
    ... A stall over two frames puts two or more of the 32 messages past the one-frame tolerance,
    which the 95 % check cannot absorb. A CI run measured exactly that: one repeat's waits jumped
    to 33 ms and fell by one frame per message over the next 8 (3 % of the span, under
    HOST_LOST_MAX). Stalls of 4-6 ms are common here and harmless (measured: 3 of 6 repeats on an
    idle machine, all within the bands). A stall the agent's loop did not see (the port's own) is
    not excused and still fails."""
    size = 4 * oracles.PAYLOAD
    service_us = oracles.wire_bytes(size) * 8e6 / RATE_BPS
    rel = np.arange(32) * service_us / 0.8

    def run(_attempt):
        return replay(port, rel, size)

    means = []
    for w in valid_repeats(run, 3, 15, "D/D/1", max_stall_us=2 * FRAME_US):
        means.append(float(w.mean()))
        assert abs(w.mean()) <= 0.5 * FRAME_US, (w.mean(), FRAME_US)
        assert np.quantile(np.abs(w), 0.95) <= FRAME_US, np.quantile(np.abs(w), 0.95)
    print(f"D/D/1 through a shaped port: mean wait per repeat {[round(m) for m in means]} µs (frame {FRAME_US:.0f} µs)")


def test_md1_through_one_shaped_port(port):
    """Poisson releases of 2-frame messages at rho 0.5, 600 per repeat, two repeats (seeds 1, 2),
    checked message by message against Lindley's recursion on the very same releases (exact for
    the sample), and against M/D/1's closed form P(wait > 0) = rho.

    The idle-path time (the pacer's 1 ms of credit and htb's second frame let a message finish a
    little early) is calibrated inside each repeat, as the median over the messages that Lindley
    says found the port idle. Why per message and medians, not the mean wait: the mean is carried
    by rare host stalls. A CI run measured a mean 8.7 % above Lindley, and a rerun found one stall
    of about 20 ms (the 2-core machine descheduling the agent) that delayed the rest of its busy
    period; outside it every message was within 0.2 ms. The stall is the host's, not the port's,
    and a mean cannot tell the two apart. Measured on this machine, idle and with both cores
    busy: median deviation 6 µs or less, 97-100 % of messages within one frame (4.17 ms), the
    fraction that waited 0.45-0.55 where the sample's Lindley fraction was 0.48-0.56. Repeats the
    host voided (valid_repeats) are replaced by the next seed."""
    size = 2 * oracles.PAYLOAD
    service_us = oracles.wire_bytes(size) * 8e6 / RATE_BPS
    rho = 0.5
    waited, lindley_waited, lines = [], [], []

    def run(attempt):
        seed = attempt + 1
        rel = np.cumsum(np.random.default_rng(seed).exponential(service_us / rho, 600))
        rel -= rel[0]
        raw, gaps, span_us = replay(port, rel, size)
        return (seed, rel, raw), gaps, span_us

    for seed, rel, raw in valid_repeats(run, 2, 6, "M/D/1"):
        expected = oracles.lindley_us(rel, service_us)
        idle = expected == 0
        assert idle.sum() >= 100, idle.sum()  # enough idle arrivals to calibrate on
        offset = float(np.median(raw[idle]))
        wait = raw - offset
        dev = wait - expected
        within = float(np.mean(np.abs(dev) <= FRAME_US))
        lines.append(
            f"seed {seed}: idle path {offset:.0f} µs off the formula, median deviation {np.median(dev):+.0f} µs, "
            f"{within:.1%} within a frame, mean wait {wait.mean():.0f} µs vs Lindley {expected.mean():.0f} µs"
        )
        assert abs(np.median(dev)) <= FRAME_US / 20, lines[-1]
        assert within >= 0.90, lines[-1]
        waited.append(wait > FRAME_US / 4)
        lindley_waited.append(expected > 0)
    share, lindley_share = float(np.mean(waited)), float(np.mean(lindley_waited))
    pk = rho * service_us / (2 * (1 - rho))
    print(
        f"M/D/1 through a shaped port: {'; '.join(lines)}; share that waited {share:.3f} "
        f"(Lindley {lindley_share:.3f}, closed form {rho}); Pollaczek-Khinchine mean wait {pk:.0f} µs"
    )
    assert abs(share - rho) <= 0.07, share
