"""The "ns3" serving engine: zlab's ns-3 program in lockstep with the serving model (serve mode).
Needs the compiled ns-3 program, as test_engine_ns3.py does (provision.sh --referee)."""

import math
import os
import signal

import numpy as np
import pytest

from testbed.errors import RuntimeFailure
from testbed.experiment import spec as especs
from testbed.fabric import build_fabric
from testbed.fabric.paths import dst_address, src_port_id
from testbed.referee import binary, scenario
from testbed.serving import engines, model, setup
from testbed.serving.ns3_engine import Ns3Engine

SIZE_BYTES = 10_000_000  # 2442 packets: a few ms of wall time


@pytest.fixture(scope="module")
def roft():
    binary.build(log=lambda *_: None)
    return build_fabric(especs.load(None, [])["fabrics"]["roft"])


def _pair(fab, a: int, b: int) -> tuple[str, str]:
    """GPU a's first port and the address it sends to on GPU b (as the flow planner picks them)."""
    role = fab.gpu_port_roles[0]
    return fab.ports[int(src_port_id(fab, a, role))].name, fab.ports[int(dst_address(fab, a, role, b))].name


def _wire_ns(fab, size_bytes: int, port: str) -> float:
    """Bytes on the wire (payload, every frame's headers, the RETH) at the port's line rate."""
    pkts = math.ceil(size_bytes / 4096)
    wire = size_bytes + pkts * scenario.FRAME["frame_overhead_bytes"] + scenario.FRAME["reth_bytes"]
    p = next(p for p in fab.ports if p.name == port)
    return wire * 8e9 / fab.links[int(fab.port_link[p.id])].rate_bps


def test_one_transfer_takes_its_wire_bytes_at_line_rate(roft):
    """Alone, a transfer completes (last ACK back) within 0.5 % below and 1 % + 20 us above its
    bytes on the wire / line rate: the pacer sends at line rate, the window of 64 packets covers
    the round trip, and the hops add store-and-forward of one frame each plus the ACK's way back."""
    src, dst = _pair(roft, 0, 5)
    with Ns3Engine(roft) as e:
        e.start(1000, 7, src, dst, SIZE_BYTES, 50000)
        assert e.next_event_ns() is not None
        t = e.run_until(10**9)
        assert e.advance(t) == [(7, t)] and e.next_event_ns() is None
    want = _wire_ns(roft, SIZE_BYTES, src)
    assert 0.995 * want <= t - 1000 <= 1.01 * want + 20_000, (t - 1000, want)


def test_two_transfers_into_one_gpu_port_take_twice_as_long(roft):
    """Two transfers into one GPU port share it: each ends about when both bytes are through
    (1.9x to 2.1x one transfer alone), and run_until stops at each completion in turn."""
    (s1, d), (s2, _) = _pair(roft, 0, 5), _pair(roft, 9, 5)
    with Ns3Engine(roft) as e:
        e.start(0, 1, s1, d, SIZE_BYTES, 50000)
        t_alone = e.run_until(10**9)
        assert e.advance(t_alone) == [(1, t_alone)]
        t0 = t_alone
        e.start(t0, 2, s1, d, SIZE_BYTES, 50001)
        e.start(t0, 3, s2, d, SIZE_BYTES, 50002)
        first = e.run_until(t0 + 10**9)
        done = e.advance(first)
        assert len(done) == 1 and e.next_event_ns() is not None
        second = e.run_until(t0 + 10**9)
        done += e.advance(second)
    assert sorted(f for f, _ in done) == [2, 3]
    for _, t in done:
        assert 1.9 <= (t - t0) / t_alone <= 2.1, ((t - t0), t_alone)


def test_the_child_dying_fails_loudly(roft):
    src, dst = _pair(roft, 0, 5)
    e = Ns3Engine(roft)
    e.start(0, 1, src, dst, SIZE_BYTES, 50000)
    os.kill(e._proc.pid, signal.SIGKILL)
    e._proc.wait()
    with pytest.raises(RuntimeFailure, match="ns-3 program"):
        e.run_until(10**9)
    assert e._proc.poll() is not None


def test_a_transfer_that_never_completes_fails_loudly(roft):
    """A transfer still running after the stall limit (1 ms of simulated time here; this
    one needs 20 ms) is named, and the child is stopped."""
    src, dst = _pair(roft, 0, 5)
    e = Ns3Engine(roft, horizon_ns=200_000, stall_ns=1_000_000)
    e.start(0, 1, src, dst, 100 * SIZE_BYTES, 50000)
    with pytest.raises(RuntimeFailure, match="flow 1 .* has not completed"):
        for _ in range(10):
            e.run_until(e.next_event_ns())
    assert e._proc.poll() is not None


def test_bad_commands_end_the_child_with_its_reason(roft):
    e = Ns3Engine(roft)
    e._send("start 1 0 999999 10 50000 0")  # no such port
    with pytest.raises(RuntimeFailure, match="unknown port"):
        e._running[1] = 0
        e.run_until(10)


@pytest.mark.slow  # ~5 s of ns-3 (a few hundred MB of KV in 4 KB packets)
def test_serving_model_on_ns3_matches_the_flow_engine():
    """On the default 16-GPU ROFT, every request's KV transfer time with ns-3 is the flow
    engine's x 1.005 to 1.03: the flow engine counts payload / rate, ns-3 moves 58 B of headers
    per 4 KB packet (x 1.014) and waits for the last ACK; contention (max-min sharing vs round
    robin of packets) agrees in between. Measured at 200 requests (rate 3/GPU/s): x 1.013 to
    1.014 from p1 to p99 on ZCube."""
    sc = setup.scenario(especs.load(None, []), "roft", "h100")
    reqs = sc.requests(3.0, 4, 0, 0)
    kv = {}
    for name in ("flow", "ns3"):
        net = engines.make_engine(name, sc)
        res = model.simulate(reqs, sc.deployment, sc.compute, sc.compute, net, sc.flow_planner(0), sc.scheduler)
        if name == "ns3":
            net.close()
        kv[name] = np.array([r.t_kv_done_ns - r.t_kv_start_ns for r in res.records], dtype=float)
    ratio = kv["ns3"] / kv["flow"]
    assert ratio.min() >= 1.005 and ratio.max() <= 1.03, ratio


def test_capacity_refuses_ns3_without_the_program(monkeypatch, tmp_path, capsys):
    """No ns-3 program: one line and exit 2, before anything runs or is written."""
    from testbed.cli import main
    from testbed.serving import ns3_engine

    monkeypatch.setattr(ns3_engine, "available", lambda: (False, "ns-3 headers missing: run provision"))
    assert main(["capacity", "--network", "ns3", "--results", str(tmp_path / "res"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--network ns3" in err[0] and "ns-3 headers missing" in err[0], err
    assert not (tmp_path / "res").exists()
