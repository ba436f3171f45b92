"""The zlab app under real Ryu 4.34 (.venv-ryu): both fabrics come up with every table installed,
every GPU port pair reachable and the cabling check clean; and a replay runs with `controller: ryu`."""

import json

import pytest

from testbed.emulation.config import EmulationConfig
from testbed.emulation.up import LiveFabric
from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve
from testbed.experiment.runner import run_experiment

from .conftest import bridges


@pytest.mark.parametrize("spec", ["zcube:n=4,gpus_per_server=4", "roft:gpus=16,gpus_per_server=4,segments=2"])
def test_fabric_up_under_real_ryu(tmp_path, spec):
    before = bridges()
    with LiveFabric(spec, EmulationConfig(), results_dir=str(tmp_path), controller="ryu", log=lambda *_: None) as lf:
        assert lf.reach["pairs"] > 0 and lf.reach["reachable"] == lf.reach["pairs"]
        assert lf.installed_counts() == lf.expected_flow_counts()
        rep = lf.wiring_report()
        assert rep["ok"], rep
        log = (lf.dir / "controller" / "controller.log").read_text()
        assert "ryu.controller.ofp_handler" in log and "os_ken" not in log
        assert json.loads((lf.dir / "run.json").read_text())["controller"] == "ryu"
    assert bridges() == before


def test_a_replay_under_real_ryu(tmp_path):
    exp = resolve(
        especs.load(
            None,
            ["controller=ryu", "repeats=1", "workload.requests=10", 'fabrics={zcube: "zcube:n=4,gpus_per_server=4"}'],
        )
    )
    root, status = run_experiment(exp, results_dir=str(tmp_path), log=lambda *_: None, show_progress=False)
    assert status == "complete"
    m = json.loads((root / "metrics.json").read_text())["fabrics"]["zcube"]["repeats"][0]
    assert m["integrity_ok"] is True and m["messages_completed"] == m["messages_posted"] > 0
    assert json.loads((root / "zcube" / "run.json").read_text())["controller"] == "ryu"
