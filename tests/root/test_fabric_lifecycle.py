"""Fabric lifecycle on real Mininet: a deliberate miswire, SIGKILL then clean, refusals, SIGTERM.
(Separate module: these build fabrics with the same names as the shared fixtures.)"""

import signal
import subprocess
import sys
import time

from testbed.emulation import probes
from testbed.emulation.config import EmulationConfig
from testbed.emulation.up import LiveFabric
from testbed.fabric import build_fabric, hostconf

from .conftest import REPO, bridges, links, sh, zlab

ZCUBE = "zcube:n=4,gpus_per_server=4"
ROFT = "roft:gpus=16,gpus_per_server=4,segments=2"


def test_cabling_check_finds_a_swapped_cable(tmp_path):
    with LiveFabric(
        ZCUBE, EmulationConfig(), results_dir=str(tmp_path), miswire="za0-p5,za1-p6", log=lambda *_: None
    ) as f:
        rep = f.wiring_report()
    assert not rep["ok"]
    (swap,) = rep["swapped"]
    assert swap["expected"] == ["za0-p5 <-> zb0-p5", "za1-p6 <-> zb1-p6"]
    assert swap["found"] == ["za0-p5 <-> zb1-p6", "za1-p6 <-> zb0-p5"]
    assert swap["cables"] == _patch_names(f.dir, ("za0-p5", "zb0-p5"), ("za1-p6", "zb1-p6"))
    assert (f.dir / "wiring.json").exists()


def _patch_names(run_dir, *cables):
    """How the check must name each cable: its patch-list id (C + the model's link id) and racks,
    read from the run folder's patch list."""
    import csv

    fab = build_fabric(ZCUBE)
    by_ports = {frozenset((r["a_port"], r["b_port"])): r for r in csv.DictReader(open(run_dir / "patch-list.csv"))}
    out = []
    for a, b in cables:
        link = next(l for l in fab.links if {fab.ports[l.a].name, fab.ports[l.b].name} == {a, b})
        row = by_ports[frozenset((a, b))]
        assert row["cable_id"] == f"C{link.id:06d}"
        out.append(
            f"{row['cable_id']} ({row['a_port']} {row['a_rack']}/U{row['a_unit']} <-> "
            f"{row['b_port']} {row['b_rack']}/U{row['b_unit']})"
        )
    return out


def test_cabling_check_finds_a_swapped_nic_cable(tmp_path):
    """Two GPU ports plugged into each other's switch port: reachability fails for them, and the
    cabling check names both GPU ports and both switch ports."""
    with LiveFabric(
        ZCUBE, EmulationConfig(), results_dir=str(tmp_path), miswire="g0-p0,g1-p0", log=lambda *_: None
    ) as f:
        rep = f.wiring_report()
        assert f.reach["failed"]  # the hosts' routes expect the blueprint's cabling
    assert not rep["ok"] and rep["missing"] == [] and rep["extra"] == []
    (swap,) = rep["swapped"]
    assert swap["expected"] == ["g0-p0 <-> za0-p1", "g1-p0 <-> za0-p2"]
    assert swap["found"] == ["g0-p0 <-> za0-p2", "g1-p0 <-> za0-p1"]
    assert swap["cables"] == _patch_names(f.dir, ("g0-p0", "za0-p1"), ("g1-p0", "za0-p2"))


def test_one_shot_probe_names_exactly_the_pairs_a_broken_route_or_entry_cuts(tmp_path):
    """The all-pairs probe proves, it does not assume: the host route g0's cons port reaches the rail
    plane by, removed, fails exactly g0-p0's probes, stopped at g0; at the same time a flow entry
    removed from za1 fails exactly the pairs through it, and the switches' counters place the stop
    at za1."""
    with LiveFabric(ZCUBE, EmulationConfig(), results_dir=str(tmp_path), log=lambda *_: None) as f:
        assert f.reach["reachable"] == f.reach["pairs"] == 480
        _break_and_probe(probes.LiveRun(f.dir))


def test_at_256_gpus_the_probe_names_exactly_the_pairs_a_broken_route_or_entry_cuts(tmp_path):
    """The same proof on ZCube(16,2), the size where an unpaced burst lost probes (130,560 GPU port
    pairs): every pair proven, then exactly the pairs a removed host route and a removed switch
    entry cut, located, and nothing mistaken for loss."""
    with LiveFabric("zcube:n=16", EmulationConfig(), results_dir=str(tmp_path), log=lambda *_: None) as f:
        assert f.reach["reachable"] == f.reach["pairs"] == 130_560
        _break_and_probe(probes.LiveRun(f.dir))


def test_the_cover_proves_every_pair_and_still_names_exactly_the_pairs_a_broken_route_or_entry_cuts(tmp_path):
    """The cover (one probe per switch decision, the hosts' tables read, the switches' counters
    checked) proves the same 480 pairs with fewer probes; after the same two faults, the table
    read flags g0, the cover probe through the removed entry goes missing, and the pairs in doubt
    are probed one by one: the same exact names and stops as the all-pairs proof."""
    with LiveFabric(ZCUBE, EmulationConfig(), results_dir=str(tmp_path), proof="cover", log=lambda *_: None) as f:
        r = f.reach
        assert r["proof"] == "cover" and r["reachable"] == r["pairs"] == 480
        c = r["cover"]
        assert c["tables_differ"] == {} and c["switches_short"] == {} and c["pairs_in_doubt"] == 0
        # a lost probe is re-sent (probes_sent counts re-sends): fewer than all pairs either way
        assert c["probes"] <= r["probes_sent"] < 480 and c["probes"] <= c["decisions"]
        broken = _break_and_probe(probes.LiveRun(f.dir), method="cover")
    assert list(broken["cover"]["tables_differ"]) == ["g0"] and broken["cover"]["cover_missing"] >= 1


def _break_and_probe(live, method="auto"):
    """Both faults at once, one all-pairs proof (each proof of 130,560 pairs takes about 35 s at
    256 GPUs): the pairs they cut are disjoint, and each must be named with its own stop."""
    fab = live.fabric
    gpus = fab.n_gpus
    total = gpus * (gpus - 1) * 2  # every port of every GPU to the address rule's port of every other GPU
    cons0 = fab.gpu_port_by_role(0, "cons")
    # g0's cons port reaches every other GPU's rail address through one prefix route (hostconf): remove it
    (plane,) = [pre for pre, dev in hostconf.routes(fab, 0) if dev == cons0.name and pre.endswith("/16")]
    # the A switch GPU 4's cons port hangs off delivers its address: remove that entry and every
    # other GPU's rail port's probe to it fails
    cons4 = fab.gpu_port_by_role(4, "cons")
    a4 = fab.nodes[fab.ports[fab.peer_port(cons4.id)].node].name
    assert live.in_host("g0", ["ip", "route", "del", plane]).returncode == 0
    try:
        subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", a4, f"ip,nw_dst={cons4.ip}"], check=True)
        # the datapath's cached flows are revalidated asynchronously: without the purge the first probes
        # after the change can still ride the removed entry's cached flow (CI: g1-p1 -> g4-p0 got through)
        subprocess.run(["ovs-appctl", "revalidator/purge"], check=True)
        r = probes.reachability(live, timeout_s=1.5, method=method)
    finally:
        live.in_host(
            "g0",
            ["ip", "route", "add", plane, "dev", cons0.name, "src", cons0.ip],
        )
    by_route = sorted(f"{cons0.name} -> {fab.gpu_port_by_role(g, 'rail').name}" for g in range(1, gpus))
    by_entry = sorted(f"{fab.gpu_port_by_role(g, 'rail').name} -> {cons4.name}" for g in range(gpus) if g != 4)
    assert r["pairs"] == total and r["reachable"] == total - len(by_route) - len(by_entry)
    assert r["failed"] == sorted([f"{c} (Network is unreachable)" for c in by_route] + by_entry)
    stops = {u["pair"]: u["stopped_at"] for u in r["unreachable"]}
    assert sorted(stops) == sorted(by_route + by_entry)
    assert {stops[c] for c in by_route} == {"g0"}  # the sender's own table
    # proven against the switches' counters: each pair's probes crossed its B switch and stopped at A
    assert {stops[c] for c in by_entry} == {a4}
    # re-sent: not mistaken for loss
    assert len(r["rounds"]) >= 2 and r["rounds"][-1]["missing"] == len(by_route) + len(by_entry)
    return r


def test_sigkill_then_clean_leaves_nothing_and_spares_foreign_objects(tmp_path):
    sh("ovs-vsctl --may-exist add-br zforeign0 -- set bridge zforeign0 datapath_type=netdev")
    sh("ip link add zfor0a type veth peer name zfor0b")
    try:
        before_br, before_links = bridges(), links()
        p = subprocess.Popen(
            [sys.executable, "-m", "testbed.cli", "up", ZCUBE, "--no-cli", "--results", str(tmp_path)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 120
        for line in p.stdout:
            if "[zlab] up:" in line or time.monotonic() > deadline:
                break
        assert "za0" in bridges()
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        time.sleep(0.5)
        assert "za0" in bridges()  # the kill left the fabric behind...
        out = zlab("clean", check=True).stdout
        assert "ovs bridge za0" in out and "process" in out
        assert bridges() == before_br  # ...clean removed exactly it
        assert links() == before_links
        assert {"zforeign0"} <= bridges() and {"zfor0a", "zfor0b"} <= links()
        assert zlab("clean").stdout.startswith("zlab clean: no zlab runs recorded")
        assert subprocess.run(["pgrep", "-f", f"controllers.launch {tmp_path}"]).returncode == 1
    finally:
        sh("ovs-vsctl --if-exists del-br zforeign0")
        sh("ip link del zfor0a", check=False)


def test_building_over_a_foreign_bridge_is_refused(tmp_path):
    sh("ovs-vsctl --may-exist add-br za0 -- set bridge za0 datapath_type=netdev")
    try:
        proc = zlab("up", ZCUBE, "--no-cli", "--duration", "1", "--results", str(tmp_path))
        assert proc.returncode == 1  # a lab-state conflict is a runtime failure, not bad input
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line
        assert "zlab: failed: names already in use: bridges ['za0']" in proc.stderr
        assert "za0" in bridges()  # untouched
        assert not any(tmp_path.iterdir())  # refused before a run folder or a process existed
    finally:
        sh("ovs-vsctl --if-exists del-br za0")


def test_sigterm_tears_down(tmp_path):
    p = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "up", ROFT, "--no-cli", "--results", str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for line in p.stdout:
        if "[zlab] up:" in line:
            break
    assert "sp0" in bridges()
    p.send_signal(signal.SIGTERM)
    rest = p.communicate(timeout=60)[0]
    assert p.returncode == 0 and "torn down" in rest
    assert not {"sp0", "sp1", "l0r0"} & bridges()


def test_controller_check_survives_a_hello_first(tmp_path):
    """A controller that sends its OpenFlow HELLO the moment a connection opens, with a non-UTF-8
    byte in the xid (what failed a CI run inside Mininet's own listening check): building the
    controller node must not read the port at all."""
    import socket
    import threading

    from testbed.emulation.network import _mininet

    hello = b"\x04\x00\x00\x08\xa5\xec\xdcE"
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    accepted = []

    def serve():
        srv.settimeout(5)
        try:
            while True:
                c, _ = srv.accept()
                accepted.append(c)
                c.sendall(hello)
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    _, _, _, ZlabController, _ = _mininet()
    c = ZlabController("c0", ip="127.0.0.1", port=srv.getsockname()[1])
    try:
        assert c.port == srv.getsockname()[1]
        time.sleep(0.5)
        assert accepted == []  # nothing connected to the controller's port
    finally:
        c.terminate()
        srv.close()
        t.join(10)
        for s in accepted:
            s.close()
