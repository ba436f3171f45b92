"""Emulation settings, host configuration and the cabling check — offline, no root."""

import pytest

from testbed.emulation.config import EmulationConfig, EmulationError, tc_commands
from testbed.emulation.network import host_script, pick_miswire, switch_side_links
from testbed.emulation.wiring import blueprint, compare, discovered
from testbed.fabric import build_fabric

Z4 = build_fabric("zcube:n=4")


def test_rates_above_what_the_emulator_honours_are_refused():
    with pytest.raises(EmulationError, match="cannot honour more than 1000 Mb/s"):
        EmulationConfig(rate_scale=1e-2).validate(Z4)  # 2 Gb/s links
    EmulationConfig(rate_scale=5e-3).validate(Z4)  # 1000 Mb/s: ok


def test_no_delay_or_loss_options_exist():
    """This kernel has no netem: zlab offers no option it could not honour."""
    with pytest.raises(TypeError):
        EmulationConfig(delay_ms=1.0)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"mtu_bytes": 100}, "mtu_bytes"),
        ({"queue_limit_pkts": 0}, "queue_limit"),
        ({"rate_scale": 0}, "rate_scale must be > 0"),
        ({"rate_scale": 1e-10}, "below 0.1 Mb/s"),
    ],
)
def test_bad_settings(kw, message):
    with pytest.raises(EmulationError, match=message):
        EmulationConfig(**kw).validate(Z4)


def test_tc_commands_shape_and_bound_the_queue():
    cmds = tc_commands("za0-p1", 20_000_000, 1500, 321, 1138)
    assert cmds[0] == "qdisc replace dev za0-p1 root handle 1: htb default 1"
    assert "rate 20000000bit ceil 20000000bit" in cmds[1] and "quantum 1514" in cmds[1]
    assert "burst 1138 cburst 1138" in cmds[1]  # one frame: nothing passes unshaped
    assert cmds[2].endswith("pfifo limit 321")


def test_zcube_host_routes_follow_the_address_rule():
    script = host_script(Z4, 0, EmulationConfig())
    # cons (g0-p0, 10.1.0.1) reaches every other GPU's rail address (plane 2); rail reaches cons addresses
    assert "route add 10.2.0.0/16 dev g0-p0 src 10.1.0.1" in script
    assert "route add 10.1.0.0/16 dev g0-p1 src 10.2.0.1" in script
    assert "neigh replace 10.2.0.6 lladdr 02:5a:02:00:00:06 dev g0-p0 nud permanent" in script
    assert "neigh replace 10.1.0.6 lladdr 02:5a:01:00:00:06 dev g0-p1 nud permanent" in script
    assert "addr add 10.1.0.1/32 dev g0-p0" in script
    assert script.count("route add") == 2  # one per plane, not one per destination
    assert script.count("neigh replace") == 2 * 15  # each port: every other GPU's address it sends to
    # the shortcut reaches a same-switch peer's address from one port and, through the other switch, from the
    # other: a routing table chooses by destination alone, so the emulation says so before bringing anything up
    # (before: the host script failed with "File exists" at bring-up)
    with pytest.raises(EmulationError, match="g1-p0.s address is reached from both g0-p0 and g0-p1.*zcube shortcut=1"):
        EmulationConfig().validate(build_fabric("zcube:n=4,shortcut=1"))


def _lpm(cmds: list[str], addr: str) -> str | None:
    """An independent reading of the emitted routes: the longest prefix holding `addr` decides;
    returns the device, or None for no route or an unreachable route."""
    import ipaddress

    best = None
    for c in cmds:
        w = c.split()
        if w[:2] != ["route", "add"]:
            continue
        kind, net = ("unreachable", w[3]) if w[2] == "unreachable" else ("dev", w[2])  # route add [unreachable] NET
        n = ipaddress.IPv4Network(net)
        if ipaddress.IPv4Address(addr) in n and (best is None or n.prefixlen > best[0].prefixlen):
            best = (n, None if kind == "unreachable" else w[w.index("dev") + 1])
    return best[1] if best else None


@pytest.mark.parametrize(
    "spec",
    ["zcube:n=4", "zcube:n=8,gpus=32", "zcube:n=6", "roft:gpus=16,gpus_per_server=4,segments=2"],
)
def test_prefix_routes_send_every_address_where_the_address_rule_does(spec):
    """Per GPU, every other GPU's every address leaves through exactly the port the address rule
    (paths.dst_address, one destination at a time) gives it, and an address the rule gives no
    port has no usable route: the prefixes change how many commands, never where a frame goes."""
    import numpy as np

    from testbed.fabric.hostconf import ip_commands
    from testbed.fabric.paths import dst_address

    fab = build_fabric(spec)
    gp = fab.n_gpus * fab.ports_per_gpu
    for gpu in range(fab.n_gpus):
        cmds = ip_commands(fab, gpu, 1500)
        want = {}
        for k in range(fab.ports_per_gpu):
            p = fab.gpu_port(gpu, k)
            for g in range(fab.n_gpus):
                if g != gpu:
                    want[int(dst_address(fab, np.array([gpu]), p.role, np.array([g]))[0])] = p.name
        for q in fab.ports[:gp]:
            if q.node != fab.gpu_port(gpu, 0).node:
                assert _lpm(cmds, q.ip) == want.get(q.id), (spec, gpu, q.name)
        assert len([c for c in cmds if c.startswith("route")]) <= fab.ports_per_gpu * 2 + fab.n_gpus
        # the frame carries the destination NIC's own MAC, from the port its route leaves through
        neigh = {c.split()[2]: (c.split()[4], c.split()[6]) for c in cmds if c.startswith("neigh")}
        assert neigh == {fab.ports[a].ip: (fab.ports[a].mac, dev) for a, dev in want.items()}


def test_miswire_swaps_far_ends():
    first, second = pick_miswire(Z4, None)[0]
    pairs = switch_side_links(Z4, [(first, second)])
    l1, l2 = Z4.links[first], Z4.links[second]
    assert pairs[first] == (l1.a, l2.b) and pairs[second] == (l2.a, l1.b)
    assert pick_miswire(Z4, "za0-p5,za1-p5") == [(32, 36)]
    with pytest.raises(EmulationError, match="neither a switch port on a fabric cable nor a GPU port"):
        pick_miswire(Z4, "za0-p1,za1-p5")
    (nic,) = pick_miswire(Z4, "g0-p0,g1-p0")  # NIC cables: the GPU ports end up on each other's switch port
    pairs = switch_side_links(Z4, [nic])
    assert Z4.ports[pairs[nic[0]][0]].name == "g0-p0" and Z4.ports[pairs[nic[0]][1]].name == "za0-p2"
    with pytest.raises(EmulationError, match="give two of the same kind"):
        pick_miswire(Z4, "g0-p0,za1-p5")


def test_wiring_compare_names_both_ends_of_a_swap():
    bp = blueprint(Z4)
    seen = set(bp)
    a, b = frozenset({"za0-p5", "zb0-p5"}), frozenset({"za1-p6", "zb1-p6"})
    assert {a, b} <= bp
    seen -= {a, b}
    seen |= {frozenset({"za0-p5", "zb1-p6"}), frozenset({"za1-p6", "zb0-p5"})}
    rep = compare(bp, seen)
    assert not rep["ok"] and rep["missing"] == [] and rep["extra"] == []
    assert rep["swapped"] == [
        {
            "expected": ["za0-p5 <-> zb0-p5", "za1-p6 <-> zb1-p6"],
            "found": ["za0-p5 <-> zb1-p6", "za1-p6 <-> zb0-p5"],
            "cables": ["za0-p5 <-> zb0-p5", "za1-p6 <-> zb1-p6"],
        }
    ]  # no patch list: by port
    # with the patch list of the fabric's layout, cables are named by id and rack position
    from testbed.fabric import layout

    patch = layout.read_patch_list(layout.patch_list_csv(Z4, layout.plan(Z4)))
    rep = compare(bp, seen, patch)
    ids = {frozenset((Z4.ports[l.a].name, Z4.ports[l.b].name)): f"C{l.id:06d}" for l in Z4.links}
    first, second = rep["swapped"][0]["cables"]
    assert first.startswith(ids[a] + " (") and second.startswith(ids[b] + " (")
    assert "R00.00/U1 <-> zb0-p5 R00.00/U9" in first  # za0 at U1, zb0 at U9 of the network rack
    rep = compare(bp, bp - {a}, patch)
    assert rep["missing_cables"] == [f"{ids[a]} (za0-p5 R00.00/U1 <-> zb0-p5 R00.00/U9)"]
    rep = compare(bp, bp - {a})
    assert rep["missing"] == ["za0-p5 <-> zb0-p5"] and not rep["ok"]
    assert compare(bp, set(bp))["ok"]


def test_discovered_from_lldp_records():
    recs = [
        {"src": "za0", "src_port": 5, "dst": "zb0", "dst_port": 5},
        {"src": "zb0", "src_port": 5, "dst": "za0", "dst_port": 5},
        {"src": None, "src_port": 1, "dst": "za0", "dst_port": 2},
    ]
    assert discovered(recs) == {frozenset({"za0-p5", "zb0-p5"})}


def test_lldp_goes_only_to_switch_facing_ports():
    """A GPU's kernel discards LLDP and counts a drop: discovery must not send it there."""
    from testbed.emulation.runfolder import flows_document

    for spec in ("zcube:n=4", "roft:gpus=16,gpus_per_server=4,segments=2"):
        fab = build_fabric(spec)
        doc = flows_document(fab)
        total = sum(len(v["lldp_ports"]) for v in doc["switches"].values())
        assert total == 2 * fab.counts()["fabric_links"]
        for sw in fab.switches:
            for num in doc["switches"][sw.name]["lldp_ports"]:
                peer = fab.ports[fab.peer_port(fab.switch_port_ids[sw.id][num])]
                assert fab.nodes[peer.node].role == "switch"


def test_nic_cables_are_checked_and_a_swap_names_both_gpu_ports():
    """Every cable is in the blueprint (36 of 108 used to be, on ZCube(6,2)): GPU ports announce
    themselves with their own LLDP frame and the switch punts it with its in_port."""
    z6 = build_fabric("zcube:n=6")
    assert len(blueprint(z6)) == 108
    bp = blueprint(Z4)
    recs = [
        {"src_host_port": "g0-p0", "dst": "za0", "dst_port": 2},
        {"src_host_port": "g1-p0", "dst": "za0", "dst_port": 1},
    ]
    seen = (bp - {frozenset({"g0-p0", "za0-p1"}), frozenset({"g1-p0", "za0-p2"})}) | discovered(recs)
    rep = compare(bp, seen)
    assert rep["swapped"] == [
        {
            "expected": ["g0-p0 <-> za0-p1", "g1-p0 <-> za0-p2"],
            "found": ["g0-p0 <-> za0-p2", "g1-p0 <-> za0-p1"],
            "cables": ["g0-p0 <-> za0-p1", "g1-p0 <-> za0-p2"],
        }
    ]


def test_host_lldp_frame_is_what_the_controller_parses():
    from controllers.zlab_routes import parse_lldp
    from testbed.emulation.wiring import host_lldp_frame

    frame = host_lldp_frame("g12-p1", "02:5a:02:00:00:0d")
    assert frame[12:14] == b"\x88\xcc" and frame[:6] == bytes.fromhex("0180c200000e")
    assert parse_lldp(frame) == ("host", "g12-p1")


def test_controller_frameworks_run_the_same_app(tmp_path, monkeypatch):
    from testbed.emulation import up
    from testbed.emulation.config import EmulationError

    osken = up.controller_command("os-ken", tmp_path, 6653, ["--stats-interval", "1"])
    assert osken[1:3] == ["-m", "controllers.launch"] and osken[-2:] == ["--stats-interval", "1"]
    monkeypatch.setattr(up, "RYU_PYTHON", tmp_path / "absent" / "python")
    with pytest.raises(EmulationError, match="provision.sh"):
        up.controller_command("ryu", tmp_path, 6653, [])
    (tmp_path / "py").write_text("")
    monkeypatch.setattr(up, "RYU_PYTHON", tmp_path / "py")
    assert up.controller_command("ryu", tmp_path, 7000, [])[:3] == [
        str(tmp_path / "py"),
        "-m",
        "controllers.launch_ryu",
    ]
    with pytest.raises(EmulationError, match="valid: os-ken, ryu"):
        up.controller_command("nox", tmp_path, 6653, [])


def test_the_controller_statistics_period_grows_with_the_tables():
    """At most STATS_ENTRIES_PER_S flow entries polled a second: 1,024 GPUs at 1 s (67,712 entries a
    second) saturated the controller and ovs-vswitchd and dropped switches' channels, and a 256-GPU
    ROFT's 20,816 entries every 5 s held the controller at 80-89 % of a core in a failure replay."""
    from testbed.emulation.runfolder import flows_document
    from testbed.emulation.up import STATS_ENTRIES_PER_S, stats_period_s

    def entries(spec):
        return sum(len(v["entries"]) + 2 for v in flows_document(build_fabric(spec))["switches"].values())

    assert entries("zcube:n=32") == 67_712 and entries("zcube:n=16") == 8_768 and entries("zcube:n=4") == 176
    assert stats_period_s(1.0, entries("zcube:n=4")) == 1.0  # the requested period where it is cheap
    assert stats_period_s(5.0, entries("zcube:n=16")) == 8_768 / STATS_ENTRIES_PER_S > 5  # 256 GPUs: longer
    assert stats_period_s(1.0, entries("zcube:n=32")) == 67_712 / STATS_ENTRIES_PER_S > 60
    assert stats_period_s(120.0, entries("zcube:n=32")) == 120.0  # a run's longer period stays


def _table_wait(readings, timeout_s=120.0):
    """A LiveFabric whose switches report `readings`, one per poll."""
    from types import SimpleNamespace

    from testbed.emulation import up

    live = up.LiveFabric.__new__(up.LiveFabric)
    live.table_timeout_s, log = timeout_s, []
    live.log = log.append
    live.controller = SimpleNamespace(poll=lambda: None)
    live.expected_flow_counts = lambda: {"s1": 100, "s2": 100}
    it, asked = iter(readings), []

    def counts(names=None):
        asked.append(names)
        return {k: v for k, v in next(it).items() if names is None or k in names}

    live.installed_counts = counts
    live.asked = asked
    return live, log


def test_a_slow_install_that_progresses_is_waited_for_and_a_stalled_one_fails(monkeypatch):
    """The limit is on time without progress: a 1,024-GPU ROFT's two million entries outlast any
    fixed limit while still going in."""
    from testbed.emulation import up

    clock = {"t": 0.0}
    monkeypatch.setattr(up.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(up.time, "sleep", lambda s: clock.__setitem__("t", clock["t"] + 10))
    slow = [{"s1": 10 * k, "s2": 0} for k in range(1, 11)] + [{"s1": 100, "s2": 100}] * 2
    live, log = _table_wait(slow, timeout_s=15)
    live.wait_tables()  # 100 s in all, never 15 s without a new entry
    assert clock["t"] == 100 and any("tables: 40/200 entries after 30 s" in m for m in log)
    # a full switch is not read again (its table walk costs ovs-vswitchd) until the final reading of all
    assert live.asked[-3:] == [["s1", "s2"], ["s2"], None]

    clock["t"] = 0.0
    lost = [{"s1": 100, "s2": 100}, {"s1": 99, "s2": 100}, {"s1": 100, "s2": 100}, {"s1": 100, "s2": 100}]
    live, _ = _table_wait(lost, timeout_s=15)
    live.wait_tables()  # the final reading of every switch must match, not the switches one by one
    assert live.asked == [["s1", "s2"], None, ["s1"], None]

    clock["t"] = 0.0
    stalled = [{"s1": 50, "s2": 0}] * 13
    live, _ = _table_wait(stalled, timeout_s=15)
    with pytest.raises(up.LabFailure, match=r"no progress for 15 s \(50/200 entries after 20 s\).*'s2': '0/100'"):
        live.wait_tables()
