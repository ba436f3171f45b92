"""The report's sections one by one, on tests/data/mini-run's real metrics: each says what its
inputs say (cells recomputed here from the metrics), and the report is those sections in order."""

import copy
import shutil
from pathlib import Path

import pytest

from testbed.measure import markdown as md
from testbed.measure import report
from testbed.records import read_json

MINI = Path(__file__).resolve().parents[1] / "data" / "mini-run"


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    """(run, experiment, metrics) of the committed mini-run, built once; the plots are not drawn
    (they take most of the build and no section here reads them)."""
    root = tmp_path_factory.mktemp("mini") / "run"
    shutil.copytree(MINI, root)
    metrics = report.build(root, plots_too=False)
    return read_json(root / "run.json"), read_json(root / "experiment.json"), metrics


def test_status_names_the_run_and_each_fabrics_verdict(mini):
    run, _, metrics = mini
    fabs = metrics["fabrics"]
    lines = md.status(run, fabs)
    assert lines[0] == f"# zlab run `{run['run_id']}`"
    assert lines[2] == "Status: **complete**"
    assert lines[4] == "Fidelity: zcube **valid**; roft **valid**"
    stopped = md.status(dict(run, status="incomplete", cause="KeyboardInterrupt"), fabs)
    assert "INCOMPLETE" in stopped[2] and stopped[2].endswith("(cause: KeyboardInterrupt)")


def test_status_lists_a_retaken_repeat_and_where_its_voided_data_is(mini):
    run, _, metrics = mini
    fabs = copy.deepcopy(metrics["fabrics"])
    fabs["roft"]["repeats"][1]["voided_attempts"] = [{"folder": "rep1.void1", "reason": "steal 40 %"}]
    fabs["roft"]["summary"]["fidelity"] = {"valid": False, "reasons": ["too hot"]}
    lines = md.status(run, fabs)
    assert lines[4] == "Fidelity: zcube **valid**; roft **INVALID** (too hot)"
    assert lines[-1].startswith("Re-taken repeats") and "roft repeat 1 (steal 40 %" in lines[-1]
    assert "roft/raw/rep1.void1" in lines[-1]


def test_headline_cells_are_the_summaries_and_the_comparison(mini):
    _, _, metrics = mini
    fabs, cmp_ = metrics["fabrics"], metrics["comparison"]
    lines = md.headline(metrics)
    k = fabs["zcube"]["summary"]["repeats"]
    assert f"over {k} independent repeats" in lines[0]
    assert lines[2] == "| metric | zcube | roft | zcube/roft | zcube better in |"
    rows = {r.split(" | ")[0][2:]: r.strip("| ").split(" | ")[1:] for r in lines[4:]}
    assert len(rows) == len(md.ROWS)
    p99 = rows["KV-transfer completion p99 (real ms)"]
    for lab, cell in zip(("zcube", "roft"), p99):
        s = fabs[lab]["summary"]["kv_p99_real_s"]
        assert cell == f"{1e3 * s['mean']:.2f} ± {1e3 * s['ci95']:.2f}"
    r = cmp_["kv_p99_real_s"]
    assert p99[2:] == [f"{r['ratio']['mean']:.2f} ± {r['ratio']['ci95']:.2f}", f"{r['a_better']} of {r['n']}"]


def test_headline_of_one_fabric_has_no_ratio_columns(mini):
    _, _, metrics = mini
    one = {"fabrics": {"roft": metrics["fabrics"]["roft"]}}
    lines = md.headline(one)
    assert lines[2] == "| metric | roft |" and lines[3] == "|---|---|"
    assert all(r.count(" | ") == 1 for r in lines[4:])


def test_a_summary_without_a_mean_reads_as_a_dash():
    assert md.ci_text({"mean": None, "ci95": None}, 1e3) == "—"
    assert md.ci_text({"mean": 0.0012, "ci95": None}, 1e3) == "1.20"


def test_ttft_decomposed_means_each_component_over_the_repeats(mini):
    _, _, metrics = mini
    fabs = metrics["fabrics"]
    lines = md.ttft_decomposed(fabs)
    assert lines[0] == "## TTFT, decomposed"
    kv_row = next(r for r in lines if r.startswith("| KV transfer |"))
    reps = fabs["roft"]["repeats"]
    p50 = sum(r["ttft_components_real_s"]["kv_transfer"]["p50"] for r in reps) / len(reps)
    assert kv_row.strip("| ").split(" | ")[4] == f"{1e3 * p50:.2f}"  # roft p50 (after zcube's two cells)
    tt = sum(r["ttft_real_s"]["p50"] for r in reps) / len(reps)
    assert lines[-1].startswith("Modelled share") and f"roft {100 * (1 - p50 / tt):.0f} %" in lines[-1]


def test_every_repeat_has_one_row_with_its_own_figures(mini):
    _, _, metrics = mini
    fabs = metrics["fabrics"]
    lines = md.every_repeat(fabs)
    rows = lines[4:]
    assert len(rows) == sum(len(f["repeats"]) for f in fabs.values())
    r = fabs["zcube"]["repeats"][1]
    kv = r["kv_transfer_real_s"]
    assert rows[1].startswith(f"| zcube | 1 | {1e3 * kv['p50']:.2f} / {1e3 * kv['p99']:.2f} | ")
    assert rows[1].endswith("| valid |")


def test_fidelity_checks_show_the_worst_repeat_against_the_limit(mini):
    _, exp, metrics = mini
    m, fabs = exp["spec"]["measurement"], copy.deepcopy(metrics["fabrics"])
    reps = fabs["roft"]["repeats"]
    reps[0]["calibration"] = dict(reps[0]["calibration"], ratio=0.95)  # one calibration per fabric: made to differ
    reps[1]["calibration"] = dict(reps[1]["calibration"], ratio=0.80)
    reps[0]["cpu_fraction"]["ovs"]["max"], reps[1]["cpu_fraction"]["ovs"]["max"] = 0.30, 0.70
    lines = md.fidelity_checks(m, fabs)
    rows = {r.strip("| ").split(" | ")[0]: r.strip("| ").split(" | ")[1:] for r in lines[4:]}
    assert len(rows) == len(md._checks(m))
    calib = rows["calibration (iperf3 / configured)"]
    assert calib[0] == f"{100 * m['min_calibration_ratio']:.0f} %"
    assert calib[2] == "80.0%"  # the lowest calibration ratio is the worst
    assert rows["ovs-vswitchd CPU, max over ~250 ms intervals"][2] == "70%"  # the highest CPU is


def test_setup_says_whether_xoff_is_representable_at_this_scale(mini):
    _, exp, _ = mini
    lines = md.setup(exp, ["zcube", "roft"])
    # a run from before engines existed is the emulation's, with today's transport
    assert lines[2].startswith("- engine: emulation (") and lines[2].endswith("transport: " + md.TRANSPORT)
    assert lines[3] == f"- `zcube`: `{exp['fabrics']['zcube']['fabric']}`"
    queues = next(x for x in lines if x.startswith("- queues:"))
    assert "**not representable at this scale**" in queues  # 800 kB XOFF is a fraction of one scaled frame
    big = copy.deepcopy(exp)
    big["spec"]["measurement"]["xoff_real_bytes"] = 10**9
    queues = next(x for x in md.setup(big, ["zcube", "roft"]) if x.startswith("- queues:"))
    assert "representable (≥ 4 frames)" in queues and "not representable" not in queues


def test_published_and_plot_links(mini):
    assert md.published()[4:] == [f"| {a} | {b} | {c} | {x} |" for a, b, c, x in md.PUBLISHED]
    assert md.plot_links(["a.png", "b.png"]) == ["## Plots", "", "![a.png](plots/a.png)", "![b.png](plots/b.png)"]


def test_the_report_is_its_sections_in_order(mini):
    run, exp, metrics = mini
    text = md.markdown(run, exp, metrics, ["kv_completion_cdf.png"])
    heads = [line for line in text.splitlines() if line.startswith("#")]
    assert heads == [
        f"# zlab run `{run['run_id']}`",
        "## What a draw does (ECMP)",
        "## TTFT, decomposed",
        "## Every repeat",
        "## Fidelity checks (worst repeat)",
        "## Setup",
        "## Published reference numbers (spec §5): what is comparable",
        "## Plots",
    ]
    fabs = metrics["fabrics"]
    for section in (md.status(run, fabs), md.headline(metrics), md.every_repeat(fabs), md.setup(exp, list(fabs))):
        assert "\n".join(section) in text
    assert text.endswith(md.SOURCES + "\n")
