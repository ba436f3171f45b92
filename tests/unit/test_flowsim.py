"""The flow-level engine against hand-worked fair shares and completion times, and its routes
against the fabric's own path function."""

import numpy as np
import pytest

from testbed.fabric import build_fabric
from testbed.fabric.paths import route
from testbed.flowsim.engine import FlowEngine, run_transfers
from testbed.flowsim.maxmin import max_min_rates
from testbed.flowsim.network import FluidNetwork

G = 1e9


def test_two_flows_on_one_link_get_half_each():
    assert max_min_rates(np.array([[0], [0]]), np.array([100 * G])).tolist() == [50 * G, 50 * G]


def test_parking_lot_gives_everyone_half():
    """X crosses links a and b, Y only a, Z only b, all of capacity 1: every flow gets 1/2."""
    r = max_min_rates(np.array([[0, 1], [0, -1], [1, -1]]), np.array([1.0, 1.0]))
    assert r.tolist() == [0.5, 0.5, 0.5]


def test_what_a_flow_cannot_use_goes_to_the_others():
    """a = 10, b = 4; X over a and b, Y over a. b limits X to 4; Y takes the 6 left on a."""
    r = max_min_rates(np.array([[0, 1], [0, -1]]), np.array([10.0, 4.0]))
    assert r.tolist() == pytest.approx([4.0, 6.0])


def test_chain_of_three_links_with_unequal_capacities():
    """a = 3, b = 2, c = 6; X over a, b, c; Y over a; Z over b, c; W over c.
    b: X and Z at 1 each (level 1, the lowest); then a leaves 2 to Y, c leaves 4 to W."""
    links = np.array([[0, 1, 2], [0, -1, -1], [1, 2, -1], [2, -1, -1]])
    assert max_min_rates(links, np.array([3.0, 2.0, 6.0])).tolist() == pytest.approx([1, 2, 1, 4])


def test_completions_on_a_shared_link_by_hand():
    """100 MB and 200 MB from t=0 on 100 Gb/s: both at 50 Gb/s until the first is done at
    16 ms; the second then has 100 MB left at 100 Gb/s: 8 ms more, done at 24 ms."""
    net = FluidNetwork(np.array([100 * G]))
    net.add(0, 1, np.array([0]), 100_000_000)
    net.add(0, 2, np.array([0]), 200_000_000)
    assert net.advance(30_000_000) == [(1, 16_000_000), (2, 24_000_000)]


def test_a_later_start_slows_the_first_transfer():
    """A (100 MB) alone at 100 Gb/s from 0; B (100 MB) joins at 4 ms with A 50 MB short of done:
    both at 50 Gb/s, A done 8 ms later (12 ms); B's last 50 MB alone: done at 16 ms."""
    net = FluidNetwork(np.array([100 * G]))
    net.add(0, 1, np.array([0]), 100_000_000)
    assert net.advance(4_000_000) == []
    net.add(4_000_000, 2, np.array([0]), 100_000_000)
    assert net.next_event_ns() == 12_000_000
    assert net.advance(12_000_000) == [(1, 12_000_000)]
    assert net.advance(20_000_000) == [(2, 16_000_000)]
    assert net.next_event_ns() is None


def test_a_start_that_skips_a_completion_is_refused():
    net = FluidNetwork(np.array([100 * G]))
    net.add(0, 1, np.array([0]), 1_000)
    with pytest.raises(RuntimeError, match="not collected"):
        net.add(1_000_000, 2, np.array([0]), 1_000)


@pytest.mark.parametrize("spec", ["roft:gpus=16,gpus_per_server=4", "zcube:n=4,gpus_per_server=4"])
def test_routes_are_the_tables_routes(spec):
    fab = build_fabric(spec)
    eng = FlowEngine(fab)
    names = [p.name for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]]
    src = names[0]
    for dst in names[len(names) // 2 :]:
        for sport in (49152, 50001, 65535):
            try:
                expect = route(fab, src, dst, sport).links
            except LookupError:
                with pytest.raises(LookupError):
                    eng.route(src, dst, sport)
                continue
            assert tuple(eng.route(src, dst, sport)) == expect


def test_the_ecmp_member_a_source_port_picks_decides_contention():
    """Two ROFT transfers from one rail leaf to the other segment: with source ports that the
    leaf's table sends up the same uplink they share it (each takes twice as long as alone);
    with ports that it sends up different uplinks, each runs at the NIC's rate."""
    fab = build_fabric("roft:gpus=32,gpus_per_server=4")
    g = {p.name: p for p in fab.ports}
    a, b = "g0-p0", "g4-p0"  # rank 0 of servers 0 and 1: the same rail leaf
    far = [n for n in g if n.endswith("-p0") and len(route(fab, a, n).switches) == 3]
    da, db = far[0], far[-1]  # two GPUs of rail 0 behind another leaf, reached over the spines
    assert route(fab, a, da).switches[0] == route(fab, b, db).switches[0]
    up = {s: route(fab, a, da, s).links[1] for s in range(49152, 65536, 257)}
    up_b = {s: route(fab, b, db, s).links[1] for s in range(49152, 65536, 257)}
    same = next((sa, sb) for sa in up for sb in up_b if up[sa] == up_b[sb])
    diff = next((sa, sb) for sa in up for sb in up_b if up[sa] != up_b[sb])
    size = 100_000_000
    alone_ns = size * 8 / (float(fab.params["gpu_gbps"]) * 1e9) * 1e9
    assert g[a].node != g[b].node
    for (sa, sb), factor in ((same, 2.0), (diff, 1.0)):
        done = dict(run_transfers(FlowEngine(fab), [(0, 1, a, da, size, sa), (0, 2, b, db, size, sb)]))
        assert done[1] == done[2] == pytest.approx(factor * alone_ns, abs=1), (sa, sb, done)


def test_zlab_flowsim_cli(capsys):
    """Two seeds on a small pair: a JSON document with medians and intervals; ZCube's uncontended
    rank-shifted transfers take exactly size / GPU bandwidth at the median. Bad input: exit 2."""
    import json

    from testbed.cli import main

    assert main(["flowsim", "zcube:n=4,gpus_per_server=4", "roft:gpus=16,gpus_per_server=4", "--seeds", "2",
                 "--rounds", "1", "--window-ms", "1000", "--json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    z, r = doc["results"]
    assert z["kv_p50_ms"]["n"] == 2 and z["kv_p50_ms"]["median"] == pytest.approx(z["alone_ms"])
    assert r["kv_p50_ms"]["median"] >= r["alone_ms"]
    for bad in (["--seeds", "0"], ["--size-mb", "-1"], ["--pattern", "nope"]):
        assert main(["flowsim", "zcube:n=4", *bad]) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_a_remnant_below_the_clocks_resolution_still_completes():
    """Float drift can leave a transfer a few bits short at a late clock: at 6e9 ns a float's step is
    ~1e-6 ns, and 1e-5 bits at 400 Gb/s take 2.5e-8 ns, so its completion time equals the clock.
    It must complete there (this once looped forever inside advance, hanging `zlab capacity`)."""
    import signal

    from testbed.flowsim.network import FluidNetwork

    net = FluidNetwork(np.array([400e9]))
    net.add(6_185_813_242, 7, np.array([0]), 1_000)
    net._left_bits[0] = 1e-5  # what drift leaves behind

    def hung(*_):
        raise TimeoutError("advance() did not return: the remnant never completes")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)  # a regression hangs: fail it instead
    try:
        t = net.next_event_ns()
        assert net.advance(t) == [(7, t)] and net.active == 0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class _OneLink:
    """An engine whose every transfer crosses one 100 Gb/s link (the driver is what is tested)."""

    def __init__(self):
        self.net = FluidNetwork(np.array([100 * G]))

    def start(self, t_ns, fid, src, dst, size_bytes, sport):
        self.net.add(t_ns, fid, np.array([0]), size_bytes)

    def next_event_ns(self):
        return self.net.next_event_ns()

    def advance(self, t_ns):
        return self.net.advance(t_ns)


def test_qp_ordered_replay_holds_a_message_behind_its_qps_previous_one_by_hand():
    """QP a->b posts 1 and 2 (100 MB each) at 0; QP c->d posts 3 (100 MB) at 4 ms. 1 runs alone
    until 4 ms (50 MB), then shares with 3: done at 12 ms. 2 starts only then, shares with 3 (50 MB
    left): 3 done at 20 ms, 2 has 50 MB left alone at 100 Gb/s: done at 24 ms. Concurrently
    (run_transfers) 2 would have started at 0."""
    from testbed.flowsim.engine import run_qp_ordered

    tr = [(0, 1, "a", "b", 100_000_000, 1), (0, 2, "a", "b", 100_000_000, 1), (4_000_000, 3, "c", "d", 100_000_000, 2)]
    got = run_qp_ordered(_OneLink(), tr)
    assert got == {1: (0, 12_000_000), 3: (4_000_000, 20_000_000), 2: (12_000_000, 24_000_000)}
    assert dict(run_transfers(_OneLink(), tr))[2] < 24_000_000
