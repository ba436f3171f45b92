"""What `zlab clean` relies on when an owner dies before writing a pid down: the run's tag in
every process it started, and the test-only fault hook that proves it (no root needed)."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from testbed.emulation import faultpoint
from testbed.emulation.config import LabFailure
from testbed.lab import clean, procs


def test_the_fault_hook_fires_only_where_asked(monkeypatch):
    monkeypatch.delenv(faultpoint.ENV, raising=False)
    for point in faultpoint.POINTS:
        faultpoint.hit(point)  # unset: nothing, which is all users ever see
    monkeypatch.setenv(faultpoint.ENV, "shaping")
    faultpoint.hit("links")
    with pytest.raises(LabFailure, match="injected fault at shaping"):
        faultpoint.hit("shaping")


def test_clean_finds_and_stops_an_unrecorded_process_by_its_tag(tmp_path):
    tag = f"unit-{os.getpid()}"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, "ZLAB_RUN": tag})
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, "ZLAB_RUN": tag + "x"}
    )
    try:
        assert [p for p, _ in procs.tagged("ZLAB_RUN", tag)] == [child.pid]
        rec = SimpleNamespace(
            run_id=tag,
            resources=[{"type": "env-tag", "name": "ZLAB_RUN", "value": tag}],
            path=tmp_path / f"{tag}.jsonl",
        )
        assert clean.clean_run(rec, dry_run=True) == [f"process {child.pid} (tagged: {_cmd(child.pid)})"]
        assert child.poll() is None  # a dry run touches nothing
        assert len(clean.clean_run(rec)) == 1
        assert child.wait(timeout=10) is not None
        assert other.poll() is None  # another run's process (a tag that merely starts alike) is spared
    finally:
        for p in (child, other):
            p.kill()
            p.wait()


def _cmd(pid):
    return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()[:80]


def test_a_mininet_node_shell_stops_on_sighup_without_the_grace_period():
    """Mininet's node shells are interactive bash, which ignores SIGTERM: network.stop sends SIGHUP
    so a teardown does not wait out the grace period (it did: 3 s of every run). Exit by SIGHUP
    itself, not the SIGKILL after the grace, is what the return code proves."""
    import pty
    import signal
    import time

    master, slave = pty.openpty()
    shell = subprocess.Popen(
        ["bash", "--norc", "--noediting", "-is", "mininet:c0"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    try:
        time.sleep(0.2)
        t = time.monotonic()
        assert procs.terminate_all([(shell.pid, procs.start_time(shell.pid))], first_signal=signal.SIGHUP) == [
            shell.pid
        ]
        assert time.monotonic() - t < 1.0
        assert shell.wait(timeout=5) == -signal.SIGHUP
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(master)
        os.close(slave)
