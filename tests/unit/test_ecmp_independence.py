"""ECMP choices at different hops must be independent, as real per-switch-seeded hashes are:
the model's mean max link utilisation over 50 seeds is compared with an independent per-hop
uniform choice written here (the oracle), on three-tier ROFTs at 1,024 and 16,384 GPUs."""

import numpy as np
import pytest

from testbed.fabric import build_fabric
from testbed.fabric.load import estimate, pattern
from testbed.fabric.paths import dst_address, forwarding_tables, src_port_id
from testbed.fabric.tables import port_peer

SEEDS = range(50)


def oracle_max_util(fab, traffic, seed):
    """Every flow walks the forwarding tables; at each ECMP group it picks a member uniformly at
    random, independently of every other hop and flow."""
    t, peer, ends = forwarding_tables(fab), port_peer(fab), fab.link_ends
    rng = np.random.default_rng(10_000 + seed)
    load = np.zeros(2 * len(fab.links))
    role = fab.gpu_port_roles[0]
    src = src_port_id(fab, traffic.src, role)
    dst = dst_address(fab, traffic.src, role, traffic.dst)
    for s, a, demand in zip(src, dst, traffic.demand_bps):
        out = s
        while True:
            lk = fab.port_link[out]
            load[2 * lk + (ends[lk, 0] != out)] += demand
            if peer[out] == a:
                break
            node = fab.port_node[peer[out]]
            g = t.next_group[t.switch_rows[node], a]
            out = t.group_ports[g, rng.integers(t.group_size[g])]
    return (load / np.repeat(fab.link_rate_bps, 2)).max()


@pytest.mark.parametrize(
    "spec", ["roft:gpus=1024,radix=32", pytest.param("roft:gpus=16384,radix=128", marks=pytest.mark.slow)]
)
def test_ecmp_matches_independent_per_hop_choice(spec):
    fab = build_fabric(spec)
    assert fab.params["tiers"] == 3
    traffic = pattern(fab, "rank-shifted")
    model = np.mean([estimate(fab, traffic, seed=s).util.max() for s in SEEDS])
    oracle = np.mean([oracle_max_util(fab, traffic, s) for s in SEEDS])
    assert abs(model / oracle - 1) <= 0.05, (model, oracle)


def test_ecmp_tiers_in_series_read_disjoint_source_port_lanes():
    """A three-tier ROFT's leaf, aggregation and core groups read non-overlapping bits of the
    source port; a two-tier ROFT with one link per leaf-spine pair (one ECMP tier) keeps the seed-placed window."""
    from testbed.fabric.ecmp import ecmp_window

    t = forwarding_tables(build_fabric("roft:gpus=1024,radix=32"))
    lane, lanes = t.ecmp_lanes
    assert lanes == 3
    windows = [ecmp_window(0, 16, i, lanes) for i in range(lanes)]
    masks = [((1 << b) - 1) << s for s, b in windows]
    assert all(masks[i] & masks[j] == 0 for i in range(3) for j in range(i + 1, 3)), windows
    assert all(m < 1 << 14 for m in masks)
    assert forwarding_tables(build_fabric("roft:gpus=64")).ecmp_lanes[1] == 1  # leaves only
    # parallel leaf-spine links: the spine's choice among them is a second tier in series
    assert forwarding_tables(build_fabric("roft:gpus=64,radix=16")).ecmp_lanes[1] == 2


def test_the_vectorised_choice_is_the_per_flow_lookup():
    """ecmp_member groups flows by (seed, k, lane, lanes) to look each table up once; the oracle is
    the switch's own lookup done flow by flow (window, then table[bucket]; member 0 for non-UDP)."""
    from testbed.fabric.ecmp import ecmp_member, ecmp_table, ecmp_window, switch_seed

    rng = np.random.default_rng(7)
    for lanes in (1, 2, 3):
        n = 2_000
        seed = switch_seed(rng.integers(1, 40, n).astype(np.uint64))
        k = rng.integers(2, 70, n)
        lane = rng.integers(0, lanes, n)
        sport = rng.integers(-1, 65_536, n)  # -1: not UDP
        got = ecmp_member(seed, sport, k, lane, lanes)
        for i in range(n):
            if sport[i] < 0:
                assert got[i] == 0
                continue
            shift, bits = ecmp_window(int(seed[i]), int(k[i]), int(lane[i]), lanes)
            want = ecmp_table(int(seed[i]), int(k[i]), bits)[(int(sport[i]) >> shift) & ((1 << bits) - 1)]
            assert got[i] == want, (i, lanes)
