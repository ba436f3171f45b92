"""Masked covers of an ECMP group's destinations (testbed/fabric/addrcover.py) and the flow
entries built from them: exact on hand-worked cases and random ones; on ROFTs whose spines have
two links to each leaf the compressed entries forward every (switch, destination) exactly as the
dense tables do, for every RoCE source port (read by the referee's own table evaluator)."""

import numpy as np
import pytest

from testbed.fabric import build_fabric
from testbed.fabric.addrcover import FULL, masked_cover, matches
from testbed.fabric.ecmp import ecmp_member
from testbed.fabric.fastfailover import annotate, protection
from testbed.fabric.ids import ip_to_int
from testbed.fabric.openflow import PRIORITY_MASKED, PRIORITY_UDP_BUCKET, flow_entries, match_flow_entries
from testbed.fabric.paths import forwarding_tables
from testbed.referee import routing

# Spines with two links to each leaf. The 64-GPU one's groups are each one exact pattern; the
# 256-GPU one's rail 7 straddles its two segments (gpu + 1 carries), so its covers split.
PARALLEL_SPINES = [
    "roft:gpus=64,gpus_per_server=8,radix=16",
    pytest.param("roft:gpus=256,gpus_per_server=8,radix=32,tiers=2", marks=pytest.mark.slow),  # 60 s
]


def selected(cover, universe):
    hit = np.zeros(len(universe), dtype=np.int64)
    for v, m in cover:
        hit += matches(v, m, universe)
    return hit


def test_a_strided_set_is_one_pattern():
    # 1, 3, 5, 7 differ in bits 1 and 2 only; no other address of 0..15 has bit 0 set and bit 3 clear
    assert masked_cover({1, 3, 5, 7}, set(range(16)) - {1, 3, 5, 7}) == [(1, FULL & ~0b110)]


def test_a_set_whose_pattern_holds_an_outsider_is_split_on_its_highest_differing_bit():
    # 8, 16, 24 share the pattern xxx11000 -> x00 = 0 is an outsider; split on bit 4: {16, 24} = 1x000, {8} alone
    others = set(range(33)) - {8, 16, 24}
    assert masked_cover({8, 16, 24}, others) == [(16, FULL & ~8), (8, FULL)]


def test_rail_seven_of_a_segment_with_the_plus_one_address_plan():
    # ip low 16 bits = gpu + 1; rail 7 of segment 0 (32 servers of 8): gpus 7, 15, ..., 255 -> 8, 16, ..., 256
    universe = np.arange(1, 1025)
    members = set(range(8, 257, 8))
    cover = masked_cover(members, set(universe.tolist()) - members)
    hit = selected(cover, universe)
    assert set(universe[hit == 1].tolist()) == members and hit.max() == 1
    assert len(cover) <= 6


@pytest.mark.parametrize("seed", range(20))
def test_random_sets_are_covered_exactly_once(seed):
    rng = np.random.default_rng(seed)
    universe = rng.choice(1 << 12, size=300, replace=False)
    members = set(rng.choice(universe, size=int(rng.integers(1, 120)), replace=False).tolist())
    cover = masked_cover(members, set(universe.tolist()) - members)
    hit = selected(cover, universe)
    assert set(universe[hit > 0].tolist()) == members
    assert hit.max() == 1  # no member matched twice: equal priorities never compete


def test_overlapping_members_and_others_is_refused():
    with pytest.raises(ValueError, match="both"):
        masked_cover({1, 2}, {2, 3})


@pytest.mark.parametrize("spec", PARALLEL_SPINES)
def test_compressed_entries_forward_exactly_as_the_dense_tables(spec):
    fab = build_fabric(spec)
    T = forwarding_tables(fab)
    lanes, n_lanes = T.ecmp_lanes
    n_ports = len(fab.ports)
    sports = routing.SPORTS  # every RoCE source port; the referee's table evaluates all at once
    masked_seen = 0
    for r, sw in enumerate(fab.switches):
        entries = flow_entries(T, sw.name)
        table = routing.Table(entries)
        masked_seen += sum(1 for e in entries if e["priority"] == PRIORITY_MASKED)
        number = {p.id: p.number for p in fab.ports if p.node == sw.id}
        for a in np.nonzero(T.next_group[r] >= 0)[0]:
            g = int(T.next_group[r, a])
            members = T.group_members(g)
            if g < n_ports:
                want = np.full(sports.size, members[0])
            else:
                want = np.array(members)[ecmp_member(T.seeds[r], sports, len(members), lanes[r], n_lanes)]
            got = table.out_ports(ip_to_int(fab.ports[a].ip))
            assert (got == np.array([number[int(p)] for p in want])).all(), (sw.name, fab.ports[a].ip)
            assert match_flow_entries(entries, fab.ports[a].ip, None)["out_port"] == number[members[0]]
    assert masked_seen > 0  # the spines' groups did compress


def test_a_thousand_gpu_rofts_spines_hold_a_few_thousand_entries_not_128_thousand():
    fab = build_fabric("roft:gpus=1024,gpus_per_server=8,radix=64,tiers=2")
    T = forwarding_tables(fab)
    spines = [sw for sw in fab.switches if sw.tier == max(s.tier for s in fab.switches)]
    sizes = [len(flow_entries(T, sw.name)) for sw in spines]
    assert len(spines) == 16 and max(sizes) <= 7000


def test_fast_failover_gives_a_masked_entry_the_backup_of_every_destination_it_carries():
    # annotate raises if the destinations of one masked entry would need different backups
    fab = build_fabric(PARALLEL_SPINES[0])
    out = annotate(fab, protection(fab, "ecmp"))
    masked = [
        e
        for v in out.values()
        for e in v["entries"]
        if e["priority"] in (PRIORITY_MASKED, PRIORITY_MASKED + PRIORITY_UDP_BUCKET)
    ]
    assert masked and all("ff_backup" in e and e["ff_backup"] != e["out_port"] for e in masked)
