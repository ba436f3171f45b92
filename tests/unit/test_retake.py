"""A repeat voided by hypervisor steal alone is re-taken with the same seed, the voided attempt kept
and disclosed; any other cause is never re-taken (that would select results)."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.experiment import runner
from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve
from testbed.measure import report

MINI = Path(__file__).resolve().parents[1] / "data" / "mini-run"


def _fake_lab(monkeypatch, fdir):
    class FakeLiveFabric:
        def __init__(self, *a, **k):
            self.dir = fdir

        def __enter__(self):
            fdir.mkdir()
            (fdir / "run.json").write_text(json.dumps({"run_id": "x"}))
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(runner, "LiveFabric", FakeLiveFabric)
    monkeypatch.setattr(runner, "LiveRun", lambda d: None)


@pytest.mark.parametrize(
    "retakes, verdicts, attempts, voided",
    [
        (2, ["steal 35 %", None, None], [0, 0, 1], 1),  # first attempt of repeat 0 voided, the second is kept
        (1, ["steal 35 %", "steal 40 %", None], [0, 0, 1], 1),  # retakes exhausted: the last attempt stays, void
        (0, ["steal 35 %", None], [0, 1], 0),  # re-taking off
    ],
)
def test_steal_voided_repeats_are_retaken_and_kept(tmp_path, monkeypatch, retakes, verdicts, attempts, voided):
    exp = resolve(
        especs.load(
            None,
            [
                "workload.requests=10",
                "repeats=2",
                "measurement.calibrate=false",
                f"measurement.steal_retakes={retakes}",
            ],
        )
    )
    fr = next(iter(exp.fabrics.values()))
    fdir = tmp_path / fr.label
    _fake_lab(monkeypatch, fdir)
    seen = []

    def fake_replay(exp, fr, rep, lf, live, log=print, bar=None, cc=None):
        (lf.dir / "raw" / f"rep{rep.index}").mkdir(parents=True)
        seen.append(rep.index)
        return "complete"

    it = iter(verdicts)
    waits = []
    monkeypatch.setattr(runner, "replay", fake_replay)
    monkeypatch.setattr(runner, "stolen", lambda *a: next(it))
    monkeypatch.setattr(runner, "wait_for_quiet", lambda limit, max_s, log: waits.append((limit, max_s)) or (4.0, True))
    runner.run_fabric(exp, fr, tmp_path, log=lambda *_: None)
    assert seen == attempts
    replays = json.loads((fdir / "run.json").read_text())["replays"]
    assert [len(r["voided_attempts"]) for r in replays] == [voided, 0]
    for n, v in enumerate(replays[0]["voided_attempts"], 1):
        assert v == {"folder": f"rep0.void{n}", "reason": verdicts[n - 1], "waited_s": 4.0, "quiet": True}
        assert (fdir / "raw" / v["folder"]).is_dir()
    assert waits == [(0.2, 120)] * voided  # every retake waited for the steal to calm, with the spec's limits
    assert (fdir / "raw" / "rep0").is_dir() and (fdir / "raw" / "rep1").is_dir()


def test_stolen_reads_the_steal_rule_off_the_raw_records(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(MINI, run)
    exp = json.loads((run / "experiment.json").read_text())
    ex = SimpleNamespace(measurement={**exp["spec"]["measurement"], "max_steal_fraction": 0.2})
    assert runner.stolen(ex, run / "zcube", 0) is None
    cpu = run / "zcube" / "raw" / "rep0" / "cpu.jsonl"
    rows = [json.loads(line) for line in cpu.read_text().splitlines()]
    cores = rows[0]["cores"]
    dt = (rows[9]["t_ns"] - rows[8]["t_ns"]) / 1e9  # an interval inside the replay window [t0, t_end]
    bump = 0.5 * cores * dt  # half of the cores stolen in one interval
    for r in rows[9:]:
        r["machine_steal_s"] += bump
    cpu.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    reason = runner.stolen(ex, run / "zcube", 0)
    assert reason and reason.startswith("hypervisor steal up to 5") and "(limit 20 %)" in reason


def test_the_report_lists_retaken_repeats(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(MINI, run)
    rj = json.loads((run / "zcube" / "run.json").read_text())
    rj["replays"][1]["voided_attempts"] = [
        {"folder": "rep1.void1", "reason": "hypervisor steal up to 33 % of the cores (limit 20 %)"}
    ]
    (run / "zcube" / "run.json").write_text(json.dumps(rj))
    report.build(run, plots_too=False)
    text = (run / "report.md").read_text()
    assert (
        "Re-taken repeats (voided by hypervisor steal alone, a cause outside the run, and replayed with the same "
        "seed): zcube repeat 1 (hypervisor steal up to 33 % of the cores (limit 20 %); raw data of the voided "
        "attempt(s) kept in zcube/raw/rep1.void1)"
    ) in text


def test_a_retake_waits_until_the_steal_stays_calm_and_the_wait_is_bounded():
    from testbed.experiment import quiet

    logs = []
    shares = iter([0.5, 0.1, 0.1, 0.4, 0.1, 0.2, 0.1, 0.9])  # calm needs 3 in a row under 0.2 (0.2 counts)
    assert quiet.wait_for_quiet(0.2, 60, logs.append, share=lambda: next(shares)) == (7.0, True)
    stormy = iter([0.5] * 30)
    waited, ok = quiet.wait_for_quiet(0.2, 25, logs.append, share=lambda: next(stormy))
    assert (waited, ok) == (25.0, False)
    assert len(logs) == 2 and "50 % after 20 s" in logs[-1]  # a long wait says so every 10 readings


def test_steal_share_is_the_stolen_fraction_of_all_cores():
    from testbed.experiment import quiet

    readings = iter([(10.0, 3.0, 2), (11.0, 3.5, 2)])  # 0.5 core-s stolen of 2 cores over 1 s
    share = quiet.steal_share(read=lambda: next(readings), sleep=lambda s: None, window_s=1.0)
    assert share == 0.25
