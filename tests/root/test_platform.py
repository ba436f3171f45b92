"""The lab platform: provisioning is idempotent, doctor catches broken conditions with the
right hint, the Vagrantfile validates."""

import json
import time

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
