"""Validation catches broken models; the cost table reproduces the spec's published figures."""

import dataclasses

import pytest

from testbed.fabric import Fabric, build_fabric
from testbed.fabric.cost import Prices, compare, comparison_specs, inventory, price
from testbed.fabric.params import SpecError
from testbed.fabric.paths import forwarding_tables
from testbed.fabric.validate import validate


def test_average_path_length_matches_spec():
    assert validate(build_fabric("zcube:n=32,shortcut=1")).avg_path_links == pytest.approx(2.939, abs=5e-4)


def test_missing_table_entry_is_reported_as_unreachable():
    fab = build_fabric("zcube:n=4")
    t = forwarding_tables(fab)
    t.next_group[0, 2 * 9 + 1] = -1  # za0 forgets g9's rail address
    rep = validate(fab)
    assert not rep.ok
    assert "4 GPU port pairs never delivered" in rep.checks["every GPU port pair reachable, no loops"]


def test_forwarding_loop_is_reported():
    fab = build_fabric("roft:gpus=16,gpus_per_server=4,segments=2")
    t = forwarding_tables(fab)
    rows = {sw.name: r for r, sw in enumerate(fab.switches)}
    sp0 = fab.node_by_name["sp0"].id
    up = fab.switch_port_ids[fab.node_by_name["l0r0"].id][3]  # l0r0 -> sp0
    back = fab.switch_port_ids[sp0][1]  # sp0 -> l0r0
    t.next_group[rows["sp0"], 8] = back  # sp0 sends g8 back down to l0r0 ...
    t.next_group[rows["l0r0"], 8] = up  # ... which sends it up again
    rep = validate(fab)
    assert not rep.ok and "never delivered" in rep.checks["every GPU port pair reachable, no loops"]


def test_port_budget_violation_is_reported():
    fab = build_fabric("zcube:n=4")
    nodes = list(fab.nodes)
    nodes[16] = dataclasses.replace(nodes[16], radix=6)
    broken = Fabric(fab.kind, fab.spec, fab.params, tuple(nodes), fab.ports, fab.links)
    rep = validate(broken)
    assert rep.checks["port budget"] == "za0 uses 8 ports > radix 6"


def test_miscabled_gpu_is_reported():
    fab = build_fabric("zcube:n=4")
    links = list(fab.links)
    links[0] = dataclasses.replace(links[0], b=1)  # g0 cons cabled to its own rail port
    broken = Fabric(fab.kind, fab.spec, fab.params, fab.nodes, fab.ports, tuple(links))
    assert validate(broken).checks["cabling"] != "ok"


def test_cost_reproduces_published_figures():
    rows = {(r["gpus"], r["fabric"]): r for r in compare([1024, 16384])}
    for gpus in (1024, 16384):
        z, r2, r3 = rows[(gpus, "ZCube(n,2)")], rows[(gpus, "ROFT 2-tier")], rows[(gpus, "ROFT 3-tier")]
        assert z["switch_tbps_per_gpu"] == pytest.approx(0.8)
        assert r2["switch_tbps_per_gpu"] == pytest.approx(1.2)
        assert r3["switch_tbps_per_gpu"] == pytest.approx(2.0)
        assert r2["zcube_vs_this_switch_tbps_per_gpu_pct"] == pytest.approx(-33.33, abs=0.01)
        assert r3["zcube_vs_this_switch_tbps_per_gpu_pct"] == pytest.approx(-60.0)
        assert z["optics_tbps_per_gpu"] == pytest.approx(1.2)
        assert rows[(gpus, "ZCube, NIC->A copper")]["optics_tbps_per_gpu"] == pytest.approx(0.8)
        assert r2["optics_tbps_per_gpu"] == pytest.approx(1.6) and r3["optics_tbps_per_gpu"] == pytest.approx(2.4)
        assert z["cable_gbps_per_gpu"] == pytest.approx(600) and r2["cable_gbps_per_gpu"] == pytest.approx(800)
    # published inventories (spec §3)
    assert (rows[(1024, "ROFT 3-tier")]["switches"], rows[(1024, "ZCube(n,2)")]["switches"]) == (160, 64)
    assert rows[(1024, "ROFT 3-tier")]["switch_models"] == [
        {"radix": 32, "port_gbps": 400.0, "count": 160, "asic_tbps": 12.8}
    ]
    assert rows[(1024, "ZCube(n,2)")]["switch_models"][0]["radix"] == 64
    assert (rows[(16384, "ROFT 3-tier")]["switches"], rows[(16384, "ZCube(n,2)")]["switches"]) == (640, 256)
    assert rows[(16384, "ZCube(n,2)")]["cables"] == 49152


def test_prices_are_parameters():
    inv = inventory(build_fabric("zcube:n=4"))
    cheap, dear = price(inv, Prices()), price(inv, Prices(optic_usd_per_gbps=4.0))
    assert dear["optics_usd"] == pytest.approx(2 * cheap["optics_usd"])
    assert dear["switch_usd"] == cheap["switch_usd"]


def test_cost_needs_square_gpu_counts():
    with pytest.raises(SpecError, match="not a square"):
        comparison_specs(1000)
