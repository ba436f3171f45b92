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


def test_one_switch_pauses_and_resumes_by_hand():
    """buffer 1000, headroom + reserve 100, reserve 10, resume offset 20, alpha 1/2; c is fed by
    A (through ingress a) and B (through b). XOFF = (1000 - 100 - shared) / 2, shared = c's
    backlog - 10."""
    logic = pauses.PauseLogic({"s": _sw()}, {"c": [("a", "A"), ("b", "B")], "a": [("c", "C")]})
    assert logic.step({"c": 300}) == []  # shared 290, XOFF 305: not over
    ch = logic.step({"c": 320})  # shared 310 > XOFF (900 - 310) / 2 = 295
    assert [(x.ingress, x.transmitter, x.pause, x.cause) for x in ch] == [("a", "A", True, "c"), ("b", "B", True, "c")]
    assert logic.step({"c": 300}) == []  # shared 290 + 20 = 310 > XOFF 305: still over
    ch = logic.step({"c": 280})  # shared 270 + 20 = 290 <= XOFF 315: resume both
    assert [(x.ingress, x.pause) for x in ch] == [("a", False), ("b", False)]
    assert logic.shut == {} and logic.over == set()


def test_the_switch_total_backlog_lowers_every_ports_threshold():
    """The dynamic threshold: a's backlog alone (shared 190) is under XOFF 355; with c holding 400
    more shared bytes XOFF falls to (900 - 190 - 390) / 2 = 160 and a is over."""
    logic = pauses.PauseLogic({"s": _sw()}, {"a": [("c", "C")], "c": []})
    assert logic.step({"a": 200}) == []
    ch = logic.step({"a": 200, "c": 400})
    assert [(x.ingress, x.transmitter, x.cause) for x in ch] == [("c", "C", "a")]


def test_a_transmitter_feeding_two_congested_ports_opens_only_when_both_are_clear():
    logic = pauses.PauseLogic({"s": _sw(("a", "c", "d"))}, {"c": [("a", "A")], "d": [("a", "A")]})
    assert [x.pause for x in logic.step({"c": 400, "d": 400})] == [True]
    assert logic.step({"c": 0, "d": 400}) == []  # d still holds A
    assert [x.pause for x in logic.step({"c": 0, "d": 0})] == [False]


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


def test_the_kick_frame_is_a_pfc_frame_with_no_class_enabled():
    from scapy.layers.l2 import Ether

    f = tbf_netlink.kick_frame("02:00:00:00:00:07")
    e = Ether(f)
    assert len(f) == 60 and e.dst == "01:80:c2:00:00:01" and e.src == "02:00:00:00:00:07" and e.type == 0x8808
    assert bytes(e.payload)[:4] == b"\x01\x01\x00\x00"  # PFC opcode, class-enable vector 0


def test_tbf_options_refuse_rates_the_message_cannot_carry():
    with pytest.raises(ValueError, match="outside"):
        tbf_netlink.tbf_options(0, 9000, 100_000)
    assert len(tbf_netlink.tbf_options(1000, 9000, 100_000)) == 4 + 36 + 4 + 4


def test_the_sampling_period_is_a_quarter_of_the_headroom_time_within_bounds():
    cfg = {"pfc_enabled": True}  # headroom covers 3 x 1,000 ns real
    assert pauses.period_us(cfg, 16_000) == 10_000  # 48 ms wall / 4 = 12 ms: capped
    assert pauses.period_us(cfg, 4_000) == 3_000
    assert pauses.period_us(cfg, 20) == 1_000  # 15 us: floored, and the reaction rule will judge the run
