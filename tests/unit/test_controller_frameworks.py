"""The same app under both frameworks: os-ken (this environment) and real Ryu 4.34 (.venv-ryu, built
by scripts/provision.sh) emit byte-identical OpenFlow for the same run folder — the proactive
tables, the fast-failover groups, and the reroute after a port goes down."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.emulation import failplan
from testbed.emulation.runfolder import flows_document
from testbed.emulation.up import RYU_PYTHON
from testbed.fabric import build_fabric

DUMP = Path(__file__).with_name("fake_dp_dump.py")
DETECT = {"probe_hz": 10, "probe_window": 20, "probe_min_lost": 5, "probe_timeout_s": 1.5, "poll_s": 0.1}


def dump(python, run_dir, *args):
    p = subprocess.run([str(python), str(DUMP), str(run_dir), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "spec, target, recovery, down",
    [
        ("zcube:n=4,gpus_per_server=4", "cable:za0,zb0", "fast-failover", "za0:5"),
        ("roft:gpus=16,gpus_per_server=4,segments=2", "cable:l0r0,sp0", "controller", "sp0:1"),
    ],
)
def test_ryu_and_os_ken_send_the_same_openflow(tmp_path, spec, target, recovery, down):
    assert RYU_PYTHON.exists(), f"{RYU_PYTHON} missing: scripts/provision.sh builds it"
    fab = build_fabric(spec)
    (tmp_path / "flows.json").write_text(json.dumps(flows_document(fab)))
    doc = failplan.document(fab, [{"at_emulated_s": 1, "action": "down", "target": target}], recovery, DETECT)
    (tmp_path / "failures.json").write_text(json.dumps(doc))
    osken = dump(sys.executable, tmp_path, down)
    ryu = dump(RYU_PYTHON, tmp_path, down)
    assert (osken["framework"], ryu["framework"]) == ("os_ken", "ryu")
    assert set(osken["sent"]) == {sw.name for sw in fab.switches}
    total = sum(len(v) for v in osken["sent"].values())
    assert total > 10 * len(fab.switches)  # tables, groups and the reroute, not an empty run
    assert osken["sent"] == ryu["sent"]
