"""Nothing of a run remains after a bring-up that fails at any step, or whose owner is SIGKILLed
mid-bring-up and then `zlab clean` runs (the registry's promise; issue 27: a failed 1,024-GPU
bring-up left 1,024 veth pairs and no record). ZCube(4,2), 16 GPUs: each bring-up takes a few
seconds, so every step fits the root tier's budget; the mechanism does not depend on size."""

import os
import subprocess
import sys

import pytest

from testbed.emulation.faultpoint import POINTS
from testbed.lab import procs
from testbed.lab.registry import TAG_ENV

from .conftest import REPO, bridges, links, zlab

ZCUBE = "zcube:n=4,gpus_per_server=4"


def _up(tmp_path, fault):
    env = {**os.environ, "ZLAB_TEST_FAULT": fault}
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", "up", ZCUBE, "--no-cli", "--duration", "1", "--results", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _nothing_left(tmp_path, before_br, before_links):
    assert bridges() == before_br
    assert links() == before_links
    (run_dir,) = list(tmp_path.iterdir())
    assert procs.tagged(TAG_ENV, run_dir.name) == []  # no shell, controller or child of the run
    assert subprocess.run(["pgrep", "-f", f"controllers.launch {run_dir}"]).returncode == 1
    assert zlab("clean", "--dry-run").stdout.startswith("zlab clean: no zlab runs recorded")


@pytest.mark.parametrize("point", POINTS)
def test_a_bring_up_failing_at_any_step_leaves_nothing(tmp_path, point):
    before_br, before_links = bridges(), links()
    proc = _up(tmp_path, point)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"injected fault at {point}" in proc.stderr
    assert "teardown incomplete" not in proc.stdout
    _nothing_left(tmp_path, before_br, before_links)


@pytest.mark.parametrize("point", ["links", "shaping"])
def test_clean_removes_a_run_whose_owner_was_killed_mid_bring_up(tmp_path, point):
    before_br, before_links = bridges(), links()
    proc = _up(tmp_path, f"{point}:kill")
    assert proc.returncode == -9
    assert links() - before_links  # the kill left the fabric's veths behind...
    out = zlab("clean", check=True).stdout  # (the node shells may die of SIGHUP with their owner's pty)
    assert "removed" in out and "link za0-p5" in out and "(controller)" in out
    _nothing_left(tmp_path, before_br, before_links)
