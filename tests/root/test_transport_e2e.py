"""The RDMA-like transport on a real emulated ZCube(4,2): tshark decodes it as RoCE, it runs
at line rate (and close to iperf3), splits over both ports, and survives loss intact."""

import os
import subprocess
import time

import pytest
from scapy.contrib.roce import BTH
from scapy.utils import rdpcap

from testbed.emulation import capture, faults, probes
from testbed.emulation.agents import send_message
from testbed.emulation.calibrate import iperf3_udp
from testbed.emulation.config import EmulationConfig
from testbed.emulation.up import LiveFabric
from testbed.measure.collector import machine_cpu

PORT_BPS = 20e6  # 200 Gb/s x rate_scale 1e-4


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    cfg = EmulationConfig(mtu_bytes=9000)
    with LiveFabric(
        "zcube:n=4,gpus_per_server=4", cfg, results_dir=str(tmp_path_factory.mktemp("t")), log=lambda *_: None
    ) as f:
        yield probes.LiveRun(f.dir)


def goodput(rec):
    return rec["size_bytes"] * 8 / ((rec["t_complete_ns"] - rec["t_first_tx_ns"]) / 1e9)


MAX_STEAL = 0.2  # the fidelity guard's limit (measurement.max_steal_fraction)
ATTEMPTS = 5


def send_unstolen(live, *args, **kw):
    """send_message, taken again (up to ATTEMPTS times, 10 s apart) only if the hypervisor stole
    more than the fidelity guard allows while it ran — the rule the experiment runner applies to
    repeats. Returns (records, counters, steal): steal is the fraction of the cores the hypervisor
    took during the attempt returned, so a caller can tell a line-rate miss that is the
    transport's from one that is the host's (CI hosts have stolen a third of the cores for minutes)."""
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(10)
        s0, t0 = machine_cpu()[1], time.monotonic()
        recs, counters = send_message(live, *args, **kw)
        steal = (machine_cpu()[1] - s0) / max(time.monotonic() - t0, 1e-3) / os.cpu_count()
        if steal <= MAX_STEAL:
            break
        print(f"attempt {attempt + 1}: hypervisor steal {100 * steal:.0f} % of the cores; taken again")
    return recs, counters, steal


def floor_bps(line_bps, fraction, steal):
    """The goodput the transport must reach: `fraction` of line rate, or — when every attempt was
    stolen beyond the guard's limit, a measurement the runner would void — of the share of time the
    hypervisor left the VM. A stalled sender cannot bank the time it lost (its pacer keeps less
    than one frame of credit, so it never bursts into the link), hence goodput ~ rate x (1 - steal)."""
    if steal <= MAX_STEAL:
        return fraction * line_bps
    print(f"every attempt stolen ({100 * steal:.0f} % in the last): bound scaled to the unstolen share")
    return fraction * line_bps * (1 - steal)


def test_tshark_decodes_a_fabric_link_as_roce(live, tmp_path):
    pcap = str(tmp_path / "za0-p6.pcap")
    cap = capture.start(live, "za0-p6", pcap, duration_s=6)  # A0 -> B1 cable: g0 cons -> g5 rail
    time.sleep(1.0)
    recs, _ = send_message(live, "g0-p0", "g5", 100_000, sport=50123)
    cap.communicate(timeout=30)
    out = subprocess.run(
        [
            "tshark",
            "-r",
            pcap,
            "-Y",
            "infiniband",
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "infiniband.bth.a",
            "-e",
            "infiniband.reth.dmalen",
            "-e",
            "infiniband.aeth.syndrome",
            "-e",
            "udp.srcport",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split("\t") for line in out.splitlines() if line.strip()]
    data = [r for r in rows if r[0] in ("6", "7", "8")]
    acks = [r for r in rows if r[0] == "17"]
    assert [int(r[1]) for r in data] == list(range(25))  # 100,000 B / 4096 = 25 packets, PSN 0..24
    assert data[0][0] == "6" and data[0][3] == "100000" and data[-1][0] == "8" and data[-1][2] == "1"
    assert all(r[0] == "7" for r in data[1:-1])
    assert acks and all(r[4] == "31" for r in acks) and acks[-1][1] == "24"
    assert {r[5] for r in data} == {"50123"}
    # and every ICRC verifies with scapy's independent implementation
    frames = [p for p in rdpcap(pcap) if p.haslayer(BTH)]
    assert len(frames) == len(rows)
    for p in frames:
        want = p[BTH].icrc
        p[BTH].icrc = None
        assert int.from_bytes(bytes(p)[-4:], "big") == want
    assert recs[0]["integrity_ok"]


def test_large_message_reaches_line_rate_and_matches_iperf3(live):
    recs, counters, steal = send_unstolen(live, "g0-p0", "g5", 4_000_000)
    assert recs[0]["integrity_ok"]
    gp = goodput(recs[0])
    assert gp >= floor_bps(PORT_BPS, 0.95, steal), (gp, steal)
    if steal <= MAX_STEAL:  # iperf3 is a second opinion on an unstolen machine, not on a stalled one
        ip = iperf3_udp(live, "g0-p0", "g5-p1", PORT_BPS, duration_s=3)
        assert abs(gp - ip["goodput_bps"]) <= 0.10 * ip["goodput_bps"], (gp, ip)
    assert counters["qps"][0]["requester"]["retransmits"] == 0  # no loss, no retransmits


def test_split_over_both_ports_reaches_90_percent_of_their_sum(live):
    recs, counters, steal = send_unstolen(live, "g1", "g6", 8_000_000)
    assert {(r["src"], r["dst"]) for r in recs} == {("g1-p0", "g6-p1"), ("g1-p1", "g6-p0")}
    t0 = min(r["t_first_tx_ns"] for r in recs)
    t1 = max(r["t_complete_ns"] for r in recs)
    assert 8_000_000 * 8 / ((t1 - t0) / 1e9) >= floor_bps(2 * PORT_BPS, 0.9, steal), steal
    assert all(r["integrity_ok"] for r in recs)
    assert all(q["requester"]["retransmits"] == 0 for q in counters["qps"])


def test_loss_is_repaired_by_retransmission(live):
    with faults.ingress_loss(live, "g9-p1", percent=3.0):
        recs, counters = send_message(live, "g2-p0", "g9", 1_000_000, rc_opts={"rto_ns": 100_000_000})
    q = counters["qps"][0]
    assert recs[0]["integrity_ok"] and recs[0]["size_bytes"] == 1_000_000
    assert q["requester"]["retransmits"] > 0
    assert q["requester"]["naks"] + q["requester"]["timeouts"] > 0
    assert q["responder"]["payload_bytes"] == 1_000_000  # delivered exactly once, in order
