"""The analysis tier, offline: a small real run folder (tests/data/mini-run, recorded by
`zlab run` on this machine kind, see its README) -> tables, metrics, every fidelity rule, the
markdown report. Each rule is shown to produce INVALID on records changed to break it."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from testbed.measure import report
from testbed.measure.report import RunFolderError
from testbed.records import RecordError, read_jsonl

MINI = Path(__file__).resolve().parents[1] / "data" / "mini-run"
LABELS = ("zcube", "roft")


@pytest.fixture
def run(tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(MINI, dst)
    return dst


def _edit_json(path: Path, **fields):
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def _rewrite_jsonl(path: Path, fn):
    recs = [fn(r) for r in read_jsonl(path)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_the_committed_run_is_small_and_complete():
    size = sum(p.stat().st_size for p in MINI.rglob("*") if p.is_file())
    assert size <= 2 * 1024 * 1024, size
    exp = json.loads((MINI / "experiment.json").read_text())
    assert set(exp["fabrics"]) == set(LABELS)
    for label in LABELS:
        assert (MINI / label / "raw" / "transfers.jsonl").stat().st_size > 0


def test_tables_metrics_and_report_from_raw_records(run):
    metrics = report.build(run)
    exp = json.loads((run / "experiment.json").read_text())
    n_req = exp["spec"]["workload"]["requests"]
    for label in LABELS:
        m = metrics[label]
        assert m["fidelity"] == {"valid": True, "reasons": []}, m["fidelity"]
        assert m["requests"] == m["requests_completed"] == m["kv_transfer_real_s"]["n"] == n_req
        assert m["messages_completed"] == m["messages_posted"] == exp["fabrics"][label]["figures"]["messages"]
        assert m["integrity_ok"] is True
        req = pd.read_parquet(run / "tables" / f"{label}_requests.parquet")
        msgs = pd.read_parquet(run / "tables" / f"{label}_messages.parquet")
        # the request's KV time is its last shard's completion minus its KV-ready time, in real units
        dil = exp["fabrics"][label]["scaling"]["dilation"]
        t0 = json.loads((run / label / "raw" / "run_clock.json").read_text())["t0_ns"]
        for _, r in req.head(5).iterrows():  # recomputed by hand from the message records
            done_s = (msgs.loc[msgs["req"] == r["req"], "t_complete_ns"].max() - t0) / 1e9
            assert r["kv_transfer_real_s"] == pytest.approx((done_s - r["kv_ready_s"]) / dil)
        assert (req["kv_transfer_real_s"] > 0).all()
        assert len(msgs) == m["messages_completed"]
        assert msgs["completion_real_s"].max() == pytest.approx(msgs["completion_s"].max() / dil)
        qs = pd.read_parquet(run / "tables" / f"{label}_queue_samples.parquet")
        assert m["queue_max_bytes"] == qs["backlog_bytes"].max()
    assert metrics["zcube"]["messages_posted"] == 2 * metrics["roft"]["messages_posted"]  # two QPs per ZCube shard
    text = (run / "report.md").read_text()
    assert "Fidelity: zcube **valid**; roft **valid**" in text
    p99 = metrics["roft"]["kv_transfer_real_s"]["p99"]
    assert f"| KV-transfer completion p99 (real ms) |" in text and f"{1e3 * p99:.2f} (n={n_req})" in text
    assert "## Setup" in text and "time dilation" in text and "Published reference numbers" in text
    for png in ("queue_over_time", "max_queue_heatmap", "kv_completion_cdf", "ttft_cdf", "link_util_heatmap",
                "nic_kv_bytes"):
        assert (run / "plots" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"


def _reasons(run, label="roft"):
    return report.build(run)[label]["fidelity"]["reasons"]


def test_rule_replay_incomplete(run):
    _edit_json(run / "roft" / "run.json", replay_status="timeout")
    assert "replay timeout" in _reasons(run)


def test_rule_cpu_bound(run):
    cpu = run / "roft" / "raw" / "cpu.jsonl"
    t_mid = read_jsonl(cpu)[len(read_jsonl(cpu)) // 2]["t_ns"]

    def busy(r):  # from the middle of the replay on, ovs-vswitchd uses 95 % of a core more
        r["ovs_cpu_s"] += 0.95 * max(0, r["t_ns"] - t_mid) / 1e9
        return r

    _rewrite_jsonl(cpu, busy)
    assert any(r.startswith("CPU-bound: ovs at") for r in _reasons(run)), _reasons(run)


def test_rule_late_samples(run):
    q = run / "zcube" / "raw" / "queues.jsonl"
    _rewrite_jsonl(q, lambda r: dict(r, late=r["samples"] // 5) if r.get("type") == "footer" else r)
    assert any("% of queue samples late" in r for r in _reasons(run, "zcube"))


def test_rule_no_queue_samples(run):
    (run / "zcube" / "raw" / "queues.jsonl").unlink()
    assert "no queue samples" in _reasons(run, "zcube")


def test_rule_calibration(run):
    calib = json.loads((run / "roft" / "run.json").read_text())["calibration"]
    _edit_json(run / "roft" / "run.json", calibration=dict(calib, ratio=0.5))
    assert "calibration 50 % of the configured rate" in _reasons(run)


def test_rule_corrupted_transfers(run):
    tr = run / "zcube" / "raw" / "transfers.jsonl"
    first = [True]

    def corrupt(r):
        if first[0]:
            first[0] = False
            return dict(r, integrity_ok=False)
        return r

    _rewrite_jsonl(tr, corrupt)
    assert "corrupted transfers" in _reasons(run, "zcube")


def test_torn_last_line_is_skipped_a_damaged_one_is_not(run):
    tr = run / "roft" / "raw" / "transfers.jsonl"
    before = report.build(run)["roft"]
    with tr.open("a") as fh:
        fh.write('{"src": "g0-p0", "dst"')  # a writer killed mid-record
    assert read_jsonl(tr).torn
    after = report.build(run)["roft"]
    assert after["kv_transfer_real_s"] == before["kv_transfer_real_s"]
    lines = tr.read_text().splitlines()
    lines.insert(1, "garbage")
    tr.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=r"transfers.jsonl:2: damaged record"):
        report.build(run)


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(RunFolderError, match="not a zlab run folder"):
        report.build(tmp_path)
