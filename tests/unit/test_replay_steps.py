"""A repeat's replay as named steps (set up, connect, post, run, collect, tear down), offline:
the steps run in that order, the tear-down always runs with the status reached, and it records
everything before it raises an injector that would not stop."""

import json
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.emulation.config import LabFailure
from testbed.experiment import runner


class FakeProcess:
    def __init__(self, hangs=False):
        self.signals, self.killed, self.hangs = [], False, hangs

    def send_signal(self, sig):
        self.signals.append(sig)

    def wait(self, timeout=None):
        if self.hangs:
            raise subprocess.TimeoutExpired("collector", timeout)
        return 0

    def kill(self):
        self.killed = True


class FakeAgent:
    def __init__(self):
        self.done = [1, 2]
        self.conns = [SimpleNamespace(posted=2), SimpleNamespace(posted=1)]
        self.calls = []

    def collect_socket_drops(self):
        self.calls.append("drops")

    def counters(self):
        self.calls.append("counters")
        return {"sent": 3}

    def close(self):
        self.calls.append("close")


def _replay(tmp_path: Path, injector=None, hangs=False) -> runner._Replay:
    raw = tmp_path / "raw" / "rep0"
    raw.mkdir(parents=True)
    (raw / "run_clock.json").write_text(json.dumps({"t0_ns": 5}))
    records = SimpleNamespace(closed=False)
    records.close = lambda: setattr(records, "closed", True)
    return runner._Replay("zcube 1/2", raw, FakeProcess(hangs), records, FakeAgent(), injector)


def test_tear_down_records_everything_before_raising_an_injector_that_would_not_stop(tmp_path, monkeypatch):
    r = _replay(tmp_path, injector=FakeProcess())

    def stuck(p, raw, lf, log):
        raise LabFailure("the failure injector did not stop in 30 s", str(raw / "injector.log"))

    monkeypatch.setattr(runner, "_stop_injector", stuck)
    lines = []
    with pytest.raises(LabFailure, match="did not stop"):
        runner._tear_down(r, SimpleNamespace(dir=tmp_path), "complete", lines.append)
    assert r.collector.signals == [signal.SIGTERM] and not r.collector.killed
    assert r.agent.calls == ["drops", "counters", "close"] and r.records.closed
    assert json.loads((r.raw / "counters.json").read_text()) == {"sent": 3}
    clock = json.loads((r.raw / "run_clock.json").read_text())
    assert clock["t0_ns"] == 5 and clock["t_end_ns"] > 0
    assert lines == ["[zlab]   zcube 1/2: 2/3 messages completed (complete)"]


def test_tear_down_kills_a_collector_that_does_not_stop(tmp_path):
    r = _replay(tmp_path, hangs=True)
    runner._tear_down(r, SimpleNamespace(dir=tmp_path), "timeout", lambda *_: None)
    assert r.collector.signals == [signal.SIGTERM] and r.collector.killed
    assert (r.raw / "counters.json").exists()


def _steps(monkeypatch, tmp_path, fail_at=None):
    """Replace every step by one that logs its name (and fails where asked)."""
    seen = []
    r = _replay(tmp_path)

    def step(name, result=None):
        def run(*a, **k):
            seen.append(name)
            if name == fail_at:
                raise RuntimeError(f"{name} broke")
            return result

        return run

    monkeypatch.setattr(runner, "_set_up", step("set up", r))
    monkeypatch.setattr(runner, "_connect", step("connect", [("qp", "msg", "t")]))
    monkeypatch.setattr(runner, "_vswitchd_pid", lambda: 1)
    monkeypatch.setattr(runner.losses, "snapshot", step("snapshot", {}))
    monkeypatch.setattr(runner, "_post", step("post", 123))
    monkeypatch.setattr(runner, "_run", step("run", "complete"))
    monkeypatch.setattr(runner, "_collect", step("collect"))
    monkeypatch.setattr(runner, "_tear_down", lambda r, lf, status, log: seen.append(f"tear down ({status})"))
    return seen


def test_replay_runs_its_steps_in_order(tmp_path, monkeypatch):
    seen = _steps(monkeypatch, tmp_path)
    assert runner.replay(None, None, None, None, None) == "complete"
    assert seen == ["set up", "connect", "snapshot", "post", "run", "collect", "tear down (complete)"]


@pytest.mark.parametrize("fail_at, status", [("connect", "incomplete"), ("collect", "complete")])
def test_a_failed_step_still_tears_down_with_the_status_reached(tmp_path, monkeypatch, fail_at, status):
    seen = _steps(monkeypatch, tmp_path, fail_at)
    with pytest.raises(RuntimeError, match=f"{fail_at} broke"):
        runner.replay(None, None, None, None, None)
    assert seen[-2:] == [fail_at, f"tear down ({status})"]
