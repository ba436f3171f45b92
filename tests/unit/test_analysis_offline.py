"""The analysis tier, offline: a small real run folder (tests/data/mini-run, recorded by
`zlab run` on this machine kind, see its README) -> tables, metrics over repeats, every fidelity
rule, the markdown report. Each rule is shown to produce INVALID on records changed to break it."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from testbed.measure import report
from testbed.measure.report import MissingRecords, RunFolderError
from testbed.records import RecordError, read_jsonl
from tests.unit.minirun import MINI
from tests.unit.minirun import edit_json as _edit_json
from tests.unit.minirun import raw as _raw
from tests.unit.minirun import rewrite_jsonl as _rewrite_jsonl

LABELS = ("zcube", "roft")


def test_the_committed_run_is_small_and_complete():
    size = sum(p.stat().st_size for p in MINI.rglob("*") if p.is_file())
    assert size <= 2 * 1024 * 1024, size
    exp = json.loads((MINI / "experiment.json").read_text())
    assert list(exp["fabrics"]) == list(LABELS) and exp["spec"]["repeats"] >= 2
    for label in LABELS:
        for r in exp["fabrics"][label]["repeats"]:
            assert (_raw(MINI, label, r["index"]) / "transfers.jsonl").stat().st_size > 0


def test_tables_metrics_and_report_from_raw_records(run):
    metrics = report.build(run)
    exp = json.loads((run / "experiment.json").read_text())
    n_req, k = exp["spec"]["workload"]["requests"], exp["spec"]["repeats"]
    for label in LABELS:
        reps = metrics["fabrics"][label]["repeats"]
        assert len(reps) == k
        dil = exp["fabrics"][label]["scaling"]["dilation"]
        for m in reps:
            assert m["fidelity"] == {"valid": True, "reasons": []}, m["fidelity"]
            assert m["requests"] == m["requests_completed"] == m["kv_transfer_real_s"]["n"] == n_req
            assert m["messages_completed"] == m["messages_posted"]
            assert m["integrity_ok"] is True and m["below_floor_messages"] == 0
            req = pd.read_parquet(run / "tables" / f"{label}_rep{m['repeat']}_requests.parquet")
            msgs = pd.read_parquet(run / "tables" / f"{label}_rep{m['repeat']}_messages.parquet")
            t0 = json.loads((_raw(run, label, m["repeat"]) / "run_clock.json").read_text())["t0_ns"]
            for _, r in req.head(5).iterrows():  # recomputed by hand from the message records
                done_s = (msgs.loc[msgs["req"] == r["req"], "t_complete_ns"].max() - t0) / 1e9
                assert r["kv_transfer_real_s"] == pytest.approx((done_s - r["kv_ready_s"]) / dil)
            qs = pd.read_parquet(run / "tables" / f"{label}_rep{m['repeat']}_queue_samples.parquet")
            assert m["queue_max_emulated_bytes"] == qs["backlog_bytes"].max()
            lb = pd.read_parquet(run / "tables" / f"{label}_rep{m['repeat']}_link_bytes.parquet")
            assert (lb["predicted_bytes"] > 0).sum() == m["loaded_ports"] > 0
        # the summary is the mean and Student-t 95 % half-width over the repeats, by hand
        v = [r["kv_transfer_real_s"]["p99"] for r in reps]
        s = metrics["fabrics"][label]["summary"]["kv_p99_real_s"]
        mean = sum(v) / len(v)
        sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1))
        t = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776}[len(v)]
        assert s["mean"] == pytest.approx(mean) and s["ci95"] == pytest.approx(t * sd / math.sqrt(len(v)))
    c = metrics["comparison"]
    z, r = metrics["fabrics"]["zcube"]["repeats"], metrics["fabrics"]["roft"]["repeats"]
    ratios = [a["kv_transfer_real_s"]["p99"] / b["kv_transfer_real_s"]["p99"] for a, b in zip(z, r)]
    assert c["kv_p99_real_s"]["ratio"]["values"] == pytest.approx(ratios)
    assert c["kv_p99_real_s"]["a_better"] == sum(x < 1 for x in ratios)
    assert metrics["fabrics"]["zcube"]["repeats"][0]["messages_posted"] == 2 * r[0]["messages_posted"]
    text = (run / "report.md").read_text()
    assert "Fidelity: zcube **valid**; roft **valid**" in text
    p99 = metrics["fabrics"]["roft"]["summary"]["kv_p99_real_s"]
    assert (
        "| KV-transfer completion p99 (real ms) | " in text
        and f"{1e3 * p99['mean']:.2f} ± {1e3 * p99['ci95']:.2f}" in text
    )
    assert "zcube better in" in text and "## TTFT, decomposed" in text and "modelled (constant)" in text
    assert "## Fidelity checks" in text and "Published reference numbers" in text and "comparable" in text
    for png in (
        "queue_over_time",
        "max_queue_heatmap",
        "kv_completion_cdf",
        "ttft_cdf",
        "link_util_heatmap",
        "nic_kv_bytes",
        "link_bytes_model_vs_measured",
    ):
        assert (run / "plots" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"


def test_report_no_plots_rebuilds_the_numbers_without_drawing(run, capsys):
    """`zlab report --no-plots`: the same metrics and tables as a full rebuild, no figure drawn, and
    report.md says so instead of linking figures that this rebuild did not make."""
    from testbed.cli import main

    assert not (run / "plots").exists()
    assert main(["report", "--no-plots", str(run)]) == 0
    assert not (run / "plots").exists()
    text = (run / "report.md").read_text()
    assert "Not drawn in this rebuild (`zlab report --no-plots`)" in text and "](plots/" not in text
    lean = json.loads((run / "metrics.json").read_text())
    assert lean["fabrics"]["roft"]["summary"]["fidelity"]["valid"] is True
    assert report.build(run) == lean  # drawing changes no number
    assert (run / "plots" / "kv_completion_cdf.png").exists() and "](plots/kv_completion_cdf.png)" in (
        run / "report.md"
    ).read_text()


def _reasons(run, label="roft", k=0):
    metrics = report.build(run, plots_too=False)
    assert not metrics["fabrics"][label]["summary"]["fidelity"]["valid"]
    return metrics["fabrics"][label]["repeats"][k]["fidelity"]["reasons"]


def test_rule_replay_incomplete(run):
    _edit_json(
        run / "roft" / "run.json",
        lambda d: dict(d, replays=[dict(r, status="timeout") if r["repeat"] == 0 else r for r in d["replays"]]),
    )
    assert "replay timeout" in _reasons(run)


def _busy(path: Path, key: str, share: float):
    """From the middle of the repeat on, `key` rises by `share` of a core (or of the machine)."""
    recs = read_jsonl(path)
    t_mid = recs[len(recs) // 2]["t_ns"]
    cores = recs[0].get("cores", 1) if key == "machine_busy_s" else 1
    _rewrite_jsonl(path, lambda r: dict(r, **{key: r[key] + cores * share * max(0, r["t_ns"] - t_mid) / 1e9}))


def test_rule_cpu_bound_daemon(run):
    _busy(_raw(run, "roft") / "cpu.jsonl", "ovs_cpu_s", 0.95)
    assert any(r.startswith("CPU-bound: ovs at") for r in _reasons(run))


def test_rule_cpu_bound_machine(run):
    _busy(_raw(run, "roft") / "cpu.jsonl", "machine_busy_s", 0.95)
    assert any(r.startswith("CPU-bound: the machine at") for r in _reasons(run))


def test_rule_subsecond_saturation_is_not_averaged_away(run):
    """One ~250 ms sample interval at 100 % of a core is enough."""
    path = _raw(run, "zcube") / "cpu.jsonl"
    recs = read_jsonl(path)
    i = len(recs) // 2
    extra = (recs[i + 1]["t_ns"] - recs[i]["t_ns"]) / 1e9
    _rewrite_jsonl(
        path, lambda r: dict(r, agent_cpu_s=r["agent_cpu_s"] + (extra if r["t_ns"] > recs[i]["t_ns"] else 0))
    )
    assert any(r.startswith("CPU-bound: agent at") for r in _reasons(run, "zcube"))


def _saturate_interval(path: Path, i: int, key: str = "machine_busy_s"):
    """Sample interval i (rows i..i+1) at 100 % of the machine; every later row carries the extra."""
    recs = read_jsonl(path)
    extra = recs[0]["cores"] * (recs[i + 1]["t_ns"] - recs[i]["t_ns"]) / 1e9
    _rewrite_jsonl(path, lambda r: dict(r, **{key: r[key] + (extra if r["t_ns"] > recs[i]["t_ns"] else 0)}))


def test_rule_cpu_counts_only_the_replay_window(run):
    """The sampler starts before the agents' set-up: a saturated interval that ends before t0 (CI
    measured one at 92 % 1.2 s before the first release) does not void; the same interval once
    messages are in flight does."""
    path = _raw(run, "zcube") / "cpu.jsonl"
    t0 = json.loads((_raw(run, "zcube") / "run_clock.json").read_text())["t0_ns"]
    before = [i for i, r in enumerate(read_jsonl(path)[1:]) if r["t_ns"] < t0]
    assert before, "the committed run has no sample interval before t0"
    _saturate_interval(path, before[0])
    assert report.build(run, plots_too=False)["fabrics"]["zcube"]["repeats"][0]["fidelity"] == {
        "valid": True,
        "reasons": [],
    }
    inside = next(i for i, r in enumerate(read_jsonl(path)) if r["t_ns"] > t0)
    _saturate_interval(path, inside)
    assert any(r.startswith("CPU-bound: the machine at") for r in _reasons(run, "zcube"))


def test_rule_cpu_stops_at_the_last_message(run):
    """What runs after the last message (verify-paths' flow dumps, the failures' undoing) loads the
    machine but cannot stretch a transfer: the CPU rules read to t_replay_end_ns when the run
    recorded it, to t_end_ns before that (older runs keep their verdicts)."""
    path, clock = _raw(run, "zcube") / "cpu.jsonl", _raw(run, "zcube") / "run_clock.json"
    c = json.loads(clock.read_text())
    inside = [i for i, r in enumerate(read_jsonl(path)[:-1]) if c["t0_ns"] < r["t_ns"] and r["t_ns"] < c["t_end_ns"]]
    assert len(inside) >= 3, "the committed run has too few sample intervals inside its replay"
    last = inside[-1]
    _saturate_interval(path, last)
    assert any(r.startswith("CPU-bound: the machine at") for r in _reasons(run, "zcube"))
    end = read_jsonl(path)[last]["t_ns"] - 1  # the last message done just before that interval began
    _edit_json(clock, lambda d: dict(d, t_replay_end_ns=end))
    assert report.build(run, plots_too=False)["fabrics"]["zcube"]["repeats"][0]["fidelity"] == {
        "valid": True,
        "reasons": [],
    }


def test_rule_late_samples_count_the_whole_stall(run):
    q = _raw(run, "zcube") / "queues.jsonl"
    _rewrite_jsonl(q, lambda r: dict(r, late=r["samples"] // 5) if r.get("type") == "footer" else r)
    assert any("% of queue sample periods missed" in r for r in _reasons(run, "zcube"))


def test_rule_no_queue_samples(run):
    (_raw(run, "zcube") / "queues.jsonl").unlink()
    assert "no queue samples" in _reasons(run, "zcube")


def test_rule_calibration(run):
    _edit_json(run / "roft" / "run.json", lambda d: dict(d, calibration=dict(d["calibration"], ratio=0.5)))
    assert "calibration 50 % of the configured rate" in _reasons(run)


def test_rule_corrupted_transfers(run):
    first = [True]

    def corrupt(r):
        bad, first[0] = first[0], False
        return dict(r, integrity_ok=False) if bad else r

    _rewrite_jsonl(_raw(run, "zcube") / "transfers.jsonl", corrupt)
    assert "corrupted transfers" in _reasons(run, "zcube")


def test_rule_faster_than_the_serialisation_floor(run):
    """A many-frame message that arrived in no time: shaping let it pass unshaped."""

    def instant(r):
        return dict(r, t_last_rx_ns=r["t_first_tx_ns"] + 1000) if r["packets"] >= 8 else r

    _rewrite_jsonl(_raw(run, "roft") / "transfers.jsonl", instant)
    assert any("faster than their serialisation floor" in r for r in _reasons(run))


def test_rule_carried_utilisation_above_line_rate(run):
    """Add 10 % of a port's line rate more sent bytes than it can carry to every port's counter."""
    q = _raw(run, "roft") / "queues.jsonl"
    recs = read_jsonl(q)
    t_first = next(r["t_ns"] for r in recs if "t_ns" in r)
    exp = json.loads((run / "experiment.json").read_text())
    rate = 400e9 * exp["fabrics"]["roft"]["scaling"]["rate_scale"] / 8  # bytes/s of every ROFT port

    def more(r):
        if "x" in r:
            r["x"] = [x + int(1.1 * rate * (r["t_ns"] - t_first) / 1e9) for x in r["x"]]
        return r

    _rewrite_jsonl(q, more)
    assert any(r.startswith("carried utilisation") for r in _reasons(run))


def test_rule_agent_release_lateness(run):
    def late(r):
        return dict(r, t_post_ns=r["t_due_ns"] + 50_000_000)

    _rewrite_jsonl(_raw(run, "roft") / "transfers.jsonl", late)
    assert any(r.startswith("agent released messages late") for r in _reasons(run))


def test_rule_blocked_sends(run):
    _edit_json(
        _raw(run, "zcube") / "counters.json",
        lambda d: dict(
            d, ports={n: dict(p, tx_blocked=3 if n == "g0-p0" else p["tx_blocked"]) for n, p in d["ports"].items()}
        ),
    )
    assert "3 agent sends blocked by a full host queue" in _reasons(run, "zcube")


def test_rule_link_bytes_off_the_model(run):
    """Give every ROFT QP a source port the switches did not see: the model now routes their
    bytes over other spines than the queues counted them on."""

    def reroute(d):
        for q in d["qps"]:
            q["sport"] = q["sport"] ^ 0x0FFF
        return d

    _edit_json(_raw(run, "roft") / "counters.json", reroute)
    assert any("off the model" in r or "does not route through" in r for r in _reasons(run))


@pytest.mark.slow  # over 3 s: kept out of the fast loop, which must stay under a minute
def test_torn_last_line_is_skipped_a_damaged_one_is_not(run):
    tr = _raw(run, "roft") / "transfers.jsonl"
    before = report.build(run, plots_too=False)["fabrics"]["roft"]["repeats"][0]
    with tr.open("a") as fh:
        fh.write('{"src": "g0-p0", "dst"')  # a writer killed mid-record
    assert read_jsonl(tr).torn
    after = report.build(run, plots_too=False)["fabrics"]["roft"]["repeats"][0]
    assert after["kv_transfer_real_s"] == before["kv_transfer_real_s"]
    lines = tr.read_text().splitlines()
    lines.insert(1, "garbage")
    tr.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=r"transfers.jsonl:2: damaged record"):
        report.build(run, plots_too=False)


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(RunFolderError, match="not a zlab run folder"):
        report.build(tmp_path, plots_too=False)


def test_report_refuses_a_complete_run_without_raw_records(run):
    for label in LABELS:
        shutil.rmtree(run / label / "raw")
    with pytest.raises(MissingRecords, match="raw records are missing"):
        report.build(run, plots_too=False)


def test_rule_drops_outside_a_switch_queue_name_their_location(run):
    _edit_json(_raw(run, "roft") / "drops.json", lambda d: dict(d, delta=dict(d["delta"], ovs_sockets={"l0r0-p3": 5})))
    assert any(r.startswith("frames dropped outside a switch egress queue: 5 at ovs sockets") for r in _reasons(run))


def test_rule_agent_socket_drops(run):
    _edit_json(
        _raw(run, "zcube") / "counters.json",
        lambda d: dict(d, ports={n: dict(p, socket_drops=3 if n == "g9-p1" else 0) for n, p in d["ports"].items()}),
    )
    assert any("3 at agent sockets" in r for r in _reasons(run, "zcube"))


def test_rule_loss_no_counter_explains(run):
    def lossy(d):
        d["qps"][0]["requester"]["retransmits"] = 12
        return d

    _edit_json(_raw(run, "roft") / "counters.json", lossy)
    assert any("no drop counter explains" in r for r in _reasons(run))


def test_a_clean_run_accounts_every_location(run):
    m = report.build(run, plots_too=False)["fabrics"]["roft"]["repeats"][0]
    assert set(m["drops"]) == {
        "switch_queues",
        "ovs_port_counters",
        "ovs_sockets",
        "ovs_datapath",
        "switch_ports",
        "host_ports",
        "host_qdiscs",
        "agent_sockets",
    }


def test_an_invalid_verdict_says_what_to_change_and_retries_only_that_fabric(run, capsys):
    from testbed.cli import main
    from testbed.experiment import advice

    _busy(_raw(run, "roft") / "cpu.jsonl", "ovs_cpu_s", 0.95)
    metrics = report.build(run, plots_too=False)
    exp = json.loads((run / "experiment.json").read_text())
    a = advice.advise(exp, metrics)
    rho = exp["spec"]["emulation"]["rate_scale"]
    assert a.fabrics == ["roft"] and a.retry_possible
    (override,) = a.overrides
    assert override.startswith("emulation.rate_scale=") and float(override.split("=")[1]) <= rho / 2
    text = "\n".join(advice.lines(a, str(run)))
    assert f"zlab run --retry-invalid {run}" in text and "dilation" in text
    from testbed.cli.commands.run import retry_spec

    spec = retry_spec(str(run))
    assert list(spec["fabrics"]) == ["roft"] and spec["emulation"]["rate_scale"] <= rho / 2
    assert main(["run", "--retry-invalid", str(run), "--set", "repeats=1"]) == 2  # the earlier spec, unchanged


def test_steal_alone_is_not_answered_with_a_lower_rate(run):
    """Hypervisor steal is outside the run: the remedy is a rerun as is, never a slower run."""
    from testbed.experiment import advice

    recs = read_jsonl(_raw(run, "roft") / "cpu.jsonl")
    cores = recs[0]["cores"]
    _busy(_raw(run, "roft") / "cpu.jsonl", "machine_steal_s", 0.4 * cores)
    metrics = report.build(run, plots_too=False)
    reasons = metrics["fabrics"]["roft"]["summary"]["fidelity"]["reasons"]
    assert reasons and all("hypervisor stole" in r for r in reasons)
    a = advice.advise(json.loads((run / "experiment.json").read_text()), metrics)
    assert a.fabrics == ["roft"] and a.overrides == [] and a.rerun_as_is and a.retry_possible
    text = "\n".join(advice.lines(a, str(run)))
    assert "rerun as is" in text and "(same settings)" in text


@pytest.mark.slow  # over 3 s: kept out of the fast loop, which must stay under a minute
def test_retry_refuses_a_valid_run_and_an_unfixable_one(run, capsys):
    from testbed.cli import main

    report.build(run, plots_too=False)
    assert main(["run", "--retry-invalid", str(run)]) == 2
    assert "nothing to retry" in capsys.readouterr().err
    _rewrite_jsonl(_raw(run, "zcube") / "transfers.jsonl", lambda r: dict(r, integrity_ok=False))
    report.build(run, plots_too=False)
    assert main(["run", "--retry-invalid", str(run)]) == 2
    assert "not fixable by scaling" in capsys.readouterr().err


def test_rule_hypervisor_steal(run):
    _busy(_raw(run, "zcube") / "cpu.jsonl", "machine_steal_s", 0.5)
    assert any(r.startswith("CPU-bound: the hypervisor stole up to") for r in _reasons(run, "zcube"))


MS = 1_000_000  # ns


def _qp(stalls=(), repairs=(), moved=(), open_since=None):
    return {
        "stalls_ns": [[a * MS, b * MS] for a, b in stalls],
        "repairs_ns": [[a * MS, None if b is None else b * MS] for a, b in repairs],
        "migrations_ns": [t * MS for t in moved],
        "open_since_ns": open_since,
    }


@pytest.mark.parametrize(
    "q, want",
    [
        # a CI run (zcube, cable za1-p5, failure at 0, last switch installed at 19.8 ms): the QP's ACKs moved at
        # 35 ms for frames sent before the cut, so its loss gap (35 -> 558.7 ms) began after the repair; only its
        # go-back-N while the failure held shows it was hurt
        (_qp(stalls=[(-221.3, -20.7), (35.0, 558.7)]), ("unhurt", None)),
        (_qp(stalls=[(-221.3, -20.7), (35.0, 558.7)], repairs=[(558.7, 600.2)]), ("recovered", 600.2)),
        (_qp(stalls=[(-5.0, 80.0)]), ("recovered", 80.0)),  # the stall spans the failure
        (_qp(stalls=[(-5.0, 80.0)], repairs=[(60.0, 70.0)]), ("recovered", 80.0)),  # the later of the two
        (_qp(stalls=[(35.0, 300.0)], repairs=[(-50.0, -40.0)]), ("unhurt", None)),  # congestion; a repair before it
        (_qp(repairs=[(40.0, None)]), ("unrecovered", None)),  # went back and never got through
        # a gray failure: losses again and again until the reroute (19.8 ms here), and one NAK after it
        (_qp(repairs=[(2.0, 6.0), (9.0, 15.0), (25.0, 90.0), (400.0, 420.0)]), ("recovered", 90.0)),
        (_qp(stalls=[(3.0, 40.0)], moved=[5.0]), ("recovered", 40.0)),  # host failover: before its own move
        (_qp(open_since=10 * MS), ("unrecovered", None)),  # silent since before the failure ended
    ],
)
def test_how_a_failure_treated_a_qp(q, want):
    from testbed.measure.failures import qp_outcome

    verdict, t = qp_outcome(q, t_fail=0, t_fixed=int(19.8 * MS), t_next=10_000 * MS)
    assert (verdict, None if t is None else t / MS) == (want[0], pytest.approx(want[1]) if want[1] else None)


def test_carried_rule_window_holds_ten_allowances_by_hand():
    """The carried rule's allowance (two frames) must be at most a tenth of a window's capacity, or
    the rule is blind: at 0.17 Mb/s and 9,014-byte frames, 2 x 9,014 x 8 / 170,000 / 0.1 = 8.48 s."""
    from testbed.measure.metrics import carried_rule_window_s

    class Fd:
        burst_bytes = 9014

        @staticmethod
        def port_rate_bps(ports):
            return np.array([{"a": 170e3, "b": 2.5e6}[p] for p in ports])

    assert carried_rule_window_s(Fd, 0.1, {"a", "b"}) == pytest.approx(2 * 9014 * 8 / 170e3 / 0.1)
    assert carried_rule_window_s(Fd, 0.1, {"b"}) == pytest.approx(2 * 9014 * 8 / 2.5e6 / 0.1)  # 0.577 s
    assert carried_rule_window_s(Fd, 10.0, {"a"}) == 10.0  # never narrower than the report's window
    assert carried_rule_window_s(Fd, 0.1, set()) == 0.1
