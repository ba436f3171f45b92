"""Emulated fabrics on real Mininet + OVS with the zlab controller: reachability, paths
proven from switch counters, ECMP spreading as the model predicts, a clean cabling check."""

import collections
import random

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
