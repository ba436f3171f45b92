"""A run that fails part way says so: run.json status 'failed' with the cause, and a report that
says what was recorded — never 'complete' (issue: seen in 7 failed runs)."""

import json

import pytest

from testbed.experiment import runner
from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve


def test_a_replay_that_fails_marks_the_run_failed_with_its_cause(tmp_path, monkeypatch):
    exp = resolve(especs.load(None, ["workload.requests=10", "repeats=1"]))

    def broken(exp, fr, root, log=print, bar=None):
        raise RuntimeError("ovs-vswitchd went away")

    monkeypatch.setattr(runner, "run_fabric", broken)
    with pytest.raises(RuntimeError, match="went away"):
        runner.run_experiment(exp, results_dir=str(tmp_path), log=lambda *_: None, show_progress=False)
    (root,) = tmp_path.iterdir()
    run = json.loads((root / "run.json").read_text())
    assert run["status"] == "failed" and run["cause"] == "RuntimeError: ovs-vswitchd went away"
    text = (root / "report.md").read_text()
    assert "No fabric recorded any data (status failed: RuntimeError: ovs-vswitchd went away)" in text
