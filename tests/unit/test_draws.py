"""What a draw does (issue 22 item 6): exact intervals for the share of draws with an ECMP collision,
distribution-free intervals for medians, the routing model's collision test against the shipped
default run, the planner's number of draws for a stated precision, and the report on a recorded
bimodal run (tests/data/bimodal-run)."""

import json
import math
import shutil
from pathlib import Path

import pytest

from testbed.measure import draws

REPO = Path(__file__).resolve().parents[2]
BIMODAL = REPO / "tests" / "data" / "bimodal-run"


def test_clopper_pearson_against_textbook_values():
    assert draws.clopper_pearson(4, 5) == pytest.approx((0.2836, 0.9949), abs=1e-4)
    assert draws.clopper_pearson(50, 100) == pytest.approx((0.3983, 0.6017), abs=1e-4)
    lo, hi = draws.clopper_pearson(0, 10)
    assert lo == 0 and hi == pytest.approx(1 - 0.025 ** (1 / 10))  # the closed form at k = 0
    assert draws.clopper_pearson(10, 10) == pytest.approx((0.025 ** (1 / 10), 1.0))
    with pytest.raises(ValueError):
        draws.clopper_pearson(0, 0)


def test_order_statistic_median_interval():
    c = draws.median_interval(range(1, 21))  # n = 20: [x_(6), x_(15)], coverage 1 - 2 P(Bin(20, 1/2) <= 5)
    assert (c["lo"], c["hi"], c["median"]) == (6, 15, 10.5)
    assert c["coverage"] == pytest.approx(1 - 2 * sum(math.comb(20, i) for i in range(6)) / 2**20)
    c = draws.median_interval([25.1, 25.1, 3.7, 25.1, 25.1])  # n = 5 cannot reach 95 %: [min, max] at 93.75 %
    assert (c["lo"], c["hi"], c["median"], c["coverage"]) == (3.7, 25.1, 25.1, 0.9375)
    assert draws.median_interval([None, float("nan")])["median"] is None


def test_draws_for_precision_is_the_fewest_that_reach_it():
    for p, w in ((0.5, 0.15), (0.934, 0.1), (0.0, 0.1)):
        n = draws.draws_for_precision(p, w)
        lo, hi = draws.clopper_pearson(round(n * p), n)
        assert (hi - lo) / 2 <= w
        lo, hi = draws.clopper_pearson(round((n - 1) * p), n - 1)
        assert (hi - lo) / 2 > w


def _default_schedules(repeats=5, over=()):
    from testbed.emulation.config import scaled_rate_bps
    from testbed.experiment import spec as especs
    from testbed.experiment.resolve import resolve

    exp = resolve(especs.load(None, [f"repeats={repeats}", *over]))
    out = {}
    for label, fr in exp.fabrics.items():
        ports = {p.name: p for p in fr.fabric.ports}
        reps = []
        for rep in fr.repeats:
            msgs = [
                {
                    "src_port": m.src_port,
                    "dst_port": m.dst_port,
                    "size_bytes": m.size_bytes,
                    "t_due_ns": int(rep.plan.transfers[m.transfer].t_post_s * 1e9),
                    "sport": rep.qps[(m.src_port, m.dst_port)],
                }
                for m in rep.messages
            ]
            rate = {s: scaled_rate_bps(ports[s].rate_bps, fr.emulation) for s in {m["src_port"] for m in msgs}}
            reps.append((msgs, rate))
        out[label] = (fr.fabric, reps)
    return out


def test_the_model_names_the_shipped_default_runs_modes():
    """The shipped reference run (results/reference/default-run, seeds 0-4): ROFT's KV p50 is 25.1 ms in the
    draws the model says collide and 3.7 ms in the one it says does not; ZCube never collides."""
    ref = json.loads((REPO / "results" / "reference" / "default-run" / "metrics.json").read_text())
    sched = _default_schedules()
    for label, (fab, reps) in sched.items():
        flags = [draws.draw_collides(fab, *s) for s in reps]
        p50 = [r["kv_transfer_real_s"]["p50"] for r in ref["fabrics"][label]["repeats"]]
        slow = [x > 2 * min(p50) for x in p50]
        assert flags == slow, (label, flags, p50)
    assert [draws.draw_collides(sched["roft"][0], *s) for s in sched["roft"][1]] == [True, True, True, False, True]


def test_the_models_probability_for_roft():
    """ROFT's four leaf pairs (rails) each carry two concurrent QPs; with two spines each pair collides
    unless its two QPs hash to different spines: P = 1 - (1/2)^4 = 15/16, within Monte Carlo error."""
    fab, reps = _default_schedules(1)["roft"]
    p = draws.collision_probability(fab, *reps[0])
    assert abs(p - 15 / 16) < 4 * math.sqrt(15 / 16 / 16 / 4000)
    fab, reps = _default_schedules(1)["zcube"]
    assert draws.collision_probability(fab, *reps[0]) == 0.0  # unique shortest paths: no ECMP draw to lose


def test_a_schedule_without_overlap_never_collides():
    fab, reps = _default_schedules(1)["roft"]
    msgs, rate = reps[0]
    apart = [dict(m, t_due_ns=i * 10**10) for i, m in enumerate(msgs)]  # one message at a time
    assert draws.collision_probability(fab, apart, rate) == 0.0


def test_the_planner_chooses_draws_for_a_precision(capsys):
    from testbed.cli import main
    from testbed.experiment import spec as especs
    from testbed.experiment.planner import draws_for_precision
    from testbed.experiment.resolve import resolve

    n, lines = draws_for_precision(resolve(especs.load(None, ["repeats=1"])), 0.1)
    fab, reps = _default_schedules(1)["roft"]
    p_roft = draws.collision_probability(fab, *reps[0])
    assert n == max(draws.draws_for_precision(p, 0.1) for p in (0.0, p_roft))
    assert any(line.startswith("roft: model's collision probability 93") for line in lines)
    assert main(["run", "--dry-run", "--precision", "0.1"]) == 0
    out = capsys.readouterr().out
    assert f"[zlab] precision: repeats={n}" in out and f"x {n} repeats" in out
    assert main(["run", "--dry-run", "--precision", "0.7"]) == 2
    assert "--precision takes a half-width" in capsys.readouterr().err
    assert main(["run", "--dry-run", "--precision", "0.01"]) == 2
    assert "needs more than 50 draws" in capsys.readouterr().err


def test_the_mini_run_report_says_what_a_draw_does(tmp_path):
    from testbed.measure import report

    run = tmp_path / "run"
    shutil.copytree(REPO / "tests" / "data" / "mini-run", run)
    m = report.build(run, plots_too=False)
    d = m["fabrics"]["roft"]["summary"]["draws"]
    assert d["draws"] == 2 and d["collisions"] == 2 and not d["bimodal"]
    assert d["interval"] == pytest.approx(draws.clopper_pearson(2, 2))
    text = (run / "report.md").read_text()
    assert "## What a draw does (ECMP)" in text and "| roft | 2 of 2 | 100 % (16–100 %) |" in text


def test_the_recorded_bimodal_run_is_small_and_complete():
    size = sum(p.stat().st_size for p in BIMODAL.rglob("*") if p.is_file())
    assert size <= 1.2e6, size
    exp = json.loads((BIMODAL / "experiment.json").read_text())
    assert list(exp["fabrics"]) == ["roft"] and [r["seed"] for r in exp["fabrics"]["roft"]["repeats"]] == [0, 1, 2, 3]


def test_the_report_on_a_recorded_bimodal_run_shows_both_modes_and_their_frequency(tmp_path):
    """ROFT over seeds 0-3, recorded (tests/data/bimodal-run): the model says seeds 0-2 collide and seed 3
    does not; the records agree (every colliding draw is slower and overloads a link, the other does
    not), and the report gives both modes, how often each occurs with its exact interval, and medians
    instead of a mean ± t interval."""
    from testbed.measure import report

    run = tmp_path / "run"
    shutil.copytree(BIMODAL, run)
    m = report.build(run, plots_too=False)
    reps = m["fabrics"]["roft"]["repeats"]
    assert [r["ecmp_collision"] for r in reps] == [True, True, True, False]
    hit = [r for r in reps if r["ecmp_collision"]]
    (calm,) = [r for r in reps if not r["ecmp_collision"]]
    assert min(r["kv_transfer_real_s"]["p50"] for r in hit) > 1.5 * calm["kv_transfer_real_s"]["p50"]
    assert min(r["max_offered_util"] for r in hit) > 1.3 > calm["max_offered_util"]  # two NICs into one link
    d = m["fabrics"]["roft"]["summary"]["draws"]
    assert d["bimodal"] and (d["collisions"], d["draws"]) == (3, 4)
    lo, hi = draws.clopper_pearson(3, 4)
    assert d["interval"] == pytest.approx([lo, hi])
    assert d["modes"]["collision"]["repeats"] == [0, 1, 2] and d["modes"]["no collision"]["repeats"] == [3]
    p50 = d["modes"]["collision"]["kv_p50_real_s"]
    assert p50["median"] == pytest.approx(sorted(r["kv_transfer_real_s"]["p50"] for r in hit)[1])
    assert (p50["lo"], p50["hi"]) == (
        min(r["kv_transfer_real_s"]["p50"] for r in hit),
        max(r["kv_transfer_real_s"]["p50"] for r in hit),
    )
    text = (run / "report.md").read_text()
    model = f"{100 * d['model_probability']:.1f} %"
    assert f"| roft | 3 of 4 | 75 % ({100 * lo:.0f}–{100 * hi:.0f} %) | {model} | collision | 3 | " in text
    assert f"|  |  |  |  | no collision | 1 | {1e3 * calm['kv_transfer_real_s']['p50']:.2f} (one draw) |" in text
    row = next(line for line in text.splitlines() if line.startswith("| KV-transfer completion p50"))
    assert "median" in row and "±" not in row
