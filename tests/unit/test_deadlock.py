"""The cyclic buffer dependency (PFC deadlock) check: hand-built graphs and a hand-built cyclic
routing, the shipped fabrics' tables, ZCube's detour repair, and networkx as an independent
cycle finder on the same dependency graphs."""

import json

import networkx as nx
import numpy as np
import pytest

from testbed.cli import main
from testbed.congestion.deadlock import check, check_failures, dependencies, find_cycle
from testbed.fabric import build_fabric
from testbed.fabric.paths import walk
from testbed.fabric.tables import Tables


def test_find_cycle_on_hand_graphs():
    assert find_cycle({(1, 2), (2, 3), (1, 3)}) == []
    cyc = find_cycle({(0, 1), (1, 2), (2, 3), (3, 1)})
    assert sorted(cyc) == [1, 2, 3]
    assert all((cyc[i], cyc[(i + 1) % 3]) in {(1, 2), (2, 3), (3, 1)} for i in range(3))


@pytest.mark.parametrize(
    "spec",
    [
        "zcube:n=4,gpus_per_server=4",
        "zcube:n=8,gpus_per_server=8",
        "roft:gpus=16,gpus_per_server=4",
        "roft:gpus=64,tiers=3,gpus_per_server=8,radix=8",
    ],
)
def test_healthy_tables_have_no_cyclic_dependency(spec):
    """ZCube's paths cross at most one switch-to-switch link; ROFT's go up then down."""
    r = check(build_fabric(spec))
    assert r.acyclic and r.dependencies > 0, r.as_dict()


def _link_port(fab, a: str, b: str) -> int:
    """Port id on switch a of a cable to switch b."""
    ia, ib = fab.node_by_name[a].id, fab.node_by_name[b].id
    for lk in fab.links:
        p, q = (int(x) for x in fab.link_ends[lk.id])
        if fab.port_node[p] == ia and fab.port_node[q] == ib:
            return p
        if fab.port_node[q] == ia and fab.port_node[p] == ib:
            return q
    raise AssertionError(f"no cable {a}-{b}")


def _gpu_port_on(fab, switch: str) -> int:
    sid = fab.node_by_name[switch].id
    peer = {int(p): int(q) for lk in fab.links for p, q in (fab.link_ends[lk.id], fab.link_ends[lk.id][::-1])}
    return next(p for p in range(fab.n_gpus * fab.ports_per_gpu) if fab.port_node[peer[p]] == sid)


def test_a_hand_built_ring_routing_is_caught():
    """The classic four-switch ring: traffic to a host two hops away always turns the same way
    round za0 -> zb0 -> za1 -> zb1 -> za0, so each switch-to-switch buffer waits on the next."""
    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    base = check(fab)
    assert base.acyclic
    from testbed.fabric.paths import forwarding_tables

    t = forwarding_tables(fab)
    ng = t.next_group.copy()
    ring = ["za0", "zb0", "za1", "zb1"]
    for i, sw in enumerate(ring):
        nxt, far = ring[(i + 1) % 4], ring[(i + 2) % 4]
        dst = _gpu_port_on(fab, far)  # a host behind the switch two hops round the ring
        ng[t.switch_rows[fab.node_by_name[sw].id], dst] = _link_port(fab, sw, nxt)
        ng[t.switch_rows[fab.node_by_name[nxt].id], dst] = _link_port(fab, nxt, far)
    r = check(fab, Tables(fab, ng, t.multi_groups))
    assert not r.acyclic
    hops = [name.split("->")[0].split("-")[0] for name in r.cycle]
    assert sorted(hops) == sorted(ring), r.cycle


def test_zcube_detour_is_safe_alone_and_cycles_when_two_cables_fail():
    """One failed fabric cable: every repair policy's tables stay acyclic. Two failed cables with
    the detour repair (A -> B -> A -> B transit rules): some pairs chain detours into a cycle.
    networkx, an independent cycle finder, agrees on every state."""
    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    for pol in ("none", "host", "detour", "both"):
        assert all(r.acyclic for r in check_failures(fab, "cables", pol))
    reps = check_failures(fab, "cable-pairs", "detour")
    cyclic = [r for r in reps if not r.acyclic]
    assert len(reps) == 120 and 0 < len(cyclic) < 120
    from testbed.congestion import deadlock
    from testbed.fabric import failures as fl

    n = fab.n_gpus * fab.ports_per_gpu
    src, dst = np.array([(a, b) for a in range(n) for b in range(n) if a != b]).T
    for f, r in zip(deadlock.failure_cases(fab, "cable-pairs"), reps):
        tables = fl.degrade(fab, f, "detour").tables
        edges, _ = dependencies(fab, tables)
        assert nx.is_directed_acyclic_graph(nx.DiGraph(list(edges))) == r.acyclic, r.state
        # a dependency cycle, not a forwarding loop: every packet still leaves the fabric
        assert (walk(fab, src, dst, 49152, tables=tables).n_hops != -2).all(), r.state


def test_cli_exit_codes_and_json(capsys):
    assert main(["deadlock", "zcube:n=4,gpus_per_server=4", "--failures", "cables"]) == 0
    assert "no cyclic dependency" in capsys.readouterr().out
    assert (
        main(["deadlock", "zcube:n=4,gpus_per_server=4", "--failures", "cable-pairs", "--repair", "detour", "--json"])
        == 3
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["deadlock_free"] is False and doc["results"][1]["cyclic_states"] > 0
    assert main(["deadlock", "zcube:n=4", "--failures", "bogus"]) == 2
    assert "valid: none, cables" in capsys.readouterr().err
    assert np.isfinite(doc["results"][0]["max_dependencies"])
