"""Multi-plane ZCube: hand-worked assignment and relay, oracles against the single-plane model,
and validation plus load at >= 32k GPUs."""

import numpy as np
import pytest

from testbed.fabric import build_fabric, multiplane
from testbed.fabric.load import estimate, pattern
from testbed.fabric.params import SpecError


def test_rank_assignment_and_relay_by_hand():
    # 2 planes, 4 GPUs per server: ranks 0,2 in plane 0, ranks 1,3 in plane 1; each plane is
    # ZCube(4,2) over 2 GPUs per server, 16 GPUs; 8 servers, 32 GPUs in all
    mp = multiplane.build("zcube-planes:planes=2,n=4,gpus_per_server=4")
    assert mp.n_gpus == 32 and mp.plane.n_gpus == 16 and mp.plane.params["gpus_per_server"] == 2
    g = np.arange(8)  # servers 0 and 1
    assert mp.plane_of(g).tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert mp.plane_index(g).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # GPU 0 (server 0, rank 0) to GPU 5 (server 1, rank 1, plane 1): relay through rank 1 of server 0
    assert mp.relay_gpu(np.array([0]), np.array([5])).tolist() == [1]
    # GPU 2 (rank 2) to plane 1: rank 3, its partner of the same pair
    assert mp.relay_gpu(np.array([2]), np.array([5])).tolist() == [3]
    c = mp.counts()
    assert (c["switches"], c["cables"]) == (16, 96)
    assert multiplane.validate_planes(mp)["ok"]


def test_one_plane_equals_the_single_zcube_estimate():
    """Oracle: with planes=1 the composite must give exactly the plain model's figures."""
    mp = multiplane.build("zcube-planes:planes=1,n=4,gpus_per_server=4")
    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    for name in ("rail-aligned", "rank-shifted", "random"):
        got = multiplane.estimate_planes(mp, name, seed=3)
        want = estimate(fab, pattern(fab, name, seed=3), seed=3).summary(fab)
        assert got["max_link_util"] == pytest.approx(want["max_link_util"])
        assert got["aggregate_throughput_fraction"] == pytest.approx(want["aggregate_throughput_fraction"])
        assert got["relayed_fraction_of_bytes"] == 0.0


def test_nic_planes_carry_half_the_demand_each_at_half_the_rate():
    """assign=nic: 2 planes at 200G per GPU each, the demand sprayed evenly: every plane's
    utilisation equals the single 400G ZCube's (hand-worked: demand/2 over capacity/2)."""
    mp = multiplane.build("zcube-planes:planes=2,n=4,gpus_per_server=4,assign=nic")
    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    assert mp.plane.gpu_port(0, 0).rate_bps == fab.gpu_port(0, 0).rate_bps // 2
    got = multiplane.estimate_planes(mp, "rail-aligned")
    want = estimate(fab, pattern(fab, "rail-aligned")).summary(fab)
    assert got["max_link_util"] == pytest.approx(want["max_link_util"])
    assert mp.counts()["nic_ports_per_gpu"] == 4


def test_rank_shifted_traffic_is_all_relayed_and_rail_aligned_none():
    mp = multiplane.build("zcube-planes:planes=2,n=4,gpus_per_server=4")
    assert multiplane.estimate_planes(mp, "rail-aligned")["relayed_fraction_of_bytes"] == 0.0
    shifted = multiplane.estimate_planes(mp, "rank-shifted")
    assert shifted["relayed_fraction_of_bytes"] == 1.0  # rank r -> r+1 always changes plane
    assert shifted["maxmin_min_fraction_of_demand"] > 0


@pytest.mark.parametrize(
    "spec, msg",
    [
        ("zcube-planes:planes=3,n=4,gpus_per_server=4", "divide gpus_per_server"),
        ("zcube-planes:planes=2", "missing n"),
        ("zcube-planes:planes=2,n=4,assign=wires", "valid: rank, nic"),
        ("zcube-planes:planes=2,n=4,colour=red", "parameters are"),
        ("zcube:n=4", "not a multi-plane spec"),
    ],
)
def test_bad_specs_are_refused(spec, msg):
    with pytest.raises(SpecError, match=msg):
        multiplane.build(spec)


@pytest.mark.slow
def test_32k_gpus_validate_and_estimate():
    r = multiplane.run("zcube-planes:planes=2,n=128,gpus_per_server=8", ["rail-aligned"], seeds=1)
    assert r["counts"]["gpus"] == 32768 and r["validation"]["ok"]
    assert r["validation"]["diameter_switches"] == 2
    assert r["loads"]["rail-aligned"]["max_link_util"][0] > 0
