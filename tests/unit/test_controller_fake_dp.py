"""The OpenFlow app against a fake datapath: the flow entries it emits are exactly the
model's tables, and a packet matched against them follows the model's route."""

import functools
import json

import pytest

from controllers import zlab_routes
from testbed.emulation.runfolder import flows_document
from testbed.fabric import build_fabric, ids
from testbed.fabric.openflow import match_flow_entries
from testbed.fabric.paths import route

try:
    from os_ken.ofproto import ofproto_v1_3 as ofp
    from os_ken.ofproto import ofproto_v1_3_parser as parser
except ImportError:  # pragma: no cover - Ryu
    from ryu.ofproto import ofproto_v1_3 as ofp
    from ryu.ofproto import ofproto_v1_3_parser as parser


def _spawn_installer_only(fn, *args, **kwargs):
    """hub.spawn in these tests: the controller's installer runs at once (the recovery is what they
    check); its loops (probes, polls) do not run."""
    if getattr(fn, "__name__", "") == "_installer":
        fn(*args, **kwargs)


class FakeDatapath:
    ofproto = ofp
    ofproto_parser = parser

    def __init__(self, dpid):
        self.id = dpid
        self.sent = []

    def send_msg(self, msg):
        self.sent.append(msg)

    def set_xid(self, msg):  # as os-ken's Datapath: a fresh transaction id per message
        self.xid = getattr(self, "xid", 0) + 1
        msg.set_xid(self.xid)
        return self.xid


class Event:
    def __init__(self, dp):
        self.msg = type("Msg", (), {"datapath": dp})()


@pytest.fixture
def app(tmp_path, monkeypatch):
    def make(spec):
        fab = build_fabric(spec)
        (tmp_path / "flows.json").write_text(json.dumps(flows_document(fab)))
        monkeypatch.setenv("ZLAB_RUN_DIR", str(tmp_path))
        monkeypatch.setattr(zlab_routes.hub, "spawn", _spawn_installer_only)
        return fab, zlab_routes.ZlabRoutes()

    return make


def entries_from_mods(mods):
    """Turn emitted OFPFlowMods back into the model's entry form."""
    out = []
    for m in mods:
        if not isinstance(m, parser.OFPFlowMod) or m.command != ofp.OFPFC_ADD or m.priority in (0, 65000):
            continue
        f = dict(m.match.items())
        dst, mask = f["ipv4_dst"] if isinstance(f["ipv4_dst"], tuple) else (f["ipv4_dst"], "255.255.255.255")
        udp = list(f["udp_src"]) if "udp_src" in f else None
        (action,) = m.instructions[0].actions
        out.append(
            {"priority": m.priority, "ipv4_dst": dst, "ipv4_mask": mask, "udp_src": udp, "out_port": action.port}
        )
    return out


@pytest.mark.parametrize("spec", ["zcube:n=4", "roft:gpus=16,gpus_per_server=4,segments=2"])
def test_emitted_entries_equal_the_model_tables(app, spec):
    fab, a = app(spec)
    want = flows_document(fab)["switches"]
    for sw in fab.switches:
        dp = FakeDatapath(sw.dpid)
        a.on_features(Event(dp))
        mods = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod)]
        assert mods[0].command == ofp.OFPFC_DELETE  # stale entries of ours go first
        miss = [m for m in mods if m.priority == 0]
        assert len(miss) == 1 and miss[0].instructions == []  # table-miss: drop (and count)
        lldp = [m for m in mods if m.priority == 65000]
        assert dict(lldp[0].match.items()) == {"eth_type": 0x88CC}
        assert entries_from_mods(mods) == want[sw.name]["entries"]
        assert isinstance(dp.sent[-2], parser.OFPBarrierRequest)
        for m in mods:  # encodes as valid OpenFlow 1.3
            m.datapath = dp
            m.serialize()


def test_installed_entries_route_like_the_model(app):
    fab, a = app("roft:gpus=16,gpus_per_server=4,segments=2")
    tables = {}
    for sw in fab.switches:
        dp = FakeDatapath(sw.dpid)
        a.on_features(Event(dp))
        tables[sw.name] = entries_from_mods(dp.sent)
    for src, dst in (("g0-p0", "g8"), ("g1-p0", "g14"), ("g3-p0", "g7"), ("g0-p0", "g4")):
        for sport in range(49152, 49152 + 48, 5):
            r = route(fab, src, dst, sport=sport)
            for hop in r.hops:
                e = match_flow_entries(tables[hop.switch], r.dst_ip, sport)
                assert e["out_port"] == hop.out_port, (src, dst, sport, hop)


def test_unknown_dpid_is_ignored(app):
    fab, a = app("zcube:n=4")
    dp = FakeDatapath(0xDEAD)
    a.on_features(Event(dp))
    assert dp.sent == []


def test_lldp_frame_round_trip():
    frame = zlab_routes.lldp_frame(0xA00000000003, 7)
    assert zlab_routes.parse_lldp(frame) == (0xA00000000003, 7)


def test_app_refuses_a_foreign_flows_file(tmp_path, monkeypatch):
    (tmp_path / "flows.json").write_text('{"schema": "other"}')
    monkeypatch.setenv("ZLAB_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(zlab_routes.hub, "spawn", _spawn_installer_only)
    with pytest.raises(RuntimeError, match="unknown schema"):
        zlab_routes.ZlabRoutes()


# ---- failures: detection, reroute by diff, fast-failover groups, link probes ----------------------

from controllers.recovery import ProbeLoss, group_id  # noqa: E402
from testbed.emulation import failplan  # noqa: E402

DETECT = {"probe_hz": 10, "probe_window": 10, "probe_min_lost": 3, "probe_timeout_s": 1.5, "poll_s": 0.1}


@pytest.fixture
def failing_app(tmp_path, monkeypatch):
    def make(spec, events, recovery="controller", install_mods_per_s=0.0):
        fab = build_fabric(spec)
        doc = failplan.document(fab, events, recovery, DETECT, install_mods_per_s=install_mods_per_s)
        (tmp_path / "flows.json").write_text(json.dumps(flows_document(fab)))
        (tmp_path / "failures.json").write_text(json.dumps(doc))
        monkeypatch.setenv("ZLAB_RUN_DIR", str(tmp_path))
        monkeypatch.setattr(zlab_routes.hub, "spawn", _spawn_installer_only)
        a = zlab_routes.ZlabRoutes()
        dps = {}
        for sw in fab.switches:
            dps[sw.name] = FakeDatapath(sw.dpid)
            a.on_features(Event(dps[sw.name]))
        return fab, doc, a, dps

    return make


def apply_mods(table: dict, mods) -> dict:
    """What a switch holds after the mods: (priority, match) -> out port (strict delete, add overwrites)."""
    table = dict(table)
    for m in mods:
        if not isinstance(m, parser.OFPFlowMod) or m.priority in (0, 65000):
            continue
        f = dict(m.match.items())
        if "ipv4_dst" not in f:
            continue
        dst, mask = f["ipv4_dst"] if isinstance(f["ipv4_dst"], tuple) else (f["ipv4_dst"], "255.255.255.255")
        key = (m.priority, dst, mask, tuple(f["udp_src"]) if "udp_src" in f else None)
        if m.command == ofp.OFPFC_DELETE_STRICT:
            table.pop(key, None)
        elif m.command == ofp.OFPFC_ADD:
            (action,) = m.instructions[0].actions
            table[key] = action.port if isinstance(action, parser.OFPActionOutput) else ("group", action.group_id)
    return table


def as_table(entries) -> dict:
    return {
        (e["priority"], e["ipv4_dst"], e["ipv4_mask"], tuple(e["udp_src"]) if e["udp_src"] else None): e["out_port"]
        for e in entries
    }


def port_status(a, dp, port_no, down):
    desc = parser.OFPPort(
        port_no=port_no,
        hw_addr="00:00:00:00:00:01",
        name=b"x",
        config=0,
        state=ofp.OFPPS_LINK_DOWN if down else ofp.OFPPS_LIVE,
        curr=0,
        advertised=0,
        supported=0,
        peer=0,
        curr_speed=0,
        max_speed=0,
    )
    ev = type("Ev", (), {"msg": type("Msg", (), {"datapath": dp, "desc": desc})()})()
    a.on_port_status(ev)


@pytest.mark.parametrize(
    "spec, target",
    [("zcube:n=4,gpus_per_server=4", "cable:za0,zb0"), ("roft:gpus=16,gpus_per_server=4,segments=2", "cable:l0r0,sp0")],
)
def test_port_down_installs_exactly_the_models_degraded_tables_and_back(failing_app, spec, target):
    fab, doc, a, dps = failing_app(spec, [{"at_emulated_s": 1, "action": "down", "target": target}])
    healthy = {sw: as_table(v["entries"]) for sw, v in flows_document(fab)["switches"].items()}
    (state,) = doc["states"]
    link = fab.links[state["down_links"][0]]
    end = fab.ports[link.a]
    for dp in dps.values():
        dp.sent.clear()
    port_status(a, dps[fab.nodes[end.node].name], end.number, down=True)
    for sw, dp in dps.items():
        want = as_table(state["switches"].get(sw, flows_document(fab)["switches"][sw]["entries"]))
        assert apply_mods(healthy[sw], dp.sent) == want, sw
        if sw in state["switches"]:
            assert isinstance(dp.sent[-1], parser.OFPBarrierRequest)
    for dp in dps.values():
        dp.sent.clear()
    port_status(a, dps[fab.nodes[end.node].name], end.number, down=False)
    for sw, dp in dps.items():
        want = as_table(state["switches"].get(sw, flows_document(fab)["switches"][sw]["entries"]))
        assert apply_mods(want, dp.sent) == healthy[sw], sw


def as_entries(table: dict) -> list[dict]:
    """An as_table()/apply_mods() table back in the model's entry form, for the real matcher."""
    return [
        {
            "priority": key[0],
            "ipv4_dst": key[1],
            "ipv4_mask": key[2],
            "udp_src": list(key[3]) if key[3] is not None else None,
            "out_port": port,
        }
        for key, port in table.items()
    ]


def _lookup(entries: list[dict], ip: str, sport: int):
    """The out port a switch holding `entries` gives a packet (the model's own matcher), or None."""
    e = match_flow_entries(entries, ip, sport)
    return None if e is None else e["out_port"]


@pytest.mark.parametrize(
    "spec, target",
    [("zcube:n=4,gpus_per_server=4", "cable:za0,zb0"), ("roft:gpus=16,gpus_per_server=4,segments=2", "cable:l0r0,sp0")],
)
def test_reroute_is_make_before_break(failing_app, spec, target, monkeypatch):
    """After every single FlowMod of a reroute, each (destination, UDP source port) that has a route
    both before and after still has one, on a port the old or the new table uses: a switch
    applying the mods one by one never drops a frame whose route survives the failure.

    A mod changes the answer only for the packets its entry matches, so after each mod only those
    are looked up again (with the real matcher, on the whole table); the rest keep their answer.
    The matcher parses each dotted address per entry; a cache of that parse keeps the test fast."""
    monkeypatch.setattr(ids, "ip_to_int", functools.lru_cache(maxsize=None)(ids.ip_to_int))
    fab, doc, a, dps = failing_app(spec, [{"at_emulated_s": 1, "action": "down", "target": target}])
    (state,) = doc["states"]
    end = fab.ports[fab.links[state["down_links"][0]].a]
    for dp in dps.values():
        dp.sent.clear()
    port_status(a, dps[fab.nodes[end.node].name], end.number, down=True)
    packets = [
        (p.ip, sport)
        for p in fab.ports
        if fab.nodes[p.node].role == "gpu" and p.ip
        for sport in range(49152, 49152 + 64)
    ]
    assert packets
    changed = 0
    for sw in state["switches"]:
        old = as_table(flows_document(fab)["switches"][sw]["entries"])
        new = as_table(state["switches"][sw])
        before = {pk: _lookup(as_entries(old), *pk) for pk in packets}
        after = {pk: _lookup(as_entries(new), *pk) for pk in packets}
        now = dict(before)
        table = dict(old)
        for mod in dps[sw].sent:
            nxt = apply_mods(table, [mod])
            touched = as_entries(
                {k: table.get(k, nxt.get(k)) for k in table.keys() | nxt.keys() if table.get(k) != nxt.get(k)}
            )
            table = nxt
            if not touched:
                continue
            entries = as_entries(table)
            for pk in packets:
                if any(match_flow_entries([e], *pk) for e in touched):
                    now[pk] = _lookup(entries, *pk)
                    if before[pk] is not None and after[pk] is not None:
                        assert now[pk] in (before[pk], after[pk]), (sw, pk)
        changed += table != old
        assert table == new, sw
        assert now == after, sw  # the incremental answers end where the new table's do
    assert changed  # the failure did change tables


@pytest.mark.parametrize("mods_per_s", [0.0, 1000.0])
def test_a_paced_recovery_sends_no_faster_than_its_pace_and_installs_the_same(failing_app, monkeypatch, mods_per_s):
    """failures.install_mods_per_s: by any moment of the recovery, at most pace x elapsed + one chunk
    of flow-mods have gone out, the whole recovery lasts at least mods / pace, and the switches end
    with the model's degraded tables as unpaced; at pace 0 the controller never waits."""
    spec, target = "roft:gpus=16,gpus_per_server=4,segments=2", "cable:l0r0,sp0"
    fab, doc, a, dps = failing_app(
        spec, [{"at_emulated_s": 1, "action": "down", "target": target}], "controller", mods_per_s
    )
    assert doc["install_mods_per_s"] == mods_per_s
    (state,) = doc["states"]
    end = fab.ports[fab.links[state["down_links"][0]].a]
    clock, waits, sent = [50.0], [], []  # sent: (time, switch) of every flow-mod

    def sleep(s):
        assert s >= 0
        waits.append(s)
        clock[0] += s

    monkeypatch.setattr(zlab_routes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(zlab_routes.hub, "sleep", sleep)
    monkeypatch.setattr(zlab_routes, "MOD_CHUNK", 16)  # this small recovery (159 mods) in many chunks
    for name, dp in dps.items():
        dp.sent.clear()
        dp.send_msg = lambda msg, dp=dp, name=name: (
            dp.sent.append(msg),
            isinstance(msg, parser.OFPFlowMod) and sent.append((clock[0], name)),
        )
    port_status(a, dps[fab.nodes[end.node].name], end.number, down=True)
    n_mods = sum(isinstance(m, parser.OFPFlowMod) for dp in dps.values() for m in dp.sent)
    assert n_mods > zlab_routes.MOD_CHUNK  # more than one chunk, so the pace has something to hold back
    for sw, dp in dps.items():
        want = as_table(state["switches"].get(sw, flows_document(fab)["switches"][sw]["entries"]))
        healthy = as_table(flows_document(fab)["switches"][sw]["entries"])
        assert apply_mods(healthy, dp.sent) == want, sw
    if mods_per_s == 0:
        assert set(waits) == {0}
        return
    times = sorted(t for t, _ in sent)
    for k, t in enumerate(times):
        assert k + 1 <= mods_per_s * (t - 50.0) + zlab_routes.MOD_CHUNK + 1, (k, t)
    assert clock[0] - 50.0 >= n_mods / mods_per_s - 1e-9


@pytest.mark.parametrize(
    "target, want",
    [
        ("cable:l0r0,sp0", {"l0r0", "sp0"}),  # the cable's two switches
        ("switch:sp0", {"sp0"} | {f"l{s}r{r}" for s in (0, 1) for r in range(4)}),  # a dead switch, its neighbours
    ],
)
def test_port_state_poll_asks_only_the_switches_the_schedule_touches(failing_app, monkeypatch, target, want):
    """The port-state poll (the backup to port-status messages) asks the switches with a port at a
    scheduled cable, every poll_s; asking all 32 switches of a 256-GPU ROFT ten times a second held
    the controller at 80-90 % of a core."""
    spec = "roft:gpus=16,gpus_per_server=4,segments=2"
    fab, doc, a, dps = failing_app(spec, [{"at_emulated_s": 1, "action": "down", "target": target}])
    assert a.plan.poll_switches == frozenset(want)
    a.datapaths = {dp.id: dp for dp in dps.values()}
    a.plan.detect = dict(a.plan.detect, probe_hz=0)
    clock = [10.0]

    def sleep(s):
        clock[0] += s
        if clock[0] > 10.0 + 1.0:
            raise StopIteration

    monkeypatch.setattr(zlab_routes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(zlab_routes.hub, "sleep", sleep)
    for dp in dps.values():
        dp.sent.clear()
    with pytest.raises(StopIteration):
        a._fail_loop()
    asked = {name: sum(isinstance(m, parser.OFPPortDescStatsRequest) for m in dp.sent) for name, dp in dps.items()}
    assert {n for n, k in asked.items() if k} == set(want)
    assert all(k in (10, 11) for n, k in asked.items() if n in want), asked  # every 0.1 s for 1 s


def test_link_probes_go_out_evenly_over_the_probe_period(failing_app, monkeypatch):
    """Every target (each switch's self-probe, each cable direction) is probed once per 1/probe_hz,
    and the probes of one period go out in batches a second apart, each a second's share (plus
    one), where all of them used to go out in one burst."""
    spec = "roft:gpus=16,gpus_per_server=4,segments=2"
    fab, doc, a, dps = failing_app(spec, [{"at_emulated_s": 1, "action": "down", "target": "cable:l0r0,sp0"}])
    a.datapaths = {dp.id: dp for dp in dps.values()}
    hz = 0.5
    a.plan.detect = dict(a.plan.detect, probe_hz=hz, poll_s=0)
    n_targets = len(fab.switches) + len(a.plan.probe_dirs)
    clock, sends = [100.0], []  # (time, switch, out port) of every probe

    def sleep(s):
        clock[0] += s
        if clock[0] > 100.0 + 2 / hz + 1.0 + 1e-9:  # two probe periods and the batch that ends them
            raise StopIteration

    monkeypatch.setattr(zlab_routes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(zlab_routes.time, "monotonic_ns", lambda: int(clock[0] * 1e9))
    monkeypatch.setattr(zlab_routes.hub, "sleep", sleep)
    for name, dp in dps.items():
        dp.send_msg = lambda msg, name=name: (
            isinstance(msg, parser.OFPPacketOut) and sends.append((round(clock[0], 6), name, msg.actions[0].port))
        )
    with pytest.raises(StopIteration):
        a._fail_loop()
    assert len(sends) >= 2 * n_targets
    sends = sends[: 2 * n_targets]  # the first two rounds
    per_target = {}
    for t, name, port in sends:
        per_target.setdefault((name, port), []).append(t)
    assert len(per_target) == n_targets and all(len(ts) == 2 for ts in per_target.values())
    gaps = [b - a_ for a_, b in per_target.values()]
    assert all(abs(g - 1 / hz) <= 1.0 + 1e-6 for g in gaps), gaps  # once per period each (to a batch)
    batches = {}
    for t, _, _ in sends:
        batches[t] = batches.get(t, 0) + 1
    assert max(batches.values()) <= n_targets * hz * 1.0 + 1, batches  # a second's share at a time
    assert len(batches) >= 2 / hz - 1  # about one batch a second over the two periods, not one or two bursts
    assert all(round(b - a_, 6) >= 1.0 for a_, b in zip(sorted(batches), sorted(batches)[1:]))  # a second apart


def test_probe_loss_reads_only_the_probes_it_judges():
    """update() reads the last 3 x window judgeable probes of a direction, whatever its history."""
    p = ProbeLoss(window=4, min_lost=2, timeout_ns=10)
    d = ("s1", 1)
    for seq in range(1, 200):
        p.sent_probe(d, seq, seq * 100)
        if seq < 150 or seq % 2:  # from 150 on, every even probe lost
            p.got_probe(d, seq)
    assert p.update(200 * 100) == [(d, True, 2, 4)]


def test_pace_catches_up_after_a_late_chunk():
    """The pace averages from the recovery's start: a chunk sent late is followed at once."""
    p = zlab_routes.Pace(100.0, 10.0)
    assert p.wait_s(50, 10.0) == pytest.approx(0.5)
    assert p.wait_s(50, 12.0) == 0.0  # due at 11.0, already past
    assert p.wait_s(100, 12.0) == pytest.approx(0.0)  # 200 mods due by 12.0
    assert p.wait_s(100, 12.0) == pytest.approx(1.0)
    assert zlab_routes.Pace(0, 10.0).wait_s(10**6, 10.0) == 0.0


def test_unplanned_failure_changes_nothing(failing_app):
    fab, doc, a, dps = failing_app(
        "zcube:n=4,gpus_per_server=4", [{"at_emulated_s": 1, "action": "down", "target": "cable:za0,zb0"}]
    )
    for dp in dps.values():
        dp.sent.clear()
    port_status(a, dps["za1"], 6, down=True)  # za1-zb1: not in the schedule
    assert all(not dp.sent for dp in dps.values())
    assert a.detected and "unplanned" in a.plan.state_name(a.detected)


def test_fast_failover_groups_watch_primary_then_backup(failing_app):
    fab, doc, a, dps = failing_app(
        "zcube:n=4,gpus_per_server=4",
        [{"at_emulated_s": 1, "action": "down", "target": "cable:za0,zb0"}],
        "fast-failover",
    )
    sent = dps["za0"].sent
    groups = [m for m in sent if isinstance(m, parser.OFPGroupMod) and m.command == ofp.OFPGC_ADD]
    assert groups and all(g.type == ofp.OFPGT_FF for g in groups)
    for g in groups:
        primary, backup = g.group_id >> 16, g.group_id & 0xFFFF
        assert [b.watch_port for b in g.buckets] == [primary, backup]
        assert [b.actions[0].port for b in g.buckets] == [primary, backup]
        g.datapath = dps["za0"]
        g.serialize()
    first_flow = next(
        i
        for i, m in enumerate(sent)
        if isinstance(m, parser.OFPFlowMod) and m.priority not in (0, 65000) and m.command == ofp.OFPFC_ADD
    )
    assert max(i for i, m in enumerate(sent) if isinstance(m, parser.OFPGroupMod)) < first_flow  # groups first
    table = apply_mods({}, sent)
    via = [v for v in table.values() if isinstance(v, tuple)]
    assert via and all(gid in {g.group_id for g in groups} for _, gid in via)
    # the primary of za0's protected entries toward zb0 is port 5; its backup faces another B switch
    assert any(gid >> 16 == 5 and (gid & 0xFFFF) in (6, 7, 8) for _, gid in via)
    transit = doc["fast_failover"]["switches"]["zb1"]["transit"]
    assert transit and all(as_table(transit).items() <= apply_mods({}, dps["zb1"].sent).items() for _ in [0])
    assert group_id(5, 7) == (5 << 16) | 7


def test_probe_loss_hysteresis():
    p = ProbeLoss(window=10, min_lost=3, timeout_ns=100)
    d = ("za0", 5)
    t = 0
    for seq in range(10):  # 3 of 10 lost: gray
        p.sent_probe(d, seq, t)
        if seq not in (2, 5, 9):
            p.got_probe(d, seq)
        t += 10
    assert p.update(t + 200) == [(d, True, 3, 10)]
    for seq in range(10, 39):  # 29 back in a row: not yet healthy
        p.sent_probe(d, seq, t)
        p.got_probe(d, seq)
        t += 10
    assert p.update(t + 200) == []
    p.sent_probe(d, 39, t)
    p.got_probe(d, 39)
    assert p.update(t + 200) == [(d, False, 0, 30)]


def test_probe_frames_carry_their_sequence():
    f = zlab_routes.lldp_frame(0xA1, 3, seq=41)
    assert zlab_routes.parse_lldp(f) == (0xA1, 3) and zlab_routes.probe_seq(f) == 41
    assert zlab_routes.probe_seq(zlab_routes.lldp_frame(0xA1, 3)) is None


def test_probe_loss_is_not_blamed_on_a_cable_while_the_control_channel_loses_too():
    p = ProbeLoss(window=10, min_lost=3, timeout_ns=100)
    d, own = ("za0", 8), ("self", "zb3")  # za0-p8's probes arrive through zb3's channel
    for seq in range(10):
        p.sent_probe(d, 2 * seq, 10 * seq)
        p.sent_probe(own, 2 * seq + 1, 10 * seq)
        if seq not in (2, 5, 9):
            p.got_probe(d, 2 * seq)
        if seq != 5:
            p.got_probe(own, 2 * seq + 1)  # zb3's packet-ins stalled once: the channel, not the cable
    assert p.update(400, {d: "zb3"}) == []
    p.got_probe(own, 11)  # that self-probe did come back: now the losses are the cable's
    assert p.update(400, {d: "zb3"}) == [(d, True, 3, 10)]


def test_loss_on_every_cable_into_one_switch_is_the_switchs_not_a_cables():
    """Measured on a ROFT spine: when a traffic burst starts, its datapath drops packet-in upcalls and
    every cable into it loses probes at once. That is not a gray cable; one lossy cable among clean
    ones into the same switch is."""
    into = {("l0r0", 4): "sp1", ("l0r1", 4): "sp1", ("l1r0", 4): "sp1"}

    def fed(lossy):
        p = ProbeLoss(window=10, min_lost=3, timeout_ns=100)
        for seq in range(10):
            p.sent_probe(("self", "sp1"), 1000 + seq, 10 * seq)
            p.got_probe(("self", "sp1"), 1000 + seq)
            for k, d in enumerate(into):
                p.sent_probe(d, 100 * k + seq, 10 * seq)
                if not (d in lossy and seq in (1, 4, 7)):
                    p.got_probe(d, 100 * k + seq)
        return p

    assert fed(set(into)).update(400, into) == []  # all three lost 3 of 10: the spine's problem
    assert fed({("l0r1", 4)}).update(400, into) == [(("l0r1", 4), True, 3, 10)]


def test_a_port_state_change_forgets_the_cables_probe_history():
    p = ProbeLoss(window=10, min_lost=3, timeout_ns=100)
    d = ("za0", 5)
    for seq in range(10):
        p.sent_probe(d, seq, 10 * seq)  # none came back: the port was down
    assert p.update(400) == [(d, True, 10, 10)]
    p.forget(d)
    assert d not in p.bad and p.update(400) == []


def test_statistics_requests_are_spread_evenly_over_the_interval(app, monkeypatch):
    """Every switch is asked once per interval, one at a time, interval / switches apart: a round
    of every switch at once was a CPU burst that voided 256-GPU replays."""
    fab, ctl = app("zcube:n=4,gpus_per_server=4")
    ctl.stats_interval_s, ctl.lldp_interval_s = 4.0, 0.0
    dps = [FakeDatapath(d) for d in range(1, 9)]
    ctl.datapaths = {dp.id: dp for dp in dps}
    clock = [100.0]
    asked = []  # (time, dpid)
    for dp in dps:
        dp.send_msg = lambda msg, dp=dp: asked.append((clock[0], dp.id, type(msg).__name__))

    def sleep(s):
        assert s >= 0
        clock[0] += s
        if clock[0] > 100.0 + 2 * 4.0 - 1e-9:
            raise StopIteration

    monkeypatch.setattr(zlab_routes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(zlab_routes.hub, "sleep", sleep)
    with pytest.raises(StopIteration):
        ctl._poll()
    flow = [(t, d) for t, d, kind in asked if kind == "OFPFlowStatsRequest"]
    port = [(t, d) for t, d, kind in asked if kind == "OFPPortStatsRequest"]
    assert flow == port and len(flow) == 16  # two intervals of 8 switches
    assert [d for _, d in flow] == list(range(1, 9)) * 2
    gaps = {round(b[0] - a[0], 9) for a, b in zip(flow, flow[1:])}
    assert gaps == {0.5}  # 4 s / 8 switches
