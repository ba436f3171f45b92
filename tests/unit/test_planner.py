"""The scaling planner's arithmetic against the design note's formulas, by hand."""

import json

import pytest

from testbed.experiment import planner
from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve


@pytest.fixture
def capacity(tmp_path, monkeypatch):
    monkeypatch.setenv("ZLAB_STATE_DIR", str(tmp_path))

    def set_(forwards_per_core_s):
        (tmp_path / "capacity.json").write_text(json.dumps({"forwards_per_core_s": forwards_per_core_s}))

    return set_


def test_assessment_of_the_spec_as_given(capacity):
    capacity(20000.0)
    exp = resolve(especs.load(None, ["workload.requests=20", "repeats=2"]))
    c = planner.assess(exp)
    frame = 4096 + 20 + 8 + 12 + 16 + 4 + 14  # path-MTU payload + IP, UDP, BTH, RETH, ICRC, Ethernet
    assert c.frame_bytes == frame
    assert c.capacity_measured and c.forwards_budget_per_s == pytest.approx(0.7 * 20000)
    assert c.dilation == pytest.approx(c.size_scale / c.rate_scale)
    # k frames in real bytes: 4 x F / size_scale
    assert c.smallest_representable_real_queue_bytes == pytest.approx(4 * frame / 2.5e-4)
    assert not c.queue_representable and any("not representable" in n for n in c.notes)
    peak = max(fr.figures["peak_switch_forwards_per_s"] for fr in exp.fabrics.values())
    assert c.peak_forwards_per_s == peak


def test_queue_faithful_represents_the_xoff_and_keeps_the_headroom(capacity):
    capacity(20000.0)
    exp = resolve(especs.load(None, ["workload.requests=20", "repeats=3"]))
    c = planner.queue_faithful(exp, budget_s=600)
    q = exp.spec["measurement"]["xoff_real_bytes"]
    assert c.size_scale == pytest.approx(4 * c.frame_bytes / q)  # sigma >= k F / Q, at equality
    # the peak grows linearly with rate_scale: at the chosen rate the binding limit is met exactly
    # (ovs-vswitchd <= 70 % of its capacity, the agent <= 70 % of its, both together <= one core)
    applied = resolve(especs.load(None, ["workload.requests=20", "repeats=3"] + planner.overrides(c)))
    assert planner.rate_limit_factor(applied) == pytest.approx(1.0, rel=0.02)
    peak = max(fr.figures["peak_switch_forwards_per_s"] for fr in applied.fabrics.values())
    nic = max(fr.figures["peak_nic_frames_per_s"] for fr in applied.fabrics.values())
    ovs, agent = peak / 20000, 2 * nic / planner.UNMEASURED_AGENT_CAPACITY
    assert ovs <= 0.7 * 1.02 and agent <= 0.7 * 1.02 and ovs + agent <= 0.7 * 1.02
    after = planner.assess(applied)
    assert after.queue_representable and after.expected_wall_s <= 600 * 1.05


def test_unmeasured_capacity_is_assumed_and_said(capacity, tmp_path):
    exp = resolve(especs.load(None, ["workload.requests=10", "repeats=1"]))
    c = planner.assess(exp)
    assert not c.capacity_measured and any("not measured" in n for n in c.notes)


def test_capacity_curve_is_interpolated_at_the_runs_link_rate(tmp_path, monkeypatch):
    """ovs-vswitchd's capacity depends on the link rate (slow links: one frame per wake-up); the
    planner reads the measured curve at the rate a choice would give its links."""
    monkeypatch.setenv("ZLAB_STATE_DIR", str(tmp_path))
    curve = [
        {"link_rate_mbps": 10.0, "forwards_per_core_s": 10000.0, "agent_frames_per_core_s": 15000.0},
        {"link_rate_mbps": 100.0, "forwards_per_core_s": 40000.0, "agent_frames_per_core_s": 30000.0},
    ]
    (tmp_path / "capacity.json").write_text(
        json.dumps({"forwards_per_core_s": 10000.0, "agent_frames_per_core_s": 15000.0, "curve": curve})
    )
    assert planner.capacity_at(10**1.5) == pytest.approx((25000.0, 22500.0))  # halfway in log(rate)
    assert planner.capacity_at(1.0) == pytest.approx((10000.0, 15000.0))  # clamped at the ends
    assert planner.capacity_at(1e4) == pytest.approx((40000.0, 30000.0))
    base = ["workload.requests=20", "repeats=3"]
    c = planner.queue_faithful(resolve(especs.load(None, base)), budget_s=1e6)
    applied = resolve(especs.load(None, base + planner.overrides(c)))
    # at the chosen rate, the binding fabric sits exactly at the headroom of the capacity *at its
    # own link rate* (by hand: shares = peak / capacity_at(min link rate))
    worst = 0.0
    for fr in applied.fabrics.values():
        f = fr.figures
        cap, acap = planner.capacity_at(min(f["link_rates_mbps"]))
        ovs, agent = f["peak_switch_forwards_per_s"] / cap, 2 * f["peak_nic_frames_per_s"] / acap
        worst = max(worst, max(ovs, agent, ovs + agent) / 0.7)
    assert worst == pytest.approx(1.0, rel=0.02)
    # a flat capacity at the curve's best point would have allowed a faster, CPU-bound run
    (tmp_path / "capacity.json").write_text(
        json.dumps({"forwards_per_core_s": 40000.0, "agent_frames_per_core_s": 30000.0})
    )
    flat = planner.queue_faithful(resolve(especs.load(None, base)), budget_s=1e6)
    assert flat.rate_scale > 1.2 * c.rate_scale


def test_the_default_rate_is_capped_by_a_slow_machines_capacity(capacity, capsys, tmp_path):
    """A default too fast for the measured capacity is lowered to what it allows and said so; a
    rate the user chose is left alone (the assessment warns); a default that fits is untouched."""
    from testbed.cli.experiments import resolved

    base = ["workload.requests=10", "repeats=1"]
    default = resolve(especs.load(None, base)).spec["emulation"]["rate_scale"]
    capacity(1000.0)  # far below what the default needs
    exp = resolved(None, base)
    rate = exp.spec["emulation"]["rate_scale"]
    assert rate < default and planner.rate_limit_factor(exp) == pytest.approx(1.0, rel=0.02)
    assert "lowered to" in exp.scaling_choice["notes"][0]
    chosen = resolved(None, base + [f"emulation.rate_scale={default}"])
    assert chosen.spec["emulation"]["rate_scale"] == default
    assert any("expect the fidelity guard to find the run CPU-bound" in n for n in chosen.scaling_choice["notes"])
    spec = tmp_path / "s.yaml"
    spec.write_text(f"emulation:\n  rate_scale: {default}\n")
    assert resolved(str(spec), base).spec["emulation"]["rate_scale"] == default
    capacity(1e9)  # a fast machine: the tested preset stays as it is
    assert resolved(None, base).spec["emulation"]["rate_scale"] == default


def test_the_referee_evidence_nearest_the_size_scale_is_quoted(tmp_path, monkeypatch):
    def fab(p50, p99, emu_s, ns3_s):
        return {
            "kv_p50_gap": p50,
            "kv_p99_gap": p99,
            "max_queue_delay_real_s": {"emu": emu_s, "ns3": ns3_s},
            "max_queue_real_bytes": {"emu": 1.0, "ns3": 1.0},
        }

    evidence = tmp_path / "evidence.json"
    evidence.write_text(
        json.dumps(
            {
                "entries": [
                    {
                        "run": "run-coarse",
                        "size_scale": 2.5e-4,
                        "fabrics": {"a": fab(0.02, 0.01, 6e-4, 2e-7), "b": fab(0.23, 0.07, 1e-2, 9e-6)},
                    },
                    {"run": "run-fine", "size_scale": 0.0209, "fabrics": {"a": fab(0.01, 0.004, 8e-6, 2e-7)}},
                ]
            }
        )
    )
    monkeypatch.setattr(planner, "EVIDENCE", evidence)
    coarse = planner.referee_note(2.5e-4)
    assert "run run-coarse" in coarse and "at this size scale" in coarse and "within 23 %" in coarse
    assert "10,000 µs emulated vs 9.0 µs real" in coarse and "do not survive" in coarse
    fine = planner.referee_note(0.01)  # nearer 0.0209 than 2.5e-4 in log scale
    assert "run run-fine" in fine and "nearest refereed" in fine and "within 1 %" in fine
    monkeypatch.setattr(planner, "EVIDENCE", tmp_path / "missing.json")
    assert planner.referee_note(2.5e-4) is None


def test_the_shipped_referee_evidence_reaches_the_assessment(capacity):
    exp = resolve(especs.load(None, []))
    notes = planner.assess(exp).notes
    assert any(n.startswith("ns-3 at real rates and sizes") for n in notes), notes


def test_capacity_shrinks_with_the_switch_ports_ovs_polls(capacity, tmp_path):
    """ovs-vswitchd's userspace main thread polls every switch port on each wake-up, so the capacity
    measured on the probe's fabric (ZCube(4,2): 64 switch ports) is scaled by 64 / ports, by hand."""
    capacity(3828.0)
    assert planner.capacity_probe_switch_ports() == 96 - 32  # 48 links, two ends each, minus 32 GPU ports
    fig = {"link_rates_mbps": [2.5], "peak_switch_forwards_per_s": 163.0, "peak_nic_frames_per_s": 0.0}
    small = planner.shares({**fig, "switch_ports": 48})  # a smaller fabric is never credited more
    assert small[2] == pytest.approx(3828.0)
    big = planner.shares({**fig, "switch_ports": 1024})  # ZCube(16,2)
    assert big[2] == pytest.approx(3828.0 * 64 / 1024)  # 239.25 forwards per core-second
    assert big[0] == pytest.approx(163.0 / 239.25)
    # a record that says what it was measured on wins over the probe's spec
    (tmp_path / "capacity.json").write_text(json.dumps({"forwards_per_core_s": 3828.0, "switch_ports": 128}))
    assert planner.shares({**fig, "switch_ports": 1024})[2] == pytest.approx(3828.0 * 128 / 1024)


def test_a_large_fabric_gets_its_default_rate_lowered_and_the_reason_said(capacity):
    capacity(3828.0)
    base = ["workload.requests=10", "repeats=1", "fabrics={z16: 'zcube:n=16'}"]
    exp = resolve(especs.load(None, base))
    fig = exp.fabrics["z16"].figures
    assert fig["switch_ports"] == 1024
    c = planner.assess(exp)
    assert c.capacity_forwards_per_core_s == pytest.approx(3828.0 * 64 / 1024)
    assert any("switch ports ovs-vswitchd polls" in n and "1,024" in n for n in c.notes)
    # the default rate is lowered so that the peak fits 70 % of the scaled capacity
    g = planner.rate_limit_factor(exp)
    assert fig["peak_switch_forwards_per_s"] * g == pytest.approx(0.7 * 3828.0 * 64 / 1024, rel=0.02)
