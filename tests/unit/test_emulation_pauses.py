"""Lossless mode's decisions (testbed/emulation/pauses.py), offline: which transmitters feed an
egress port (against routes walked hop by hop), the MMU thresholds in emulated bytes, and the
pause/resume sequence of one switch worked by hand; the PFC frame that kicks a reopened gate
decoded by scapy."""

import pytest

from testbed.emulation import pauses, tbf_netlink
from testbed.fabric import build_fabric
from testbed.fabric.paths import route


def _sw(ports=("a", "b", "c")):
    return pauses.SwitchBuffer(list(ports), 1000, 100, 10, 20, 2)


def test_one_switch_attributes_its_queue_and_pauses_the_ingress_that_holds_it_by_hand():
    """buffer 1000, headroom + reserve 100, reserve 10, resume offset 20, alpha 1/2; egress c is
    fed by A (through ingress a) and B (through b). XOFF = (1000 - 100 - shared) / 2."""
    logic = pauses.PauseLogic({"s": _sw()}, {"c": [("a", "A"), ("b", "B")]})
    assert logic.step({"c": 0}, {"c": 0}, {"a": 0, "b": 0}) == []  # the counters' starting point
    # c grew to 500 having sent nothing: a brought 400 of it, b 100. Shared 390 + 90 = 480, XOFF 210:
    # a (390) is over, b (90) is not
    ch = logic.step({"c": 500}, {"c": 0}, {"a": 400, "b": 100})
    assert [(x.ingress, x.transmitter, x.pause, x.cause) for x in ch] == [("a", "A", True, "c")]
    assert logic.held == {("a", "c"): 400, ("b", "c"): 100}
    # c sent 200, received nothing (A paused, B idle): 300 left, served in proportion: a 240, b 60.
    # Shared 230 + 50 = 280, XOFF 310: a's 230 + 20 <= 310, so A resumes
    ch = logic.step({"c": 300}, {"c": 200}, {"a": 400, "b": 100})
    assert logic.held == {("a", "c"): 240, ("b", "c"): 60}
    assert [(x.ingress, x.pause) for x in ch] == [("a", False)] and logic.shut == {}


def test_an_ingress_holding_bytes_for_two_ports_sums_them_and_names_the_larger_as_cause():
    """a feeds c and d; alone in each, it holds all of both queues: 150 + 250 = 400, shared 390
    against XOFF (900 - 390) / 2 = 255: paused, cause d (it holds more there)."""
    logic = pauses.PauseLogic({"s": _sw(("a", "c", "d"))}, {"c": [("a", "A")], "d": [("a", "A")]})
    logic.step({}, {}, {"a": 0})
    ch = logic.step({"c": 150, "d": 250}, {}, {"a": 400})
    assert [(x.ingress, x.pause, x.cause) for x in ch] == [("a", True, "d")]
    # c drained: a holds d's 250, shared 240, XOFF (900 - 240) / 2 = 330 >= 240 + 20: resumes
    assert [(x.pause, x.cause) for x in logic.step({"c": 0, "d": 250}, {"c": 150}, {"a": 400})] == [(False, "d")]


def test_many_feeders_of_one_queue_each_hold_their_share_so_none_pauses():
    """The incast case: eight ingress ports bring 100 each to c (800 queued). Each holds 100, shared
    8 x 90 = 720, XOFF (900 - 720) / 2 = 90: each is exactly at, not over, it. An egress-wide rule
    (800 against XOFF) would pause all eight."""
    feeds = {"c": [(f"i{k}", f"T{k}") for k in range(8)]}
    logic = pauses.PauseLogic({"s": _sw(("c", *[f"i{k}" for k in range(8)]))}, feeds)
    logic.step({}, {}, {f"i{k}": 0 for k in range(8)})
    assert logic.step({"c": 800}, {}, {f"i{k}": 100 for k in range(8)}) == []


@pytest.mark.parametrize("spec", ["zcube:n=4,gpus_per_server=4", "roft:gpus=16,gpus_per_server=4"])
def test_feeders_are_the_hops_of_the_routes_and_of_their_acknowledgements(spec):
    fab = build_fabric(spec)
    gpu_ports = [p.name for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]]
    last_gpu = fab.nodes[fab.n_gpus - 1].name
    flows = [(s, route(fab, s, last_gpu, sp).dst_port, sp) for s, sp in ((gpu_ports[0], 49152), (gpu_ports[3], 49153))]
    feeds = pauses.feeders(fab, flows)
    want = {}
    node_of = {p.name: fab.nodes[p.node].name for p in fab.ports}
    for s, d, sport in flows + [(d, s, sp) for s, d, sp in flows]:
        r = route(fab, s, d, sport)
        prev = s  # the transmitter into the first switch is the source port itself
        for hop in r.hops:
            ports = {p.number: p.name for p in fab.ports if node_of[p.name] == hop.switch}
            ingress, egress = ports[hop.in_port], ports[hop.out_port]
            want.setdefault(egress, set()).add((ingress, prev))
            prev = egress
    assert {e: set(v) for e, v in feeds.items()} == want
    last = {e for e, v in feeds.items() if any(tx == gpu_ports[0] for _, tx in v)}
    assert last  # the source port feeds its first switch's egress


def test_switch_buffers_scale_the_packet_engines_thresholds():
    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    cfg = {"pfc_enabled": True, "pfc_buffer_bytes": 4_000_000}
    bufs = pauses.switch_buffers(fab, cfg, 0.2)
    sw = next(iter(bufs.values()))
    # every ZCube(4,2) switch port is 200 Gb/s: headroom 3 x 25 B/ns x 1,000 ns = 75,000 B, reserve 4,096
    n = len(sw.ports)
    assert sw.buffer_bytes == 800_000 and sw.need_bytes == round(n * 79_096 * 0.2) and sw.reserve_bytes == 819
    assert sw.xoff({}) == (800_000 - sw.need_bytes) // 8


def test_the_kick_frame_is_an_arp_probe_for_nothing():
    from scapy.layers.l2 import ARP, Ether

    f = tbf_netlink.kick_frame("02:00:00:00:00:07")
    e = Ether(f)
    assert len(f) == 60 and e.dst == "ff:ff:ff:ff:ff:ff" and e.src == "02:00:00:00:00:07" and ARP in e
    a = e[ARP]
    assert a.op == 1 and a.psrc == "0.0.0.0" and a.pdst == "0.0.0.0" and a.hwsrc == "02:00:00:00:00:07"


def test_tbf_options_refuse_rates_the_message_cannot_carry():
    with pytest.raises(ValueError, match="outside"):
        tbf_netlink.tbf_options(0, 9000, 100_000)
    assert len(tbf_netlink.tbf_options(1000, 9000, 100_000)) == 4 + 36 + 4 + 4


def test_the_sampling_period_is_a_quarter_of_the_headroom_time_within_bounds():
    cfg = {"pfc_enabled": True}  # headroom covers 3 x 1,000 ns real
    assert pauses.period_us(cfg, 16_000) == 10_000  # 48 ms wall / 4 = 12 ms: capped
    assert pauses.period_us(cfg, 4_000) == 3_000
    assert pauses.period_us(cfg, 20) == 1_000  # 15 us: floored, and the reaction rule will judge the run


def test_a_failure_schedule_adds_the_degraded_routes_and_fast_failover_backups():
    """ZCube(4,2) with one switch-to-switch cable down: flows whose healthy path crosses it take
    the degraded tables' detour, and the feeding sets hold the detour's hops too; in fast-failover
    mode every backup egress port is fed by what fed its primary."""
    from testbed.emulation import failplan

    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    link = next(lk for lk in fab.links if all(fab.nodes[fab.ports[p].node].role == "switch" for p in (lk.a, lk.b)))
    events = [{"at_emulated_s": 1.0, "action": "down", "target": f"cable:{fab.ports[link.a].name}"}]
    doc = failplan.document(fab, events, "fast-failover", {})
    tables, backups = pauses.failure_routes(fab, doc)
    assert len(tables) == 2 and tables[0] is None and backups
    gpu_ports = [p.name for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]]
    flows = [(s, route(fab, s, g.name, 49152).dst_port, 49152) for s in gpu_ports for g in fab.nodes[:16:5]]
    node_of = {p.name: p.node for p in fab.ports}
    flows = [f for f in flows if node_of[f[0]] != node_of[f[1]]]
    healthy = pauses.feeders(fab, flows)
    both = pauses.feeders(fab, flows, tables)
    crossing = [f for f in flows if link.id in {d // 2 for d in route(fab, f[0], f[1], f[2]).links}]
    assert crossing  # some flow used the cable
    for s, d, sp in crossing:
        r = route(fab, s, d, sp, tables=tables[1])
        assert link.id not in {x // 2 for x in r.links}
        assert r.dst_port == d  # the destination is reached on the detour
    extra = {e: set(v) - set(healthy.get(e, [])) for e, v in both.items()}
    assert any(extra.values())  # the detour fed ports the healthy routes did not
    with_ff = pauses.feeders(fab, flows, tables, backups)
    for primary, backup in backups:
        if primary in with_ff:
            assert set(with_ff[primary]) <= set(with_ff[backup])


def test_the_pause_record_is_read_by_hand_and_fails_closed(tmp_path):
    """Two PAUSEs (one caused at a detour port, after the cut) and their RESUMEs; dilation 1,000:
    reactions (applied - previous sample) 2,000 and 4,000 ns wall are 2 and 4 ns real."""
    import json
    from types import SimpleNamespace

    from testbed.measure.congestion import CongestionRecordsMissing
    from testbed.measure.emcongestion import pause_record

    section = {"pfc_headroom_factor": 3, "link_delay_ns": 1000}
    fd = SimpleNamespace(
        raw=tmp_path, run={"emulation_congestion": {"pause_period_us": 1000, "dilation": 1000.0, "section": section}}
    )
    with pytest.raises(CongestionRecordsMissing, match="pfc.csv: missing"):
        pause_record(fd)
    (tmp_path / "pfc.csv").write_text(
        pauses.CSV_HEADER
        + "10000,s-p1,g0-p0,1,s-p3,8000,9000,10000\n"
        + "20000,s-p1,g0-p0,0,s-p3,19000,19500,20000\n"
        + "30000,s-p2,t-p1,1,s-p4,26000,28000,30000\n"
        + "40000,s-p2,t-p1,0,s-p4,39000,39500,40000\n"
    )
    with pytest.raises(CongestionRecordsMissing, match="pauses.json: missing"):
        pause_record(fd)
    (tmp_path / "pauses.json").write_text(json.dumps({"samples": 40, "late_periods": 0, "period_ns": 1_000_000}))
    (tmp_path / "pause_plan.json").write_text(json.dumps({"detour_ports": ["s-p4"]}))
    (tmp_path / "injections.jsonl").write_text(json.dumps({"t_ns": 25000, "action": "down"}) + "\n")
    r = pause_record(fd)
    assert r["pauses"] == 2 and r["pauses_after_failure"] == 1 and r["pauses_on_detours"] == 1
    assert r["held_by_detours"] == ["t-p1"] and r["paused_transmitters"] == ["g0-p0", "t-p1"]
    assert r["reaction_real_ns_max"] == 4.0 and r["headroom_real_ns"] == 3000.0 and r["period_real_ns"] == 1000.0


def test_reopening_a_gate_whose_link_is_down_is_counted_not_fatal():
    """A flap can take a port's link down while its gate is shut; reopening it then cannot send the
    kick frame (ENETDOWN), and need not: taking the link down flushed its queue. Counted; any other
    send error still raises."""
    import errno

    class Nl:
        def __init__(self):
            self.calls = []

        def set(self, *a):
            self.calls.append(a)

    class Sock:
        def __init__(self, err):
            self.err = err

        def send(self, frame):
            raise OSError(self.err, "no")

    g = pauses.Gates.__new__(pauses.Gates)
    g.table = {
        "zb0-p7": {
            "netns_pid": None,
            "ifindex": 7,
            "mac": "02:00:00:00:00:07",
            "open_rate_bytes_per_s": 10,
            "burst_bytes": 9000,
            "limit_bytes": 100_000,
        }
    }
    g.nl, g.marker, g.writer = {None: Nl()}, None, None
    g.kicks, g.kicks_link_down = {}, {}
    g.kick = {"zb0-p7": Sock(errno.ENETDOWN)}
    g.set("zb0-p7", False)
    assert g.kicks_link_down == {"zb0-p7": 1} and g.kicks == {} and g.nl[None].calls  # the gate itself reopened
    g.kick = {"zb0-p7": Sock(errno.EPERM)}
    with pytest.raises(OSError):
        g.set("zb0-p7", False)
