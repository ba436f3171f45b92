"""The flow engine against SimGrid, an engine written by others (Debian's python3-simgrid, installed
by `provision.sh --referee`): the same rank-shifted KV schedule, the same per-transfer routes from the
tables, pure max-min sharing on both sides; every completion time must agree. SimGrid runs in the
system Python through scripts/bench/flowsim_simgrid.py, so this checks the script too."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "flowsim_simgrid.py"


def load_script():
    spec = importlib.util.spec_from_file_location("flowsim_simgrid", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # about 1 s idle: two SimGrid child processes
@pytest.mark.parametrize("spec", ["zcube:n=8,gpus_per_server=8", "roft:gpus=64,gpus_per_server=8"])
def test_simgrid_gives_the_same_completions_at_64_gpus(spec):
    # 3 rounds of 50 MB per prefill GPU over 5 ms: many transfers overlap and share links
    r = load_script().compare(spec, rounds=3, size_bytes=50_000_000, window_ns=5_000_000, seed=4)
    assert r["flows"] >= 96
    assert r["max_gap_pct"] <= 1e-3, r  # a thousandth of a percent of each transfer's duration
