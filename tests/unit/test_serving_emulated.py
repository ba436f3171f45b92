"""The emulation engine's bookkeeping without a fabric: real <-> wall time, scaled bytes, the stop
at the first completion, the lag guard. A fake agent on a fake clock moves each message at its
port's emulated rate with no contention, so the closed loop must reproduce the fixed-rate engine."""

from __future__ import annotations

import heapq

from testbed.experiment import spec as especs
from testbed.serving import model, setup
from testbed.serving.emulated import EmulationEngine
from testbed.serving.fixed_rate import FixedRateEngine

RATE_SCALE, SIZE_SCALE = 1.25e-5, 2.5e-4
DILATION = SIZE_SCALE / RATE_SCALE


class FakeAgent:
    """post/run/done like traffic.agent.Agent; time passes only inside run (the model is instant)."""

    def __init__(self, rates_bps: dict[str, float]):
        self.rates_bps, self.t_wall, self.done, self._heap, self._n = rates_bps, 1_000, [], [], 0

    def clock(self) -> int:
        return self.t_wall

    def post(self, conn, size_bytes, at_ns, meta):
        src, dst = conn
        rate = min(self.rates_bps[src], self.rates_bps[dst]) * RATE_SCALE
        t_done = max(at_ns, self.t_wall) + round(size_bytes * 8 * 1e9 / rate)
        heapq.heappush(self._heap, (t_done, self._n, meta))
        self._n += 1

    def run(self, deadline_ns, stop_on_completion):
        assert stop_on_completion
        if self._heap and self._heap[0][0] <= deadline_ns:
            t, _, meta = heapq.heappop(self._heap)
            self.t_wall = max(self.t_wall, t)
            self.done.append({"t_complete_ns": t, **meta})
            while self._heap and self._heap[0][0] == t:  # simultaneous completions come together
                self.done.append({"t_complete_ns": t, **heapq.heappop(self._heap)[2]})
            return not self._heap
        self.t_wall = max(self.t_wall, deadline_ns)
        return False


def _stamps(sc, reqs, engine):
    res = model.simulate(reqs, sc.deployment, sc.compute, sc.compute, engine, sc.flow_planner(0), sc.scheduler)
    return [(r.req.id, r.t_kv_done_ns, r.t_first_token_ns, r.t_done_ns) for r in res.records]


def test_the_closed_loop_on_a_contention_free_fake_agent_reproduces_the_fixed_rate_engine():
    """Wall = t0 + real x dilation out, real = (wall - t0) / dilation back, bytes x size_scale:
    every request's KV lands within a microsecond of the fixed-rate engine's (rounding of scaled bytes)."""
    sc = setup.scenario(especs.load(None, []), "roft", "h100")
    reqs = sc.requests(3.0, 30, 0, 0)
    rates = sc.port_rates_bps()
    agent = FakeAgent(rates)
    eng = EmulationEngine(agent, lambda s, d, p: (s, d), DILATION, SIZE_SCALE, clock=agent.clock, lead_wall_ns=0)
    emu = _stamps(sc, reqs, eng)
    ref = _stamps(sc, reqs, FixedRateEngine(rates))
    assert [r[0] for r in emu] == [r[0] for r in ref]
    assert max(abs(a[1] - b[1]) for a, b in zip(emu, ref)) < 1_000
    assert all(e[3] > 0 for e in emu)
    fid = eng.fidelity()
    assert not fid["void"] and fid["worst_lag_wall_ms"] <= 0 and fid["transfers"] > 0


def test_run_until_stops_at_the_first_completion_and_reports_real_time():
    agent = FakeAgent({"a": 200e9, "b": 200e9})
    eng = EmulationEngine(agent, lambda s, d, p: (s, d), DILATION, SIZE_SCALE, clock=agent.clock, lead_wall_ns=0)
    t_real_done = 8 * 1_000_000 * 1e9 / 200e9  # a 1 MB transfer at 200 Gb/s: 40 us
    eng.start(0, 7, "a", "b", 1_000_000)
    eng.start(10_000, 8, "a", "b", 1_000_000)
    assert eng.next_event_ns() is not None
    assert eng.run_until(5_000) == 5_000  # nothing done yet: the deadline
    t = eng.run_until(10**9)
    assert abs(t - t_real_done) <= 20
    assert [f for f, _ in eng.advance(t)] == [7]
    assert eng.advance(t) == []
    t2 = eng.run_until(10**9)
    assert abs(t2 - (10_000 + t_real_done)) <= 20 and [f for f, _ in eng.advance(t2)] == [8]
    assert eng.next_event_ns() is None


def test_a_model_that_falls_behind_the_wall_voids_the_simulation():
    agent = FakeAgent({"a": 200e9, "b": 200e9})
    eng = EmulationEngine(
        agent,
        lambda s, d, p: (s, d),
        DILATION,
        SIZE_SCALE,
        clock=agent.clock,
        lead_wall_ns=0,
        max_lag_wall_ns=1_000_000,
    )
    agent.t_wall += 3_000_000  # the model's own turn took 3 ms of wall time
    eng.start(0, 1, "a", "b", 1000)
    f = eng.fidelity()
    assert f["void"] and f["worst_lag_wall_ms"] >= 3


def test_without_root_the_emulation_engine_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    from testbed.cli import main

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    rc = main(["capacity", "--network", "emulation", "--results", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "root" in err[0]
    assert list(tmp_path.iterdir()) == []
