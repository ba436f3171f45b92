"""Failures on real Mininet: a cable, a switch and a gray failure injected mid-replay on ZCube and
ROFT, each detected, routed around and recovered from, every message intact, and the switches
proven (by their own counters) to use the model's degraded paths afterwards. Plus fast-failover
groups switching over with the controller frozen.

Bounds (emulated seconds; README "Failures" explains them): detection of a dead cable ≤ 0.2 s
(port status, confirmed by the port-state poll); recovery ≤ the install + one retransmission
timeout of the QP + 0.5 s of queueing (controller, fast-failover), ≤ one timeout + 0.5 s (host:
the QP moves after its first timeout without progress); a gray failure is detected by the link
probes within probe_timeout + 2 windows / probe_hz + 1 s (6.5 s with the defaults; measured 2.2-4.0 s).
"""

import json
import os
import signal

import pytest

from testbed.emulation import failplan
from testbed.emulation.config import EmulationConfig
from testbed.emulation.probes import LiveRun, dump_group_buckets, prove_path
from testbed.emulation.up import LiveFabric
from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve
from testbed.experiment.runner import run_experiment
from testbed.fabric import build_fabric
from testbed.fabric.failures import crossing
from testbed.records import read_jsonl

from .conftest import bridges, sh, void_only_for_the_machine

BASE = ["repeats=1", "workload.requests=60", "workload.offered_load=0.5", "measurement.calibrate=false"]
AT = 4.0  # emulated s: inside the trace's second burst of transfers


def failure_run(tmp_path_factory, name, events, recovery=None):
    over = BASE + [f"failures.events={json.dumps(events)}"]
    if recovery:
        over.append(f"failures.recovery={json.dumps(recovery)}")
    exp = resolve(especs.load(None, over))
    root, status = run_experiment(
        exp, results_dir=str(tmp_path_factory.mktemp(name)), log=lambda *_: None, show_progress=False
    )
    assert status == "complete"
    return root, exp, json.loads((root / "metrics.json").read_text())


def down(target):
    return [{"at_emulated_s": AT, "action": "down", "target": target}]


@pytest.fixture(scope="module")
def cables(tmp_path_factory):
    """ZCube's busiest fabric cable (controller reroute) and ROFT's busiest leaf-spine cable."""
    return failure_run(tmp_path_factory, "cab", {"zcube": down("cable:busiest"), "roft": down("cable:busiest")})


@pytest.fixture(scope="module")
def switches(tmp_path_factory):
    """A ZCube A switch (reroute + host failover: its GPU ports lose their only cable) and a ROFT spine."""
    return failure_run(
        tmp_path_factory, "sw", {"zcube": down("switch:za1"), "roft": down("switch:sp1")}, {"zcube": "both"}
    )


@pytest.fixture(scope="module")
def gray(tmp_path_factory):
    ev = [{"at_emulated_s": AT - 0.5, "action": "gray", "loss_percent": 30, "target": "cable:busiest"}]
    return failure_run(tmp_path_factory, "gray", {"zcube": ev, "roft": ev})


@pytest.fixture(scope="module")
def host_and_ff(tmp_path_factory):
    """ZCube recovering by host failover alone; ROFT with fast-failover groups (+ the controller)."""
    return failure_run(
        tmp_path_factory,
        "hff",
        {"zcube": down("cable:busiest"), "roft": down("cable:busiest")},
        {"zcube": "host", "roft": "fast-failover"},
    )


def event(metrics, label):
    (e,) = metrics["failures"][label]["events"]
    return e


def rto_s(root, label):
    counters = json.loads((root / label / "raw" / "rep0" / "counters.json").read_text())
    return max(q["rto_min_ns"] for q in counters["qps"]) / 1e9


def common_checks(root, metrics, label):
    e = event(metrics, label)
    rep = metrics["fabrics"][label]["repeats"][0]
    # what is tested here is failure handling; a repeat may be void only for the machine (CPU, steal, missed
    # samples), which its record then shows, never for a fidelity rule about the data (drops, bytes, integrity)
    assert all(r.startswith("CPU-bound") for r in rep["fidelity"]["reasons"]) or void_only_for_the_machine(rep), (
        rep["fidelity"],
        rep["cpu_fraction"],
    )
    assert e["integrity_ok"] is True
    assert e["qps_hit"] >= 1 and e["qps_unrecovered"] == 0
    proofs = json.loads((root / label / "raw" / "rep0" / "verify_paths.json").read_text())["proofs"]
    assert proofs and all(p["ok"] for p in proofs), proofs  # the switches forward as the model's degraded tables
    inj = read_jsonl(root / label / "raw" / "rep0" / "injections.jsonl")
    restore = next(r for r in inj if r["action"] == "restore")
    assert restore["errors"] == []
    return e, inj


@pytest.mark.parametrize("label", ["zcube", "roft"])
def test_cable_failure_is_detected_rerouted_and_recovered(cables, label):
    root, exp, metrics = cables
    e, inj = common_checks(root, metrics, label)
    assert e["qps_recovered"] == e["qps_hit"]
    # only the QPs whose path crossed the cable lost frames: the reroute itself (make before break) lost none
    counters = json.loads((root / label / "raw" / "rep0" / "counters.json").read_text())
    t_cut = next(r for r in inj if r["action"] == "down")["t_ns"]
    assert sum(any(r[0] >= t_cut for r in q["repairs_ns"]) for q in counters["qps"]) == e["qps_hit"]
    assert e["detected_via"] == "port_status" and e["detection_s"] <= 0.2
    # confirmed independently: the kernel says the ends are down, both switches reported it
    first = next(r for r in inj if r["action"] == "down")
    assert set(first["operstate"].values()) == {"DOWN"}
    ctrl = read_jsonl(root / label / "controller" / "failures.jsonl")
    reported = {(r["switch"], r["port"]) for r in ctrl if r["event"] == "port_down" and r["link"] in first["links"]}
    assert len(reported) == 2
    assert e["installed_s"] is not None and e["installed_s"] <= 0.5
    assert e["recovery_s"] <= e["installed_s"] + rto_s(root, label) + 0.5
    assert exp.fabrics[label].failplan["steps"][0]["target"] != "cable:busiest"  # resolved to a named cable


@pytest.mark.parametrize("label", ["zcube", "roft"])
def test_switch_failure(switches, label):
    root, exp, metrics = switches
    e, _ = common_checks(root, metrics, label)
    assert e["detection_s"] <= 0.2
    if label == "zcube":  # its GPUs on za1 lost a port: the queue pairs there moved to the other one
        assert e["migrations"] >= 1
        assert e["recovery_s"] <= rto_s(root, label) + 0.5
    else:
        assert e["recovery_s"] <= e["installed_s"] + rto_s(root, label) + 0.5


@pytest.mark.parametrize("label", ["zcube", "roft"])
def test_gray_failure_is_found_by_probes_and_routed_around(gray, label):
    root, exp, metrics = gray
    e, inj = common_checks(root, metrics, label)
    d = exp.spec["failures"]
    assert e["detected_via"] == "probes"
    # a window must fill with judged probes, and a window's losses may be set aside while another cable into the
    # same switch loses too (the guard): allow two windows (measured: 2.2-4.0 s)
    assert e["detection_s"] <= d["probe_timeout_s"] + 2 * d["probe_window"] / d["probe_hz"] + 1
    assert e["installed_s"] is not None
    restore = next(r for r in inj if r["action"] == "restore")
    assert sum(restore["gray_dropped"].values()) > 0  # the loss really happened (nftables' own counter)
    first = next(r for r in inj if r["action"] == "gray")
    assert set(first["operstate"].values()) == {"UP"}  # silent: the links stayed up


def test_host_failover_alone(host_and_ff):
    root, exp, metrics = host_and_ff
    e, _ = common_checks(root, metrics, "zcube")
    assert e["migrations"] >= 1 and e["installed_s"] is None  # no table changed: the hosts moved
    assert e["recovery_s"] <= rto_s(root, "zcube") + 0.5


def test_fast_failover_run(host_and_ff):
    root, exp, metrics = host_and_ff
    e, _ = common_checks(root, metrics, "roft")
    installed = read_jsonl(root / "roft" / "controller" / "installed.jsonl")
    assert sum(r["ff_protected"] for r in installed) > 0
    assert e["recovery_s"] <= e["installed_s"] + rto_s(root, "roft") + 0.5


def test_fast_failover_switches_over_with_the_controller_frozen(tmp_path):
    """The groups alone: freeze the controller, cut a ZCube fabric cable, and a flow that crossed it
    still arrives — the switch's own bucket counters show the backup bucket forwarded it."""
    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    doc = failplan.document(
        fab,
        [{"at_emulated_s": 0, "action": "down", "target": "cable:za0,zb0"}],
        "fast-failover",
        {"probe_hz": 0, "probe_window": 10, "probe_min_lost": 3, "probe_timeout_s": 1.5, "poll_s": 0},
    )
    link = doc["states"][0]["down_links"][0]
    gp = [p.name for p in fab.ports[: fab.n_gpus * 2]]
    flows = [(s, d, 50000) for s in gp for d in gp if s.split("-")[0] != d.split("-")[0]]
    src, dst, sport = next(f for f, x in zip(flows, crossing(fab, flows, [link])) if x)
    before = bridges()
    with LiveFabric(
        fab, EmulationConfig(), results_dir=str(tmp_path), log=lambda *_: None, failplan=doc, lldp_interval_s=0
    ) as lf:
        os.kill(lf.controller.pid, signal.SIGSTOP)
        try:
            for iface in doc["steps"][0]["ifaces"]:
                sh(f"ip link set dev {iface} down")
            b0 = dump_group_buckets("za0")
            proof = prove_path(LiveRun(lf.dir), src, dst, sport=sport)
            b1 = dump_group_buckets("za0")
        finally:
            os.kill(lf.controller.pid, signal.SIGCONT)
        left = [port for sw, port in proof.observed if sw == "za0"]
        assert left and 5 not in left, proof  # za0 forwarded it, not out of the dead port 5 (toward zb0)
        assert any(b == 1 and n - b0.get((g, b), 0) >= 20 and g >> 16 == 5 for (g, b), n in b1.items())
        assert proof.model[-1] in proof.observed, proof  # delivered by the destination's switch, around the dead cable
    assert bridges() == before


def test_a_flapping_cable(tmp_path_factory):
    """down/up twice mid-replay: every step injected and read back, the controller follows each state
    (degraded, healthy, degraded, healthy), every message intact."""
    ev = [{"at_emulated_s": 3.6, "action": "flap", "target": "cable:busiest", "period_emulated_s": 1.0, "count": 2}]
    root, exp, metrics = failure_run(tmp_path_factory, "flap", {"zcube": ev})
    inj = read_jsonl(root / "zcube" / "raw" / "rep0" / "injections.jsonl")
    steps = [r for r in inj if r["action"] in ("down", "up")]
    assert [r["action"] for r in steps] == ["down", "up", "down", "up"]
    assert [set(r["operstate"].values()) for r in steps] == [{"DOWN"}, {"UP"}, {"DOWN"}, {"UP"}]
    t0 = json.loads((root / "zcube" / "raw" / "rep0" / "run_clock.json").read_text())["t0_ns"]
    assert [round((r["t_ns"] - t0) / 1e9, 1) for r in steps] == [3.6, 4.1, 4.6, 5.1]
    t_end = json.loads((root / "zcube" / "raw" / "rep0" / "run_clock.json").read_text())["t_end_ns"]
    states = [
        r["down_links"]
        for r in read_jsonl(root / "zcube" / "controller" / "failures.jsonl")
        if r["event"] == "state" and t0 <= r["t_ns"] <= t_end
    ]
    link = steps[0]["links"]
    assert states[:4] == [link, [], link, []], states
    rows = metrics["failures"]["zcube"]["events"]
    assert len(rows) == 2 and all(r["integrity_ok"] and r["qps_unrecovered"] == 0 for r in rows)
