"""Failure schedules resolved offline: steps, states and their tables, spec errors, the
`cable:busiest` choice, and fast-failover protection worked by hand on ZCube(4,2) and ROFT-16."""

import numpy as np
import pytest

from testbed.emulation import failplan
from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve
from testbed.experiment.spec import ExperimentSpecError
from testbed.fabric import build_fabric
from testbed.fabric import failures as fl
from testbed.fabric.fastfailover import protection
from testbed.fabric.paths import dst_address, forwarding_tables, walk

Z, R = "zcube:n=4,gpus_per_server=4", "roft:gpus=16,gpus_per_server=4,segments=2"
DETECT = {"probe_hz": 10, "probe_window": 10, "probe_min_lost": 3, "probe_timeout_s": 1.5, "poll_s": 0.1}


def all_flows(fab):
    """Every (GPU port, destination address) the address rule uses, between different GPUs."""
    gp = fab.n_gpus * fab.ports_per_gpu
    src, dst = [], []
    for sp in range(gp):
        g, role = fab.port_node[sp], fab.ports[sp].role
        others = np.array([h for h in range(fab.n_gpus) if h != g])
        src += [sp] * len(others)
        dst += list(dst_address(fab, np.full(len(others), g), role, others))
    return np.array(src), np.array(dst)


def test_expand_flap_and_timed_gray():
    steps = failplan.expand(
        [
            {"at_emulated_s": 2.0, "action": "flap", "target": "cable:za0,zb0", "period_emulated_s": 1.0, "count": 2},
            {
                "at_emulated_s": 0.5,
                "action": "gray",
                "target": "cable:za1,zb1",
                "loss_percent": 5,
                "duration_emulated_s": 4,
            },
        ]
    )
    assert [(s.t_emulated_s, s.action) for s in steps] == [
        (0.5, "gray"),
        (2.0, "down"),
        (2.5, "up"),
        (3.0, "down"),
        (3.5, "up"),
        (4.5, "clear"),
    ]
    assert steps[0].loss_percent == 5


def test_cable_state_tables_route_around_the_dead_cable():
    fab = build_fabric(Z)
    doc = failplan.document(
        fab, [{"at_emulated_s": 1, "action": "down", "target": "cable:za0,zb0"}], "controller", DETECT, "zcube"
    )
    (state,) = doc["states"]
    link = fab.links[state["down_links"][0]]
    dead = {(fab.nodes[fab.ports[p].node].name, fab.ports[p].number) for p in (link.a, link.b)}
    assert doc["policy"] == "detour" and doc["steps"][0]["ifaces"] == ["za0-p5", "zb0-p5"]
    for sw, entries in state["switches"].items():
        assert not any((sw, e["out_port"]) in dead for e in entries), sw
    # by hand: za0 reached zb0's rail addresses (g0, g4, g8, g12 p1) only over the dead cable; now it
    # sends them to another B switch, which holds a transit entry for them toward an A switch other than za0
    rail = {fab.node_by_name[f"g{k}"].id for k in (0, 4, 8, 12)}
    za0 = {e["ipv4_dst"]: e["out_port"] for e in state["switches"]["za0"]}
    for g in rail:
        ip = fab.ports[2 * g + 1].ip
        assert za0[ip] in (6, 7, 8)  # the ports toward zb1..zb3
        mid = f"zb{za0[ip] - 5}"
        transit = {e["ipv4_dst"]: e["out_port"] for e in state["switches"][mid]}[ip]
        assert transit in (6, 7, 8)  # zbX ports 5..8 face za0..za3: not back to za0
    # every GPU port pair the model still connects is delivered by the state's tables
    tables = failplan.degraded_tables(fab, doc, state)
    src, dst = all_flows(fab)
    w = walk(fab, src, dst, 50000, tables=tables)
    assert (w.n_hops > 0).all()
    assert not ((w.dlinks // 2) == link.id).any()


def test_switch_state_and_roft_spine():
    fab = build_fabric(R)
    doc = failplan.document(
        fab, [{"at_emulated_s": 1, "action": "down", "target": "switch:sp0"}], "controller", DETECT, "roft"
    )
    (state,) = doc["states"]
    assert state["failed_switches"] == ["sp0"] and "sp0" not in state["switches"]
    assert len(state["down_links"]) == 8  # one cable to each of the 8 leaves
    peer = {}
    for l in fab.links:
        a, b = fab.ports[l.a], fab.ports[l.b]
        peer[(a.node, a.number)], peer[(b.node, b.number)] = fab.nodes[b.node].name, fab.nodes[a.node].name
    for lf in (sw for sw in fab.switches if not sw.name.startswith("sp")):
        towards = {peer[(lf.id, e["out_port"])] for e in state["switches"][lf.name]}
        assert "sp0" not in towards and "sp1" in towards  # the ECMP groups shrank to the other spine
    assert sorted(doc["steps"][0]["ifaces"]) == sorted(
        p.name for p in fab.ports if p.node == fab.node_by_name["sp0"].id and fab.port_link[p.id] >= 0
    )


@pytest.mark.parametrize(
    "event, words",
    [
        ({"at_emulated_s": 1, "action": "gray", "target": "cable:g0-p0", "loss_percent": 5}, "switch-to-switch"),
        ({"at_emulated_s": 1, "action": "gray", "target": "cable:za0,zb0"}, "loss_percent"),
        ({"at_emulated_s": 1, "action": "down", "target": "cable:za0,zb0", "loss_percent": 5}, "only for action gray"),
        ({"at_emulated_s": 1, "action": "flap", "target": "cable:za0,zb0"}, "period_emulated_s"),
        ({"at_emulated_s": 1, "action": "down", "target": "switch:nope"}, "no switch 'nope'"),
    ],
)
def test_bad_events_name_the_problem(event, words):
    with pytest.raises(failplan.FailurePlanError, match=words):
        failplan.document(build_fabric(Z), [event], "controller", DETECT, "zcube")


def test_host_recovery_needs_two_ports():
    with pytest.raises(failplan.FailurePlanError, match="one port"):
        failplan.document(
            build_fabric(R), [{"at_emulated_s": 1, "action": "down", "target": "switch:sp0"}], "host", DETECT, "roft"
        )


def test_spec_errors_and_busiest():
    base = ["repeats=1", "workload.requests=60", "workload.offered_load=0.5"]
    with pytest.raises(ExperimentSpecError, match="failures.events: nope is not a fabric"):
        resolve(especs.load(None, base + ["failures.events={nope: []}"]))
    with pytest.raises(ExperimentSpecError, match="after the last transfer"):
        resolve(
            especs.load(
                None, base + ['failures.events={zcube: [{at_emulated_s: 99, action: down, target: "cable:za0,zb0"}]}']
            )
        )
    exp = resolve(
        especs.load(
            None, base + ['failures.events={zcube: [{at_emulated_s: 4, action: down, target: "cable:busiest"}]}']
        )
    )
    fr = exp.fabrics["zcube"]
    target = fr.failplan["steps"][0]["target"]
    assert target.startswith("cable:z") and exp.fabrics["roft"].failplan is None
    # the chosen cable carries a QP whose message is in flight at 4 s by the plan's schedule
    link = fr.failplan["steps"][0]["links"][0]
    hit = fl.crossing(fr.fabric, [(s, d, sp) for (s, d), sp in fr.repeats[0].qps.items()], [link])
    assert any(hit)


def test_fast_failover_zcube_by_hand():
    fab = build_fabric(Z)
    prot = protection(fab, "detour")
    H = forwarding_tables(fab)
    assert prot["rejected"] == [] and min(prot["coverage"].values()) >= 0.9
    za0 = H.switch_rows[fab.node_by_name["za0"].id]
    dead = next(p for p in fab.ports if p.name == "za0-p5").id  # toward zb0
    rail_g0 = 1  # g0-p1's address: delivered by zb0
    backup = prot["backups"][za0][rail_g0][dead]
    mid = fab.nodes[fab.port_node[next(p for p in fab.ports if p.id == backup).id]]
    assert mid.name == "za0"  # the backup leaves za0 ...
    # ... toward a B switch that holds a pre-installed transit entry for g0-p1
    peer_node = {
        fab.ports[l.b].node if fab.ports[l.a].id == backup else fab.ports[l.a].node
        for l in fab.links
        if backup in (l.a, l.b)
    }.pop()
    assert fab.nodes[peer_node].name in ("zb1", "zb2", "zb3")
    assert (H.switch_rows[peer_node], rail_g0) in prot["transit"]


def test_fast_failover_roft_spines_cannot_repair_their_leaf():
    fab = build_fabric(R)
    prot = protection(fab, "ecmp")
    H = forwarding_tables(fab)
    spines = {H.switch_rows[sw.id] for sw in fab.switches if sw.name.startswith("sp")}
    leaves = {H.switch_rows[sw.id] for sw in fab.switches} - spines
    assert not (set(prot["backups"]) & spines)  # a spine has no other way down to a leaf
    assert leaves <= set(prot["backups"])  # every leaf protects its uplinks by the other spine
    assert prot["rejected"] == [] and all(0.9 < c < 1 for c in prot["coverage"].values())
