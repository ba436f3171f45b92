"""Labs managed like containerlab's: `zlab up -d` returns once the fabric is ready, `zlab inspect`
lists live runs, `zlab destroy` tears them down through their owner (also mid-replay) and leaves
nothing of them — while foreign bridges and veths stay untouched."""

import json
import subprocess
import sys
import time

from testbed.fabric import build_fabric

from .conftest import REPO, bridges, links, sh, zlab

ZCUBE = "zcube:n=4,gpus_per_server=4"


def inspect():
    return json.loads(zlab("inspect", "--json", check=True).stdout)


def test_up_detached_inspect_destroy(tmp_path):
    sh("ovs-vsctl --may-exist add-br zforeign1 -- set bridge zforeign1 datapath_type=netdev")
    sh("ip link add zfor1a type veth peer name zfor1b")
    try:
        before_br, before_links = bridges(), links()
        t = time.monotonic()
        up = zlab("up", ZCUBE, "-d", "--results", str(tmp_path), timeout=300, check=True)
        assert time.monotonic() - t < 120
        assert "[zlab] up (detached):" in up.stdout
        run_id = up.stdout.split("zlab destroy ")[1].split()[0]
        assert "za0" in bridges()  # up and still up after the command returned
        (row,) = [r for r in inspect() if r["run"] == run_id]
        assert row["kind"] == "up" and row["spec"].startswith("zcube:n=4") and row["controller"] == "os-ken"
        fab = build_fabric(ZCUBE)
        switch_ends = sum(1 for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0)
        assert row["status"] == "running" and row["bridges"] == 8 and row["ports"] == switch_ends == 64
        assert row["pid"] > 0 and row["age_s"] >= 0 and row["datapath"] in ("netdev", "system")
        human = zlab("inspect", check=True).stdout
        assert run_id in human and "os-ken" in human
        out = zlab("destroy", run_id, check=True).stdout
        assert "tore it down" in out
        assert not [r for r in inspect() if r["run"] == run_id]
        assert bridges() == before_br and links() == before_links
        assert {"zforeign1"} <= bridges() and {"zfor1a", "zfor1b"} <= links()
        assert json.loads((tmp_path / run_id / "run.json").read_text())["status"] == "interrupted"
        assert zlab("destroy", run_id).returncode == 2  # gone: a user error, named
    finally:
        sh("ovs-vsctl --if-exists del-br zforeign1")
        sh("ip link del zfor1a", check=False)


def test_destroy_during_a_replay(tmp_path):
    before_br = bridges()
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            "--no-progress",
            "--results",
            str(tmp_path),
            "--set",
            "repeats=3",
            "--set",
            "workload.requests=60",
            "--set",
            "measurement.calibrate=false",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # wait until a replay is under way: messages completing
            done = list(tmp_path.glob("run-*/zcube/raw/rep0/transfers.jsonl"))
            if done and done[0].stat().st_size > 0:
                break
            time.sleep(0.2)
        (run,) = [r for r in inspect() if r["kind"] == "run"]
        assert run["run"].endswith(".zcube")
        out = zlab("destroy", "--all-mine", check=True).stdout
        assert "tore it down" in out
        rest = p.communicate(timeout=60)[0]
        assert p.returncode == 130 and "terminated" in rest, rest  # 130: stopped before the end, as on Ctrl-C
        (root,) = tmp_path.glob("run-*")
        assert json.loads((root / "run.json").read_text())["status"] == "incomplete"
        assert not (root / "roft").exists()  # it stopped: the second fabric never came up
        assert bridges() == before_br and not inspect()
    finally:
        if p.poll() is None:
            p.kill()


def test_destroy_needs_a_target():
    assert zlab("destroy").returncode == 2
    assert "no live run 'nope'" in zlab("destroy", "nope").stderr
