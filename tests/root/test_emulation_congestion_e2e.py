"""ECN and DCQCN in the emulation, end to end on real Mininet/OVS: an incast on ZCube(4,2) run
twice on the same seeds, without congestion control and with ECN + DCQCN. Bands on means over
repeats. The thresholds are raised so that Kmax is 8 emulated frames at the default scale (the
real HPCC values are under one frame there; docs/congestion.md says why)."""

import json

import pytest

from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve
from testbed.experiment.runner import run_experiment

BASE = [
    "workload.requests=40",
    "workload.offered_load=0.3",
    "repeats=3",
    "deployment.mapping=incast",
    "measurement.calibrate=false",
]
ECN = [
    "congestion.ecn_enabled=true",
    "congestion.cc=dcqcn",
    "congestion.ecn_kmin_bytes_per_25g=9000000",  # 200 Gb/s ports: 18 KB emulated, 2 frames
    "congestion.ecn_kmax_bytes_per_25g=36000000",  # 72 KB emulated, 8 frames
]


def _run(tmp_path_factory, name, overrides):
    spec = especs.load(None, overrides)
    del spec["fabrics"]["roft"]  # the mechanism, on one fabric
    exp = resolve(spec)
    root, status = run_experiment(
        exp, results_dir=str(tmp_path_factory.mktemp(name)), log=lambda *_: None, show_progress=False
    )
    assert status == "complete"
    return root, json.loads((root / "metrics.json").read_text())


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _run(tmp_path_factory, "nocc", BASE), _run(tmp_path_factory, "dcqcn", BASE + ECN)


def _mean(m, key):
    return m["fabrics"]["zcube"]["summary"][key]["mean"]


def test_dcqcn_marks_notifies_and_cuts(pair):
    (_, plain), (root, cc) = pair
    assert "emulation_congestion" not in plain
    e = cc["emulation_congestion"]["zcube"]
    for r in e["repeats"]:
        assert r["marks"] > 0 and r["ce_rx"] > 0 and r["cnps_tx"] > 0 and r["rate_changes"] > 0
        assert r["cnps_rx"] <= r["cnps_tx"] and r["qualitative_ports"] == 0
    for rep in cc["fabrics"]["zcube"]["repeats"]:
        assert rep["integrity_ok"] and rep["messages_completed"] == rep["messages_posted"]
    text = (root / "report.md").read_text()
    assert "## Congestion (emulation: ECN marking, CNPs, DCQCN)" in text and "lossy + DCQCN" in text


def test_dcqcn_lowers_queueing_and_keeps_the_bottleneck_busy(pair):
    """Queueing delay p99 (mean over 3 repeats) at most 80 % of the run without congestion
    control, while the busiest port still carries at least 90 % of its rate at its peak window."""
    (_, plain), (_, cc) = pair
    q_plain, q_cc = _mean(plain, "queue_delay_p99_real_s"), _mean(cc, "queue_delay_p99_real_s")
    util = _mean(cc, "max_carried_util")
    print(f"queueing p99 {q_plain * 1e6:.0f} -> {q_cc * 1e6:.0f} real µs; busiest port carried {100 * util:.0f} %")
    assert q_cc <= 0.8 * q_plain
    assert util >= 0.9
