"""ZCube(n,2) construction, identifiers and routing, checked against the spec's own formulas."""

import json
import math

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.fabric import Fabric, build_fabric
from testbed.fabric.model import FabricFileError
from testbed.fabric.params import SpecError
from testbed.fabric.paths import forwarding_tables, route, split_fractions
from testbed.fabric.validate import validate


def links_by_name(fab):
    """{(node, port number) : (node, port number)} both ways, by names."""
    out = {}
    for l in fab.links:
        a, b = fab.ports[l.a], fab.ports[l.b]
        ka, kb = (fab.nodes[a.node].name, a.number), (fab.nodes[b.node].name, b.number)
        out[ka], out[kb] = kb, ka
    return out


def test_worked_16_gpu_example_every_link():
    """Spec §1: GPU g cons -> A[g//n], rail -> B[g%n]; every A has one link to every B."""
    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    n = 4
    wired = links_by_name(fab)
    expected = {}
    for g in range(16):
        expected[(f"g{g}", 0)] = (f"za{g // n}", g % n + 1)  # cons
        expected[(f"g{g}", 1)] = (f"zb{g % n}", g // n + 1)  # rail
    for j in range(n):
        for i in range(n):
            expected[(f"za{j}", n + 1 + i)] = (f"zb{i}", n + 1 + j)
    assert len(fab.links) == 48
    for end, other in expected.items():
        assert wired[end] == other, end
    assert len(wired) == 2 * 48


def test_worked_16_gpu_example_paths():
    """P1: a.cons -> A(a) -> B(b) -> b.rail;  P2: a.rail -> B(a) -> A(b) -> b.cons, for every pair."""
    fab = build_fabric("zcube:n=4")
    n = 4
    for a in range(16):
        for b in range(16):
            if a == b:
                continue
            p1 = route(fab, f"g{a}-p0", f"g{b}")
            assert p1.switches == (f"za{a // n}", f"zb{b % n}")
            assert p1.dst_port == f"g{b}-p1"
            # hop ports: in on the GPU's port, out toward B[b%n] (n+1+i), then out to b's rail port
            assert [(h.in_port, h.out_port) for h in p1.hops] == [
                (a % n + 1, n + 1 + b % n),
                (n + 1 + a // n, b // n + 1),
            ]
            p2 = route(fab, f"g{a}-p1", f"g{b}")
            assert p2.switches == (f"zb{a % n}", f"za{b // n}")
            assert p2.dst_port == f"g{b}-p0"
            assert set(p1.links).isdisjoint(p2.links)  # the two paths are link-disjoint


def test_zhipu_one_based_formula_is_the_same_graph():
    """Spec: port 1 -> odd switch ((i-1) mod (N/k))*2+1, port 2 -> even switch ceil(i/k)*2."""
    for spec, N, k in (("zcube:n=4", 16, 4), ("zcube:n=8,gpus=32,links_per_pair=2", 32, 8)):
        fab = build_fabric(spec)
        for i in range(1, N + 1):
            odd = ((i - 1) % (N // k)) * 2 + 1
            even = math.ceil(i / k) * 2
            rail_sw = fab.nodes[fab.attach_switch(fab.gpu_port_by_role(i - 1, "rail").id)]
            cons_sw = fab.nodes[fab.attach_switch(fab.gpu_port_by_role(i - 1, "cons").id)]
            assert (rail_sw.group, rail_sw.index) == ("B", (odd - 1) // 2)
            assert (cons_sw.group, cons_sw.index) == ("A", even // 2 - 1)


@settings(max_examples=7, deadline=None)
@given(st.integers(min_value=2, max_value=8))
def test_count_identities(n):
    fab = build_fabric(f"zcube:n={n}")
    c = fab.counts()
    assert (c["gpus"], c["switches"], c["nic_links"], c["fabric_links"], c["cables"]) == (
        n * n,
        2 * n,
        2 * n * n,
        n * n,
        3 * n * n,
    )
    assert all(sw.radix == 2 * n for sw in fab.switches)
    rep = validate(fab)
    assert rep.ok, rep.checks
    assert rep.diameter_switches == 2


@settings(max_examples=6, deadline=None)
@given(st.integers(min_value=2, max_value=6))
def test_unique_shortest_path_per_source_port_networkx(n):
    """Independent check on the graph: exactly one shortest path a.cons -> b.rail (GPUs don't forward)."""
    fab = build_fabric(f"zcube:n={n}")
    G = nx.Graph()
    for l in fab.links:
        pa, pb = fab.ports[l.a], fab.ports[l.b]
        # GPU ports are endpoints of their own; switches are single nodes
        ea = pa.name if fab.nodes[pa.node].role == "gpu" else fab.nodes[pa.node].name
        eb = pb.name if fab.nodes[pb.node].role == "gpu" else fab.nodes[pb.node].name
        G.add_edge(ea, eb)
    for a in range(0, n * n, max(1, n - 1)):
        for b in range(n * n):
            if a == b or a // n == b // n or a % n == b % n:
                continue
            for src, dst in ((f"g{a}-p0", f"g{b}-p1"), (f"g{a}-p1", f"g{b}-p0")):
                paths = list(nx.all_shortest_paths(G, src, dst))
                assert len(paths) == 1 and len(paths[0]) == 4  # port, 2 switches, port
                assert tuple(paths[0][1:3]) == route(fab, src, f"g{b}").switches


def test_shortcut_policy_is_opt_in():
    off = build_fabric("zcube:n=4")
    on = build_fabric("zcube:n=4,shortcut=1")
    # g0 and g1 share A0; g0 and g4 share B0
    assert route(off, "g0-p0", "g1").switches == ("za0", "zb1")
    assert route(on, "g0-p0", "g1").switches == ("za0",)
    assert route(on, "g0-p0", "g1").dst_port == "g1-p0"
    assert route(on, "g0-p1", "g4").switches == ("zb0",)
    assert route(on, "g0-p0", "g5").switches == ("za0", "zb1")  # no shared switch: unchanged
    assert validate(on).ok


def test_split_policies():
    fab = build_fabric("zcube:n=4")
    assert split_fractions(fab) == [("cons", 0.5), ("rail", 0.5)]
    assert split_fractions(fab, "rail") == [("rail", 1.0)]
    assert split_fractions(build_fabric("zcube:n=4,split=cons")) == [("cons", 1.0)]
    with pytest.raises(SpecError, match="valid: half, cons, rail"):
        split_fractions(fab, "spray")


def test_forwarding_tables_follow_the_rule():
    """A[j]: own cons addresses local + every rail address toward B[h%n]; no other entries."""
    fab = build_fabric("zcube:n=4")
    entries = {e["dst_ip"]: e["out_ports"] for e in forwarding_tables(fab).entries("za1")}
    assert len(entries) == 4 + 16
    for h in range(16):
        assert entries[f"10.2.0.{h + 1}"] == [4 + 1 + h % 4]
        if h // 4 == 1:
            assert entries[f"10.1.0.{h + 1}"] == [h % 4 + 1]
        else:
            assert f"10.1.0.{h + 1}" not in entries


def test_rectangular_parallel_links_are_used_evenly():
    fab = build_fabric("zcube:n=8,gpus=32,links_per_pair=2")
    assert validate(fab).ok
    used = {}
    for a in range(8):  # A0's GPUs
        for b in range(32):
            if b // 8 != 0:
                hop = route(fab, f"g{a}-p0", f"g{b}").hops[0]
                used.setdefault(hop.out_port, 0)
                used[hop.out_port] += 1
    assert sorted(used) == list(range(9, 17))  # 4 B switches x 2 links
    assert max(used.values()) - min(used.values()) <= 8


@pytest.mark.parametrize("src, dst", [(0, 1), (0, 3), (2, 1), (3, 0)])
def test_rectangular_server_to_server_rank_aligned_shares_no_fabric_link(src, dst):
    """Every GPU of one 8-GPU server sends to the same rank of another, on both ports (the P/D
    mapping): with n/m parallel links per pair the fabric has a link for every flow. The table
    rule that chose the link by the destination's position put two flows on one link."""
    fab = build_fabric("zcube:n=8,gpus=32,gpus_per_server=8,links_per_pair=2")
    used = []
    for r in range(8):
        for port in ("p0", "p1"):
            hops = route(fab, f"g{8 * src + r}-{port}", f"g{8 * dst + r}").hops
            used.append((hops[0].switch, hops[0].out_port))  # the fabric link leaving the first switch
    assert len(set(used)) == len(used) == 16


def test_rectangular_without_enough_links_is_oversubscribed_not_refused():
    fab = build_fabric("zcube:n=8,gpus=32")  # Zhipu's figure: 8 GPU ports, 4 fabric ports
    assert fab.params["radix"] == 12 and validate(fab).ok


@pytest.mark.parametrize(
    "spec, message",
    [
        ("zcube:n=1", "n must be >= 2"),
        ("zcube:n=4,radix=7", "port budget exceeded"),
        ("zcube:n=4,gpus=18", "multiple of n"),
        ("zcube:n=4,gpus_per_server=3", "must divide n"),
        ("zcube:gpus=16", "n .* is required"),
        ("zcube:n=4,bogus=1", "unknown parameter 'bogus'; valid parameters: n, gpus"),
        ("zcube:n=four", "not a valid int"),
        ("zcube:n=4,split=spray", "valid values: half, cons, rail"),
        ("zcube", "n .* is required"),
        ("cube:n=4", "unknown fabric kind 'cube'; valid kinds"),
    ],
)
def test_bad_specs_fail_clearly(spec, message):
    with pytest.raises(SpecError, match=message):
        build_fabric(spec)


def test_identifiers_unique_short_and_computed():
    fab = build_fabric("zcube:n=128")
    assert max(len(p.name) for p in fab.ports) <= 15
    gp = [p for p in fab.ports if p.ip]
    assert len({p.ip for p in gp}) == len({p.mac for p in gp}) == 2 * 128 * 128
    assert len({sw.dpid for sw in fab.switches}) == 256
    p = fab.gpu_port_by_role(257, "rail")
    assert (p.ip, p.mac, p.name) == ("10.2.1.2", "02:5a:02:00:01:02", "g257-p1")


def test_export_is_deterministic_and_round_trips():
    a = build_fabric("zcube:n=4,gpus_per_server=2").to_json()
    b = build_fabric("zcube:gpus_per_server=2,n=4").to_json()
    assert a == b
    back = Fabric.from_json(a)
    assert back.to_json() == a
    assert route(back, "g3-p0", "g9").switches == ("za0", "zb1")
    data = json.loads(a)
    assert data["schema"] == "zlab.fabric/1" and data["counts"]["cables"] == 48


def test_canonical_spec_rebuilds_the_same_fabric():
    fab = build_fabric("zcube:n=6")
    assert build_fabric(fab.spec).to_json() == fab.to_json()


def test_loading_a_foreign_file_fails():
    with pytest.raises(FabricFileError, match="not a zlab fabric file"):
        Fabric.from_json('{"schema": "other"}')
