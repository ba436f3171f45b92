"""The ns-3 referee on real emulated runs: a small `zlab run` that asks for the referee in its spec
(both scales), and `zlab referee` run again by hand on the same folder. The bands are the issue's:
link bytes 2 %, KV p50/p99 15 %, the ZCube/ROFT p99 ratio 20 %, judged raw at the same scale, where
ns-3's links are the emulation's link model (a one-frame token bucket, no serialisation). KV p50 of
requests a few frames long is reported, not asserted: one frame is ~15 % of it (docs/referee.md)."""

import json

import pytest

from .conftest import zlab


@pytest.fixture(scope="module")
def refereed(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    proc = zlab(
        "run",
        "--results",
        str(out),
        "--no-progress",
        "--set",
        "repeats=2",
        "--set",
        "workload.requests=12",
        "--set",
        "workload.offered_load=0.5",
        "--set",
        "measurement.calibrate=false",
        "--set",
        "referee.scales=[same, real]",
        "--set",
        "referee.real_requests=2",
        timeout=900,
    )
    assert proc.returncode in (0, 3), proc.stderr  # 3: the emulation itself voided a repeat (machine-bound)
    (root,) = out.iterdir()
    return root, proc


def test_the_run_spec_asks_for_the_referee_and_gets_both_scales(refereed):
    root, proc = refereed
    for scale in ("same", "real"):
        s = json.loads((root / "referee" / f"{scale}.json").read_text())
        assert s["scale"] == scale and set(s["fabrics"]) == {"zcube", "roft"}
        for label, f in s["fabrics"].items():
            # a repeat the emulation voided (exit 3, machine-bound) is left out and named, never compared
            out = [e["repeat"] for e in s["excluded"] if e["label"] == label]
            assert all(e["reasons"] for e in s["excluded"]) and (proc.returncode == 3 or not out)
            assert f["repeats"] + len(out) == 2 and f["repeats"] >= 1, (f["repeats"], s["excluded"])
            assert f["drops"] == {"emu": 0, "ns3": 0}
    same = json.loads((root / "referee" / "same.json").read_text())
    voided = {(e["label"], e["repeat"]) for e in same["excluded"]}
    for label in ("zcube", "roft"):
        for rep in (r for r in (0, 1) if (label, r) not in voided):
            d = root / "referee" / "same" / label / f"rep{rep}"
            assert (d / "scenario.txt").exists() and (d / "messages.csv").stat().st_size > 0
            sched = json.loads((root / label / "raw" / f"rep{rep}" / "schedule.json").read_text())
            assert len(sched["messages"]) == sum(1 for _ in open(d / "messages.csv")) - 1
    report = (root / "report.md").read_text()
    assert "## Emulation vs ns-3 (independent referee)" in report
    assert "### Same scale (emulated units)" in report and "### Real scale" in report


def test_same_scale_agrees_within_the_bands(refereed):
    root, _ = refereed
    s = json.loads((root / "referee" / "same.json").read_text())
    assert s["link_model"] == "bucket"
    checks = s["verdict"]["checks"]
    for label in ("zcube", "roft"):
        for what in ("link bytes", "KV p99", "ns-3 complete", "routing oracle"):
            assert checks[f"{label} {what}"], (label, what, s["verdict"])
    assert checks["zcube/roft KV p99 ratio"], s["verdict"]
    for f in s["fabrics"].values():
        assert f["links"]["compared"] > 0 and f["links"]["max_error_beyond_frame"] <= 0.02


def test_completion_times_survive_the_scaling(refereed):
    """Real rates and sizes in ns-3 against the emulation converted to real units (2 requests)."""
    root, _ = refereed
    s = json.loads((root / "referee" / "real.json").read_text())
    assert s["requests"] == 2
    for label, f in s["fabrics"].items():
        assert f["kv_p99"]["gap"] <= 0.25, (label, f["kv_p99"])
        assert max(f["ns3_wall_s"]) < 120


def test_cli_reruns_the_referee_on_the_folder(refereed):
    root, _ = refereed
    proc = zlab("referee", str(root), "--scale", "same", "--repeats", "1", "--json", timeout=300)
    assert proc.returncode in (0, 3), proc.stderr
    s = json.loads(proc.stdout)["same"]
    assert all(f["repeats"] == 1 for f in s["fabrics"].values())
    doctor = zlab("doctor", "--json", timeout=120)
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "ns-3 referee")
    assert check["status"] == "ok", check
