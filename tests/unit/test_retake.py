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
    monkeypatch.setattr(runner, "replay", fake_replay)
    monkeypatch.setattr(runner, "stolen", lambda *a: next(it))
    runner.run_fabric(exp, fr, tmp_path, log=lambda *_: None)
    assert seen == attempts
    replays = json.loads((fdir / "run.json").read_text())["replays"]
    assert [len(r["voided_attempts"]) for r in replays] == [voided, 0]
    for n, v in enumerate(replays[0]["voided_attempts"], 1):
        assert v == {"folder": f"rep0.void{n}", "reason": verdicts[n - 1]} and (fdir / "raw" / v["folder"]).is_dir()
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
