"""Rail-optimized fat-tree construction and routing (rail-local, ECMP over spines, 3 tiers)."""

import collections
import random

import pytest

from testbed.fabric import build_fabric
from testbed.fabric.ecmp import switch_seed
from testbed.fabric.params import SpecError
from testbed.fabric.paths import forwarding_tables, route
from testbed.fabric.validate import validate


def test_paper_testbed_one_segment():
    """Spec §2: 4 servers x 4 GPUs, 4 rail leaves + 4 spines, 32 x 400G links."""
    fab = build_fabric("roft:gpus=16,gpus_per_server=4")
    c = fab.counts()
    assert (c["switches_leaf"], c["switches_spine"], c["cables"]) == (4, 4, 32)
    assert {l.rate_bps for l in fab.links} == {400_000_000_000}
    # rank r of every server on leaf r of the segment
    for g in range(16):
        assert fab.nodes[fab.attach_switch(g)].name == f"l0r{g % 4}"
    # rail-aligned traffic stays on its leaf
    assert route(fab, "g0-p0", "g4").switches == ("l0r0",)
    assert route(fab, "g0-p0", "g5").switches[0::2] == ("l0r0", "l0r1")


def test_two_segments_rail_traffic_crosses_spines():
    fab = build_fabric("roft:gpus=16,gpus_per_server=4,segments=2")
    c = fab.counts()
    assert (c["switches_leaf"], c["switches_spine"], c["nic_links"], c["fabric_links"]) == (8, 2, 16, 16)
    assert route(fab, "g0-p0", "g4").switches == ("l0r0",)  # same segment, same rail
    r = route(fab, "g0-p0", "g8")  # rail 0 of segment 1
    assert r.switches[0] == "l0r0" and r.switches[2] == "l1r0" and r.switches[1].startswith("sp")
    assert validate(fab).diameter_switches == 3


def test_ecmp_spreads_udp_source_ports_over_every_spine():
    fab = build_fabric("roft:gpus=32,gpus_per_server=4,segments=2,spines=4")
    sports = random.Random(1).sample(range(49152, 65536), 64)  # a RoCE NIC draws them at random
    seen = collections.Counter(route(fab, "g0-p0", "g16", sport=s).switches[1] for s in sports)
    assert set(seen) == {"sp0", "sp1", "sp2", "sp3"}
    assert min(seen.values()) >= 6  # 64 flows, 4 spines: no spine starved
    # same 5-tuple, same path (per-flow, not per-packet)
    assert route(fab, "g0-p0", "g16", sport=50000) == route(fab, "g0-p0", "g16", sport=50000)


def test_per_switch_seeds_differ():
    fab = build_fabric("roft:gpus=16,gpus_per_server=4,segments=2")
    seeds = switch_seed([sw.dpid for sw in fab.switches])
    assert len(set(seeds.tolist())) == len(fab.switches)


def test_leaf_table_is_rail_local_plus_ecmp_default():
    fab = build_fabric("roft:gpus=16,gpus_per_server=4,segments=2")
    entries = forwarding_tables(fab).entries("l1r2")
    local = [e for e in entries if e["prefix_len"] == 32]
    default = [e for e in entries if e["prefix_len"] == 8]
    assert sorted(e["dst_ip"] for e in local) == ["10.0.0.11", "10.0.0.15"]  # g10, g14
    assert default == [{"dst_ip": "10.0.0.0", "prefix_len": 8, "out_ports": [3, 4]}]


def test_three_tiers_reproduce_published_inventories():
    for gpus, radix, want in ((1024, 32, (64, 64, 32)), (16384, 128, (256, 256, 128))):
        fab = build_fabric(f"roft:gpus={gpus},radix={radix}")
        c = fab.counts()
        assert fab.params["tiers"] == 3
        assert (c["switches_leaf"], c["switches_agg"], c["switches_core"]) == want
        assert c["switches"] == {1024: 160, 16384: 640}[gpus]
    fab = build_fabric("roft:gpus=1024,radix=32")
    rep = validate(fab)
    assert rep.ok and rep.diameter_switches == 5
    assert rep.avg_path_links == pytest.approx(5.472, abs=5e-4)  # spec §1
    assert len(route(fab, "g0-p0", "g1000").switches) == 5
    assert len(route(fab, "g0-p0", "g200").switches) == 3  # same pod


def test_auto_tiers_switch_to_three_when_the_spine_is_too_small():
    assert build_fabric("roft:gpus=512,radix=32").params["tiers"] == 2  # R*R/2 fits
    assert build_fabric("roft:gpus=1024,radix=32").params["tiers"] == 3


def test_oversubscription_halves_uplinks():
    fab = build_fabric("roft:gpus=32,gpus_per_server=4,oversubscription=2")
    assert fab.params["uplinks_per_leaf"] == 4 and fab.params["servers_per_segment"] == 8
    assert validate(fab).ok


@pytest.mark.parametrize(
    "spec, message",
    [
        ("roft:gpus=18,gpus_per_server=4", "multiple of gpus_per_server"),
        ("roft:gpus=16,gpus_per_server=4,segments=3", "do not split into 3 equal segments"),
        ("roft:gpus=16,gpus_per_server=4,radix=3,tiers=2", "port budget exceeded"),
        ("roft:gpus=16,gpus_per_server=4,segments=2,spines=3", "do not split evenly over spines=3"),
        ("roft:gpus=16,gpus_per_server=4,tiers=3", "three tiers need an explicit radix"),
        ("roft:gpus_per_server=4", "gpus is required"),
        ("roft:gpus=16,tiers=4", "valid values: auto, 2, 3"),
        ("roft:gpus=16,gpus_per_server=4,oversubscription=0.5", "oversubscription must be >= 1"),
    ],
)
def test_bad_specs_fail_clearly(spec, message):
    with pytest.raises(SpecError, match=message):
        build_fabric(spec)
