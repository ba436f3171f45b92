"""The lab platform: provisioning is idempotent, doctor catches broken conditions with the
right hint, the Vagrantfile validates."""

import json
import shutil
import time
from pathlib import Path

from .conftest import REPO, sh, zlab


def doctor():
    proc = zlab("doctor", "--json")
    return proc.returncode, {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_provisioning_is_idempotent_and_fast():
    t0 = time.monotonic()
    out = sh(f"bash {REPO}/scripts/provision.sh", timeout=600).stdout
    assert "0 changes" in out, out
    assert time.monotonic() - t0 < 30


def test_doctor_ready_on_a_provisioned_machine():
    code, checks = doctor()
    assert code == 0, checks
    assert checks["ovs datapath"]["status"] == "ok"
    assert checks["netem"]["status"] in ("ok", "warn")


def test_doctor_catches_small_socket_buffers_then_provision_fixes_them():
    old = sh("sysctl -n net.core.wmem_default").stdout.strip()
    sh("sysctl -qw net.core.wmem_default=212992")
    try:
        code, checks = doctor()
        assert code == 1
        c = checks["socket buffers"]
        assert c["status"] == "FAIL" and "net.core.wmem_default=212992" in c["detail"]
        assert "provision.sh --services" in c["hint"]
    finally:
        out = sh(f"bash {REPO}/scripts/provision.sh --services").stdout
    assert "restarting" in out  # buffers were raised under a running OVS: it must restart
    assert int(sh("sysctl -n net.core.wmem_default").stdout) >= 8388608 and int(old) >= 0
    assert doctor()[0] == 0


def test_doctor_catches_stopped_ovs_then_provision_restarts_it():
    sh("/usr/share/openvswitch/scripts/ovs-ctl stop")
    try:
        code, checks = doctor()
        assert code == 1
        assert checks["ovs reachable"]["status"] == "FAIL"
        assert checks["ovs reachable"]["hint"] == "start OVS: bash scripts/provision.sh --services"
    finally:
        sh(f"bash {REPO}/scripts/provision.sh --services")
    assert doctor()[0] == 0


def test_vagrantfile_validates():
    out = sh(f"cd {REPO} && vagrant validate --ignore-provider")
    assert "Vagrantfile validated successfully" in out.stdout


def test_doctor_measures_and_stores_the_datapath_capacity(tmp_path):
    """The planner's C: switch forwards per ovs-vswitchd core-second, measured here, stored."""
    state = tmp_path / "state"
    state.mkdir()
    sh(f"cp /var/lib/zlab/datapath /var/lib/zlab/ovs-started.json {state}/")
    import os

    proc = zlab(
        "doctor",
        "--capacity",
        "--results",
        str(tmp_path),
        env={**os.environ, "ZLAB_STATE_DIR": str(state)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads((state / "capacity.json").read_text())
    assert "forwards/core-s" in proc.stdout and "interpolates it at each run's link rate" in proc.stdout
    # a curve over the link rates; 4 KB frames through two switches: at least a few thousand per
    # core-second at every rate, and at the fastest rates the probe really loaded the datapath
    # (otherwise the figure would be idle overhead, not capacity)
    curve = rec["curve"]
    assert [p["link_rate_mbps"] for p in curve] == [4.0, 16.0, 33.0, 100.0, 300.0]
    assert all(p["forwards_per_core_s"] > 2000 and p["forwards_per_s"] > 0 for p in curve), curve
    assert max(p["ovs_cpu_fraction"] for p in curve) > 0.2, curve
    assert rec["forwards_per_core_s"] == min(p["forwards_per_core_s"] for p in curve)
    assert rec["datapath"] in ("netdev", "system")


def test_readme_commands_work_as_root_and_as_a_sudo_user(tmp_path):
    """README's commands carry no sudo: as root they run as they are (a fresh Debian has no sudo);
    as another user they re-run themselves through sudo (a fake one here, which records the call)."""
    import os
    import tempfile

    fake = Path(tempfile.mkdtemp(prefix="zlab-fake-sudo-", dir="/tmp"))  # reachable by another user
    fake.chmod(0o755)
    log = fake / "sudo.log"
    (fake / "sudo").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (fake / "sudo").chmod(0o755)
    log.touch()
    log.chmod(0o666)
    try:
        readme = (REPO / "README.md").read_text()
        assert "\nbash scripts/main.sh" in readme and "\nbash scripts/test.sh" in readme and "sudo bash" not in readme
        env = f"PATH={fake}:{os.environ['PATH']}"
        as_root = sh(f"env {env} bash {REPO}/scripts/provision.sh --help")
        assert "provision.sh" in as_root.stdout and log.read_text() == ""
        for script in ("provision.sh", "main.sh", "test.sh"):
            sh(f"runuser -u nobody -- env {env} bash {REPO}/scripts/{script} --help")
        calls = log.read_text().splitlines()
        assert [c.split()[:2] for c in calls] == [["-E", "bash"]] * 3 and calls[1].endswith("main.sh --help"), calls
    finally:
        shutil.rmtree(fake, ignore_errors=True)
