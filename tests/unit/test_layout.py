"""Layout planner: hand-checked small layouts, invariants at every size, the 16,384-GPU time bound."""

import csv
import io
import time

import pytest

from testbed.fabric import build_fabric
from testbed.fabric import layout as L
from testbed.fabric.params import SpecError

U = 0.04445
RACK_H = 42 * U
ZCUBE = "zcube:n=4,gpus_per_server=4"
ROFT = "roft:gpus=16,gpus_per_server=4,segments=2"


def test_zcube_4_by_hand():
    """4 servers fill one rack; every switch serves GPUs of that one row, so all 8 stand in one
    middle-of-row network rack (col 0, next to the server rack at col 1), A0..A3 then B0..B3 from U1."""
    fab = build_fabric(ZCUBE)
    lay = L.plan(fab)
    assert {r.name: r.role for r in lay.racks} == {"R00.00": "row-network", "R00.01": "server"}
    assert lay.position(fab.node_by_name["za0"].id) == "R00.00/U1"
    assert lay.position(fab.node_by_name["zb3"].id) == "R00.00/U15"
    assert lay.position(fab.node_by_name["g5"].id) == "R00.01/U5"  # server 1
    cables = {c.a_port + " " + c.b_port: c for c in lay.cables}
    # g0-p0 (server 0: U1-4, ports at 2 U) -> za0-p1 (U1-2, ports at 1 U), adjacent racks:
    # up (42 - 2) U + (42 - 1) U + 2 x 0.3 m tray, along 0.6 m, slack 1 m
    g0 = (42 - 2) * U + (42 - 1) * U + 0.6 + 0.6 + 1.0
    assert cables["g0-p0 za0-p1"].length_m == pytest.approx(g0, abs=0.01)
    assert cables["g0-p0 za0-p1"].medium == "AEC"  # 3 m < 5.8 m <= 7 m
    # za0 -> zb0 inside the rack: from 1 U to 9 U (zb0 occupies U9-10), plus slack
    fabric = next(c for c in lay.cables if {c.a_port.split("-")[0], c.b_port.split("-")[0]} == {"za0", "zb0"})
    assert fabric.length_m == pytest.approx(8 * U + 1.0, abs=0.01) and fabric.medium == "DAC"
    b = L.bom(fab, lay)
    assert b["cables_by_medium"] == {"DAC": 16, "AEC": 32, "AOC": 0, "optics": 0}
    assert b["transceivers"] == 0 and b["fibre_length_m"] == 0


def test_roft_16_by_hand():
    """Leaves serve the two servers of their segment (one row): row network rack. The spines
    serve no GPU: central network row R01, between the (single) server row and the rest."""
    fab = build_fabric(ROFT)
    lay = L.plan(fab)
    roles = {r.name: r.role for r in lay.racks}
    assert roles == {"R00.00": "row-network", "R00.01": "server", "R01.00": "central-network"}
    leaf_spine = [c for c in lay.cables if c.kind == "fabric"]
    assert len(leaf_spine) == 16
    first = next(c for c in leaf_spine if c.a_port.startswith("l0r0") and c.b_port.startswith("sp0"))
    # leaf at U1 (port height 1 U) in row 0, spine at U1 in row 1, same column: up both, across 2.4 m
    assert first.length_m == pytest.approx(2 * (42 - 1) * U + 0.6 + 2.4 + 1.0, abs=0.01)
    assert first.medium == "AOC"  # 7 m < 7.6 m <= 30 m
    # leaf k = 4 x segment + rail (0..7) at U(1 + 2k), spine m at U(1 + 2m): 4.0 m + (82 - 2k - 2m) U, which is <= 7 m
    # (AEC) only when k + m >= 8: leaf 7 to spine 1. NIC cables all stay within 7 m (AEC).
    for c in leaf_spine:
        leaf = fab.node_by_name[c.a_port.split("-")[0]]
        k = 4 * leaf.segment + leaf.index
        m = fab.node_by_name[c.b_port.split("-")[0]].index
        assert c.length_m == pytest.approx(4.0 + (82 - 2 * k - 2 * m) * U, abs=0.01)
    b = L.bom(fab, lay)
    assert b["cables_by_medium"] == {"DAC": 0, "AEC": 16 + 1, "AOC": 15, "optics": 0}


@pytest.mark.parametrize(
    "spec",
    [
        ZCUBE,
        ROFT,
        "zcube:n=32,gpus_per_server=8",
        "roft:gpus=1024,radix=32,tiers=3",
        "roft:gpus=1024,gpus_per_server=8,radix=64,tiers=2",
    ],
)
def test_every_cable_placed_once_within_the_tray_bounds(spec):
    fab = build_fabric(spec)
    c = L.Constraints()
    lay = L.plan(fab, c)
    assert sorted(cb.link for cb in lay.cables) == list(range(len(fab.links)))
    assert len({cb.id for cb in lay.cables}) == len(fab.links)
    assert set(lay.node_place) == {n.id for n in fab.nodes}
    depth = max(r.y_m for r in lay.racks)
    longest = 2 * (RACK_H + c.tray_above_rack_m) + lay.row_length_m + depth + c.slack_m
    for cb in lay.cables:
        assert c.slack_m <= cb.length_m <= longest + 1e-9
        assert cb.medium == (
            "DAC" if cb.length_m <= 3 else "AEC" if cb.length_m <= 7 else "AOC" if cb.length_m <= 30 else "optics"
        )
    # racks: units and power within limits, no two devices overlap
    used = {}
    for node, p in lay.node_place.items():
        if fab.nodes[node].role == "gpu":
            continue
        used.setdefault(p.rack, []).append((p.unit, p.units, c.switch_power_kw))
    servers = {(lay.node_place[g.id].rack, lay.node_place[g.id].unit) for g in fab.gpus}
    for rack, unit in servers:
        used.setdefault(rack, []).append((unit, c.server_units, c.server_power_kw))
    for rack, devs in used.items():
        spans = sorted((u, u + n - 1) for u, n, _ in devs)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), lay.racks[rack].name
        assert spans[-1][1] <= c.rack_units
        assert sum(kw for *_, kw in devs) <= c.rack_power_kw
    b = L.bom(fab, lay)
    counts = fab.counts()
    assert b["cables"] == counts["cables"] == sum(b["cables_by_medium"].values())
    assert sum(sum(v.values()) for v in b["cables_by_medium_length"].values()) == counts["cables"]
    assert b["transceivers"] == 2 * b["cables_by_medium"]["optics"]
    rows = list(csv.DictReader(io.StringIO(L.patch_list_csv(fab, lay))))
    assert len(rows) == counts["cables"] and len({r["cable_id"] for r in rows}) == counts["cables"]


def test_zcube_core_is_long_and_its_nic_cables_short_at_1024():
    """The article's point, measured on the plan: ZCube's bipartite core runs cluster-wide (B
    switches serve every row), while NIC-to-A cables stay in the row."""
    fab = build_fabric("zcube:n=32,gpus_per_server=8")
    lay = L.plan(fab)
    nic_a = [cb.length_m for cb in lay.cables if cb.b_port.startswith("za")]
    core = [cb.length_m for cb in lay.cables if cb.kind == "fabric"]
    assert max(nic_a) < min(core) + 10 and sum(core) / len(core) > sum(nic_a) / len(nic_a)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["zcube:n=128,gpus_per_server=8", "roft:gpus=16384,radix=128,tiers=3"])
def test_16384_gpu_layout_in_under_30_s(spec):
    fab = build_fabric(spec)
    t0 = time.perf_counter()
    lay = L.plan(fab)
    b = L.bom(fab, lay)
    L.patch_list_csv(fab, lay)
    took = time.perf_counter() - t0
    assert took < 30, f"{spec}: layout took {took:.1f} s"
    assert b["cables"] == fab.counts()["cables"]


@pytest.mark.parametrize(
    "items, msg",
    [
        (["racks=3"], "unknown constraint 'racks'"),
        (["rack_units=-1"], "must be > 0"),
        (["rack_units=4x"], "is not a int"),
        (["dac_max_m=10"], "reach thresholds must grow"),
        (["server_power_kw=50"], "not one server fits a rack"),
        (["racks_per_row"], "is not key=value"),
    ],
)
def test_bad_constraints_are_refused(items, msg):
    with pytest.raises(SpecError, match=msg):
        L.Constraints.parse(items)


def test_a_row_too_short_for_its_network_racks_is_refused():
    fab = build_fabric("zcube:n=32,gpus_per_server=8")
    with pytest.raises(SpecError, match="raise racks_per_row"):
        L.plan(fab, L.Constraints.parse(["racks_per_row=1"]))


def test_patch_list_round_trip_names_cables():
    fab = build_fabric(ZCUBE)
    lay = L.plan(fab)
    patch = L.read_patch_list(L.patch_list_csv(fab, lay))
    row = patch[frozenset(("g0-p0", "za0-p1"))]
    assert row["cable_id"] == "C000000" and row["a_rack"] == "R00.01" and row["b_rack"] == "R00.00"
    with pytest.raises(SpecError, match="not a zlab patch list"):
        L.read_patch_list("a,b\n1,2\n")


def test_cli_writes_patch_list_bom_and_floor_plan(tmp_path, capsys):
    from testbed.cli import main

    assert main(["layout", ZCUBE, ROFT, "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "zcube:n=4" in out and "roft:gpus=16" in out and "DAC" in out
    for sub, cables in (("zcube-16", 48), ("roft-16", 32)):
        d = tmp_path / sub
        rows = list(csv.DictReader(open(d / "patch-list.csv")))
        assert len(rows) == cables
        assert (d / "floorplan.png").stat().st_size > 5000
        bom = __import__("json").loads((d / "bom.json").read_text())
        assert bom["cables"] == cables
