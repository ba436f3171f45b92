"""Queueing oracles in ns-3 (testbed/referee/oracles.py): D/D/1, M/D/1 and fair share against
closed forms nobody here derived from the emulation. Each passes on the referee as built, and
each fails on the same program with its NIC pacer removed (its debug flag)."""

import math

import numpy as np
import pytest

from testbed.cli import main as zlab
from testbed.referee import oracles


def test_md1_distribution_by_its_known_moments():
    """Erlang's series: P(W = 0) = 1 - rho, its mean is Pollaczek-Khinchine's, and the wait
    exceeds one service time with the probability 1 - (1 - rho) e^rho."""
    rho, d = 0.5, 1.0
    assert oracles.md1_wait_cdf(0.0, rho, d) == pytest.approx(1 - rho)
    assert 1 - oracles.md1_wait_cdf(d, rho, d) == pytest.approx(1 - (1 - rho) * math.exp(rho), rel=1e-9)
    grid = np.linspace(0, 40, 40001)
    cdf = np.array([oracles.md1_wait_cdf(t, rho, d) for t in grid])
    mean = float(np.sum(1 - cdf[:-1]) * (grid[1] - grid[0]))
    assert mean == pytest.approx(rho * d / (2 * (1 - rho)), rel=2e-3)
    q = oracles.md1_wait_quantile(0.99, rho, d)
    assert oracles.md1_wait_cdf(q, rho, d) == pytest.approx(0.99, abs=1e-9)


def test_lindley_by_hand():
    assert oracles.lindley_us(np.array([0.0, 1.0, 5.0, 5.0]), 2.0).tolist() == [0.0, 1.0, 0.0, 2.0]


@pytest.mark.parametrize("bucket", [False, True], ids=["serialiser", "bucket"])
def test_dd1_never_waits_and_fails_without_pacing(bucket):
    good = oracles.dd1(bucket=bucket)
    assert good["ok"] and good["max_abs_wait_us"] <= 1.0 and good["nic_drops"] == 0
    bad = oracles.dd1(no_pacing=True, bucket=bucket)
    assert not bad["ok"] and bad["nic_drops"] > 0


@pytest.mark.parametrize("bucket", [False, True], ids=["serialiser", "bucket"])
def test_md1_matches_pollaczek_khinchine_and_the_exact_p99_and_fails_without_pacing(bucket):
    good = oracles.md1(bucket=bucket)
    assert good["ok"], good
    assert good["mean_gap"] <= 0.05 and good["p99_gap"] <= 0.07 and good["max_off_lindley_us"] <= 1.0
    bad = oracles.md1(no_pacing=True, n=5000, bucket=bucket)
    assert not bad["ok"] and bad["mean_gap"] > 1


@pytest.mark.parametrize("bucket", [False, True], ids=["serialiser", "bucket"])
def test_fair_share_and_fails_without_pacing(bucket):
    good = oracles.fair_share(bucket=bucket)
    assert good["ok"] and good["max_gap"] <= 0.05, good
    # the longest flow finishes when every byte has crossed the bottleneck: exact with serialising
    # links; a one-frame bucket runs up to two frames ahead of line rate and the first hop does not
    # serialise, so within three frames (12.5 ms of 8.3 s)
    assert good["completion_us"][-1] == pytest.approx(good["processor_sharing_us"][-1], abs=3 * 4170 if bucket else 1)
    bad = oracles.fair_share(no_pacing=True, bucket=bucket)
    assert not bad["ok"] and bad["max_gap"] > 0.05


@pytest.mark.slow  # over 3 s: kept out of the fast loop, which must stay under a minute
def test_cli_oracles_exit_codes(capsys):
    assert zlab(["referee", "--oracles"]) == 0
    assert "oracles: ALL PASS" in capsys.readouterr().out
    assert zlab(["referee", "--oracles", "--debug-no-pacing"]) == 3
    assert "FAILED" in capsys.readouterr().out
