"""Emulated fabrics on real Mininet + OVS with the zlab controller: reachability, paths
proven from switch counters, ECMP spreading as the model predicts, a clean cabling check."""

import collections
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from testbed.emulation import probes
from testbed.emulation.config import EmulationConfig
from testbed.emulation.up import LiveFabric
from testbed.fabric.paths import route

ZCUBE = "zcube:n=4,gpus_per_server=4"
ROFT = "roft:gpus=16,gpus_per_server=4,segments=2"


@pytest.fixture(scope="module")
def zcube(tmp_path_factory):
    with LiveFabric(ZCUBE, EmulationConfig(), results_dir=str(tmp_path_factory.mktemp("z")), log=lambda *_: None) as f:
        yield f


@pytest.fixture(scope="module")
def roft(tmp_path_factory):
    with LiveFabric(ROFT, EmulationConfig(), results_dir=str(tmp_path_factory.mktemp("r")), log=lambda *_: None) as f:
        yield f


def test_zcube_every_port_pair_reachable(zcube):
    assert zcube.reach["pairs"] == 16 * 15 * 2 and zcube.reach["failed"] == []


def test_zcube_probes_take_the_unique_two_switch_path(zcube):
    live = probes.LiveRun(zcube.dir)
    for src, dst in (("g0-p0", "g5"), ("g0-p1", "g5"), ("g7-p0", "g12"), ("g15-p1", "g2"), ("g1-p0", "g2")):
        proof = probes.prove_path(live, src, dst, count=10)
        assert proof.ok, proof
        assert len(proof.observed) == 2  # A then B (or B then A): exactly two switches


def test_zcube_cabling_clean(zcube):
    """Every cable, NIC cables included: 32 NIC + 16 fabric on ZCube(4,2)."""
    rep = zcube.wiring_report()
    assert rep["ok"] and rep["discovered_links"] == 48 == rep["blueprint_links"], rep
    assert (rep["nic_cables"], rep["fabric_cables"]) == (32, 16)


def test_roft_every_pair_reachable(roft):
    assert roft.reach["pairs"] == 16 * 15 and roft.reach["failed"] == []


def test_roft_rail_local_and_cross_segment_paths(roft):
    live = probes.LiveRun(roft.dir)
    assert probes.prove_path(live, "g0-p0", "g4", count=10).observed == [("l0r0", 2)]
    proof = probes.prove_path(live, "g1-p0", "g14", sport=50001, count=10)
    assert proof.ok and len(proof.observed) == 3


def test_roft_ecmp_spreads_udp_flows_over_every_spine_as_the_model_says(roft):
    """32 flows g0 -> g8 (leaf l0r0 -> l1r0) with random UDP source ports (as a RoCE NIC draws
    them), 10 packets each."""
    live = probes.LiveRun(roft.dir)
    spines = [sw.name for sw in roft.fabric.switches if sw.group == "spine"]
    sports = sorted(set(random.Random(7).sample(range(49152, 65536), 32)))
    predicted = collections.Counter(route(roft.fabric, "g0-p0", "g8", sport=s).switches[1] for s in sports)
    before = probes.settled_flows(spines)
    for s in sports:
        probes.send_udp(live, "g0-p0", "10.0.0.9", s, 10)
    after = probes.settled_flows(spines)
    counted = {}
    for sw in spines:
        counted[sw] = sum(n - before[sw].get(k, 0) for k, n in after[sw].items() if "nw_dst=10.0.0.9" in k[1])
    assert set(predicted) == set(spines)  # the model spreads over all spines...
    assert counted == {sw: 10 * predicted[sw] for sw in spines}  # ...and the switches did exactly that


def _ovs(*args: str) -> str:
    return subprocess.run(["ovs-vsctl", *args], check=True, capture_output=True, text=True).stdout.strip()


def _ip_packets(sw: str) -> tuple[int, int]:
    """(entries, packets) of a switch's IPv4 entries, from the switch itself."""
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "dump-aggregate", sw, "ip"], check=True, capture_output=True, text=True
    ).stdout
    return int(out.split("flow_count=")[1].split()[0]), int(out.split("packet_count=")[1].split()[0])


def _lapse_channel(live, sw: str, reconnects: Path) -> dict:
    """Freeze the controller until OVS drops sw's channel (its probe set to 5 s, OVS's least),
    thaw it, and return the app's record of the reconnection."""
    seen = len(reconnects.read_text().splitlines())
    os.kill(live.controller.pid, signal.SIGSTOP)
    try:
        time.sleep(11.5)  # idle 5 s, an echo request, no reply within 5 s: dropped
    finally:
        os.kill(live.controller.pid, signal.SIGCONT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        recs = [json.loads(x) for x in reconnects.read_text().splitlines()[seen:]]
        mine = [r for r in recs if r["switch"] == sw]
        if mine:
            return mine[-1]
        time.sleep(0.2)
    raise AssertionError(f"{sw} did not reconnect within 20 s of the controller's thaw")


def test_a_lapsed_controller_channel_keeps_the_table_and_a_changed_one_is_resent(zcube):
    """Issue 27: at 1,024 GPUs OVS dropped busy channels after its 5 s inactivity probe, and each
    reconnection re-sent (deleted, then re-added) the switch's table, cutting probes and
    restarting its counters. Now the channel gets a 30 s probe, and a reconnection re-sends the
    table only if the switch does not hold what it should."""
    sw = "za0"
    rec_id = _ovs("get", "bridge", sw, "controller").strip("[]")
    assert _ovs("get", "controller", rec_id, "inactivity_probe") == "30000"
    ctl = Path(zcube.dir) / "controller"
    installed, reconnects = ctl / "installed.jsonl", ctl / "reconnects.jsonl"
    _ovs("set", "controller", rec_id, "inactivity_probe=5000")
    try:
        entries, packets = _ip_packets(sw)
        assert packets > 0  # the reachability proof went through it
        sent_before = len(installed.read_text().splitlines())
        r = _lapse_channel(zcube, sw, reconnects)
        assert r["held"] == r["expected"], r
        assert len(installed.read_text().splitlines()) == sent_before  # nothing re-sent
        after = _ip_packets(sw)
        assert after[0] == entries and after[1] >= packets  # the same entries, their counters kept

        # one entry gone behind the app's back: the next reconnection re-sends the table
        line = next(
            x
            for x in subprocess.run(
                ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", sw, "ip"], check=True, capture_output=True, text=True
            ).stdout.splitlines()
            if "nw_dst=" in x
        )
        dst = line.split("nw_dst=")[1].split()[0].rstrip(",")
        subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", sw, f"ip,nw_dst={dst}"], check=True)
        removed = entries - _ip_packets(sw)[0]
        assert removed >= 1
        r = _lapse_channel(zcube, sw, reconnects)
        assert r["held"] == r["expected"] - removed, r
        deadline = time.monotonic() + 20
        while _ip_packets(sw)[0] != entries and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ip_packets(sw)[0] == entries
        resent = [json.loads(x) for x in installed.read_text().splitlines()[sent_before:]]
        assert [x["switch"] for x in resent] == [sw]
    finally:
        _ovs("set", "controller", rec_id, "inactivity_probe=30000")
