"""Lossless mode in the emulation, end to end on real Mininet/OVS: the incast of the ECN/DCQCN
e2e test (ZCube(4,2), size scale 0.2, a tiny model) with PFC-like pauses and no other congestion
control. Every repeat: pauses happen, nothing is dropped anywhere, every message arrives whole, and
the pause loop reacts within what real PFC's headroom covers.

Why a 4 MB buffer: with HPCC's 32 MB a 9,000-byte frame stands for 45 KB here, and the incast's
queue (p99 ~140 real us without congestion control, ~3.5 MB at 200 Gb/s) stays just below the
dynamic XOFF; at 4 MB XOFF is a few emulated frames above the reserve, so the test is about the
pauses, not about whether they happen."""

import json

import pandas as pd
import pytest

from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve
from testbed.experiment.runner import run_experiment

from .test_emulation_congestion_e2e import BASE, TINY_MODEL  # the same incast, model and repeats

SETS = [*BASE, "congestion.pfc_enabled=true", "congestion.pfc_buffer_bytes=4000000"]


@pytest.fixture(scope="module")
def lossless(tmp_path_factory):
    spec = especs.load(None, SETS)
    del spec["fabrics"]["roft"]
    spec["workload"]["model"] = TINY_MODEL
    root, status = run_experiment(
        resolve(spec), results_dir=str(tmp_path_factory.mktemp("lossless")), log=print, show_progress=False
    )
    assert status == "complete"
    return root, json.loads((root / "metrics.json").read_text())


def test_incast_in_lossless_mode_pauses_and_loses_nothing(lossless):
    root, m = lossless
    for rep in m["fabrics"]["zcube"]["repeats"]:
        assert rep["integrity_ok"] and rep["messages_completed"] == rep["messages_posted"]
        assert rep["queue_drops"] == 0 and not rep["drops_outside"] and rep["transport_loss_events"] == 0, rep
        loop = rep["pause_loop"]
        assert loop["pauses"] > 0 and loop["late_periods"] <= 0.01 * loop["samples"]
        assert loop["reaction_real_ns_p99"] <= loop["headroom_real_ns"]
        assert rep["fidelity"]["valid"], rep["fidelity"]
    switch_ports = set(json.loads((root / "zcube" / "raw" / "rep0" / "ports.json").read_text()))
    for raw in sorted((root / "zcube" / "raw").glob("rep[0-9]")):
        ev = pd.read_csv(raw / "pfc.csv")
        pauses, resumes = ev[ev.event == 1], ev[ev.event == 0]
        assert len(pauses) == len(resumes)  # every gate shut was opened again
        senders = {p for p in pauses.peer_port}
        print(f"{raw.name}: {len(pauses)} pauses of {sorted(senders)}, causes {sorted(set(pauses.cause_port))}")
        gpus = {s for s in senders if s.startswith("g")}
        assert gpus and set(pauses.cause_port) <= switch_ports  # GPU NIC ports held; only switch egress ports decide
        assert senders - gpus <= set(pauses.cause_port)  # a switch port held was itself over XOFF: propagation
    e = m["emulation_congestion"]["zcube"]["lossless"]
    print(
        f"pauses {e['pauses']['mean']:.0f}; reaction p50 {e['reaction_real_ns_p50']['mean']:.0f} ns, "
        f"p99 {e['reaction_real_ns_p99']['mean']:.0f} ns real-equivalent; headroom covers {e['headroom_real_ns']:.0f} ns"
    )
    assert "Lossless mode (egress-triggered pauses" in (root / "report.md").read_text()


def test_a_cable_failure_under_lossless_and_dcqcn_recovers_with_every_message_intact(tmp_path_factory):
    """The same incast with ECN + DCQCN on top of lossless mode, the busiest switch-to-switch cable cut
    1 emulated second in and rerouted by the controller: the QPs it hit recover, every message
    arrives whole, the pause loop keeps working across the reroute (its feeding sets include the
    degraded routes), and frames are lost only on the cut cable (excused and counted)."""
    events = [{"at_emulated_s": 1.0, "action": "down", "target": "cable:busiest"}]
    sets = [s for s in SETS if not s.startswith("repeats=")] + [
        "repeats=1",
        "congestion.ecn_enabled=true",
        "congestion.cc=dcqcn",
        f"failures.events={json.dumps({'zcube': events})}",
    ]
    spec = especs.load(None, sets)
    del spec["fabrics"]["roft"]
    spec["workload"]["model"] = TINY_MODEL
    root, status = run_experiment(
        resolve(spec), results_dir=str(tmp_path_factory.mktemp("lossless-fail")), log=print, show_progress=False
    )
    assert status == "complete"
    m = json.loads((root / "metrics.json").read_text())
    rep = m["fabrics"]["zcube"]["repeats"][0]
    (e,) = m["failures"]["zcube"]["events"]
    print(
        f"cut {e.get('target')}: detected {e['detection_s']:.3f} s, installed {e['installed_s']}, "
        f"QPs hit {e['qps_hit']}, recovered {e['qps_recovered']}; pauses {rep['pause_loop']['pauses']} "
        f"({rep['pause_loop']['pauses_after_failure']} after the cut, {rep['pause_loop']['pauses_on_detours']} caused "
        f"at detour ports, holding {rep['pause_loop']['held_by_detours']}); "
        f"excused {rep['drops_excused']}; fidelity {rep['fidelity']}"
    )
    assert e["integrity_ok"] is True and e["qps_hit"] >= 1 and e["qps_unrecovered"] == 0
    assert rep["integrity_ok"] and rep["messages_completed"] == rep["messages_posted"]
    assert rep["pause_loop"]["pauses"] > 0 and not rep["drops_outside"] and not rep["loss_unexplained"]
    assert rep["pause_loop"]["pauses_after_failure"] is not None  # the report's failure-window row is filled
    plan = json.loads((root / "zcube" / "raw" / "rep0" / "pause_plan.json").read_text())
    assert plan["feeds"]  # built with the degraded tables (unit-tested: test_emulation_pauses.py)


def test_a_flap_and_a_fast_failover_under_lossless_mode_lose_nothing(tmp_path_factory):
    """ZCube's busiest switch-to-switch cable flaps three times (controller reroutes each way) and
    ROFT's busiest cable goes down under fast-failover groups, in lossless mode without other
    congestion control: every message arrives whole, no frame is lost outside the cut cables, and
    the report counts the pauses after the first failure and those caused at detour ports."""
    flap = [{"at_emulated_s": 1.0, "action": "flap", "target": "cable:busiest", "period_emulated_s": 1.0, "count": 3}]
    down = [{"at_emulated_s": 1.0, "action": "down", "target": "cable:busiest"}]
    sets = [s for s in SETS if not s.startswith("repeats=")] + [
        "repeats=1",
        f"failures.events={json.dumps({'zcube': flap, 'roft': down})}",
        f"failures.recovery={json.dumps({'roft': 'fast-failover'})}",
    ]
    spec = especs.load(None, sets)
    spec["workload"]["model"] = TINY_MODEL
    root, status = run_experiment(
        resolve(spec), results_dir=str(tmp_path_factory.mktemp("lossless-flap")), log=print, show_progress=False
    )
    assert status == "complete"
    m = json.loads((root / "metrics.json").read_text())
    for label in ("zcube", "roft"):
        rep = m["fabrics"][label]["repeats"][0]
        loop = rep["pause_loop"]
        print(
            f"{label}: {len(m['failures'][label]['events'])} failure events; pauses {loop['pauses']} "
            f"({loop['pauses_after_failure']} after the first failure, {loop['pauses_on_detours']} at detour ports); "
            f"fidelity {rep['fidelity']}"
        )
        assert rep["integrity_ok"] and rep["messages_completed"] == rep["messages_posted"]
        assert not rep["drops_outside"] and not rep["loss_unexplained"], rep["fidelity"]
        assert loop["pauses_after_failure"] is not None
    text = (root / "report.md").read_text()
    assert "after the first failure" in text and "caused at detour ports" in text
