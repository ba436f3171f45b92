"""Fabric kinds are plug-ins: a toy third kind, registered inside this test, goes through
validation, routing, flow-entry generation and the load estimator unchanged — and nothing
outside the kind modules tests a kind's name."""

import re
from pathlib import Path

import numpy as np
import pytest

from testbed.fabric import Fabric, build_fabric
from testbed.fabric import kinds
from testbed.fabric.builder import FabricBuilder, gbps_to_bps
from testbed.fabric.kind import FabricKind
from testbed.fabric.load import estimate, pattern
from testbed.fabric.openflow import flow_entries, match_flow_entries
from testbed.fabric.params import Param, canonical_spec, require, resolve_params
from testbed.fabric.paths import forwarding_tables, route, walk
from testbed.fabric.tables import GroupIndex, Tables, port_peer, ports_between
from testbed.fabric.validate import validate

REPO = Path(__file__).resolve().parents[2]
TOY_PARAMS = (Param("gpus", int, None, "GPUs, split over two leaves"),
              Param("gpus_per_server", int, 2, "GPUs per server"),
              Param("gpu_gbps", float, 400.0, "per GPU"))


def _build(given):
    """Two leaves, two spines, every leaf to every spine: the smallest leaf-spine."""
    p = resolve_params("toy", TOY_PARAMS, given)
    require(p["gpus"] and p["gpus"] % 4 == 0, "toy", "gpus must be a multiple of 4")
    rate = gbps_to_bps(p["gpu_gbps"])
    half = p["gpus"] // 2
    b = FabricBuilder("toy")
    for g in range(p["gpus"]):
        b.gpu(g, server=g // p["gpus_per_server"], local_rank=g % p["gpus_per_server"], roles=("nic",), rate_bps=rate)
    leaves = [b.switch("leaf", 1, i, half + 2, segment=i) for i in range(2)]
    spines = [b.switch("spine", 2, k, 2) for k in range(2)]
    lp = {(l, n): b.switch_port(l, n, "down" if n <= half else "up", rate) for l in leaves for n in range(1, half + 3)}
    sp = {(s, n): b.switch_port(s, n, "down", rate) for s in spines for n in (1, 2)}
    for g in range(p["gpus"]):
        b.link(g, lp[(leaves[g // half], g % half + 1)], rate, "nic", "fibre")
    for i, l in enumerate(leaves):
        for k, s in enumerate(spines):
            b.link(lp[(l, half + 1 + k)], sp[(s, i + 1)], rate, "fabric", "fibre")
    return b.finish(canonical_spec("toy", TOY_PARAMS, p), p)


def _tables(fab: Fabric) -> Tables:
    peer, between, group = port_peer(fab), ports_between(fab), GroupIndex(fab)
    rows = {sw.id: r for r, sw in enumerate(fab.switches)}
    ng = np.full((len(fab.switches), fab.n_gpus), -1, dtype=np.int64)
    half = fab.n_gpus // 2
    leaves = [sw for sw in fab.switches if sw.group == "leaf"]
    spines = [sw for sw in fab.switches if sw.group == "spine"]
    for i, leaf in enumerate(leaves):
        ng[rows[leaf.id], :] = group([between[(leaf.id, s.id)][0] for s in spines])
        local = np.arange(i * half, (i + 1) * half)
        ng[rows[leaf.id], local] = peer[local]
        for s in spines:
            ng[rows[s.id], local] = between[(s.id, leaf.id)][0]
    return Tables(fab, ng, group.multi)


TOY = FabricKind("toy", "two leaves, two spines (a test's kind)", TOY_PARAMS, build=_build, tables=_tables,
                 expected_diameter=lambda fab: 3,
                 identity_checks=lambda fab: [("toy counts", None if len(fab.switches) == 4 else "not 4 switches")])


@pytest.fixture
def toy():
    kinds.register(TOY)
    yield
    kinds.unregister("toy")


def test_toy_kind_validates_routes_and_round_trips(toy):
    fab = build_fabric("toy:gpus=8")
    rep = validate(fab)
    assert rep.ok, rep.checks
    assert rep.diameter_switches == 3 and "toy counts" in rep.checks
    assert Fabric.from_json(fab.to_json()).to_json() == fab.to_json()
    r = route(fab, "g0-p0", "g7")
    assert r.switches[0] == "l0r0" and r.switches[1] in ("sp0", "sp1") and r.switches[2] == "l1r1"
    assert route(fab, "g0-p0", "g3").switches == ("l0r0",)


def test_toy_kind_flow_entries_follow_the_model(toy):
    fab = build_fabric("toy:gpus=8")
    tables = forwarding_tables(fab)
    entries = {sw.name: flow_entries(tables, sw.name) for sw in fab.switches}
    sports = np.random.default_rng(5).integers(49152, 65536, 64).tolist()
    for sport in sports:
        for dst in range(4, 8):
            model = route(fab, "g0-p0", f"g{dst}", sport=sport)
            for hop in model.hops:
                e = match_flow_entries(entries[hop.switch], model.dst_ip, sport)
                assert e is not None and e["out_port"] == hop.out_port, (hop, e)
    # both spines are used by some source port: the ECMP group is real
    used = {route(fab, "g0-p0", "g7", sport=s).switches[1] for s in sports}
    assert used == {"sp0", "sp1"}


def test_toy_kind_load_estimate_matches_a_hand_count(toy):
    """rank-shifted on 8 GPUs (2 per server): P = g0..g3 on leaf 0, D = g4..g7 on leaf 1. All
    four flows cross leaf 0's two uplinks: 4 x 400G over 2 x 400G, so the uplinks carry exactly
    1,600 Gb/s between them and the hotter one is at >= 2.0."""
    fab = build_fabric("toy:gpus=8")
    res = estimate(fab, pattern(fab, "rank-shifted"), seed=3)
    up = [2 * l.id + (0 if fab.nodes[fab.ports[l.a].node].tier == 1 else 1)
          for l in fab.links if l.kind == "fabric" and fab.nodes[fab.ports[l.a].node].segment == 0]
    assert res.load_bps[up].sum() == pytest.approx(4 * 400e9)
    assert res.util.max() >= 2.0
    w = walk(fab, np.arange(4), np.arange(4, 8), np.full(4, 50000))
    assert (w.n_hops == 3).all()


def test_no_kind_name_dispatch_outside_the_kind_modules():
    names = "|".join(re.escape(k) for k in kinds.KINDS)
    dispatch = re.compile(rf"""[!=]=\s*["']({names})["']|["']({names})["']\s*[!=]=|\bin\s*\(\s*["']({names})["']""")
    own = {REPO / "testbed" / "fabric" / f"{k}.py" for k in kinds.KINDS}
    hits = []
    for top in ("testbed", "traffic", "controllers"):
        for path in (REPO / top).rglob("*.py"):
            if path in own:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if dispatch.search(line):
                    hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not hits, hits
