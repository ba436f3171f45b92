"""A run folder -> tables, metrics, plots and report.md (`zlab report RUN` rebuilds them).

Reads the run folder only: experiment.json (the resolved experiment), run.json and each
fabric's raw records per repeat. Never imports the emulation: analysis works on any copy of a
run folder. Refuses (exit 1) a run whose raw records are gone instead of writing an empty report.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import RuntimeFailure, UserInputError
from ..records import read_json, write_json
from . import congestion, draws, emcongestion, failures, markdown, plots
from .metrics import comparison, fabric_summary, repeat_metrics
from .tables import FabricData


class RunFolderError(UserInputError):
    """A folder that is not a (readable) zlab run folder."""


class MissingRecords(RuntimeFailure):
    """A run folder whose raw records are missing: nothing can be recomputed."""


def load(root: Path) -> tuple[dict, dict, dict[str, list[FabricData]]]:
    """(resolved experiment, run record, {label: [FabricData per repeat that recorded data]})."""
    root = Path(root)
    if not (root / "experiment.json").exists():
        raise RunFolderError(
            f"{root}: not a zlab run folder (no experiment.json); `zlab run` prints the folder it writes"
        )
    exp = read_json(root / "experiment.json")
    run = read_json(root / "run.json")
    datas = {}
    for label, resolved in exp["fabrics"].items():
        reps = [
            FabricData(root / label, resolved, r["index"])
            for r in resolved["repeats"]
            if (root / label / "raw" / f"rep{r['index']}" / "plan.json").exists()
        ]
        if reps:
            datas[label] = reps
    return exp, run, datas


PLOTTED_QUEUE_COLUMNS = ("t_s", "port", "tier", "backlog_bytes", "queue_delay_real_s")  # plots.py, failures.timeline


def _keep(t: dict, draw: bool) -> dict:
    """A repeat's tables as kept for the rest of the build once its metrics and failure rows are
    computed: of the queue samples, only the columns the plots draw and only when they will draw them
    (repeat 0's), else an empty frame of the same columns. Why: they are one row per port per 10 ms
    sample, 19 M rows and 1.2 GB for a 256-GPU fabric, and holding every repeat's of every fabric to
    the end made the report's memory grow with fabrics x repeats."""
    qs = t["queue_samples"]
    if qs.empty:
        return t
    if not draw:
        return dict(t, queue_samples=qs.iloc[:0].copy())
    # the columns' own arrays (copy=False), not a copy: the dropped counters' memory goes with the frame
    return dict(t, queue_samples=pd.DataFrame({c: qs[c].to_numpy() for c in PLOTTED_QUEUE_COLUMNS}, copy=False))


def build(root: Path, plots_too: bool = True) -> dict:
    """Tables, metrics.json and report.md from the run's raw records; the plots too unless
    `plots_too` is False (`zlab report --no-plots`). Why optional: drawing is most of the cost of
    re-reading a small run (about 3 s of 4 for seven figures) and the verdict never depends on it;
    a user re-judging a run, and the rule tests, need only the numbers."""
    root = Path(root)
    exp, run, datas = load(root)
    spec = exp["spec"]
    m = spec["measurement"]
    if not datas:
        if run.get("status") == "complete":
            raise MissingRecords(f"{root}: the run completed but its raw records are missing; nothing to rebuild")
        (root / "report.md").write_text(
            f"# zlab run `{run['run_id']}`\n\nNo fabric recorded any data "
            f"(status {run.get('status')}" + (f": {run['cause']}" if run.get("cause") else "") + ").\n"
        )
        return {}
    tables, per_fabric, fail_rows = {}, {}, {}
    for label, reps in datas.items():
        tables[label], per_fabric[label], fail_rows[label] = [], [], []
        for i, fd in enumerate(reps):
            xoff = max(1, int(m["xoff_real_bytes"] * fd.size_scale))
            t = fd.write_tables(root / "tables", xoff, m["util_window_ms"] / 1e3)
            per_fabric[label].append(repeat_metrics(fd, t, m))
            fail_rows[label] += failures.events(fd, t)
            fd.release_queues()
            t = _keep(t, plots_too and i == 0)  # rebinds t: the full samples must not live on into the next repeat
            tables[label].append(t)
    labels = list(datas)
    metrics = {
        "fabrics": {lab: {"summary": fabric_summary(per_fabric[lab]), "repeats": per_fabric[lab]} for lab in labels}
    }
    for lab in labels:  # what a draw does: ECMP collisions and each mode's figures (draws.py)
        metrics["fabrics"][lab]["summary"]["draws"] = draws.summary(datas[lab], per_fabric[lab])
    if len(labels) >= 2:
        metrics["comparison"] = comparison(per_fabric, labels[0], labels[1])
    made = plots.all_plots(datas, tables, root / "plots") if plots_too else []
    if any(fail_rows.values()):
        metrics["failures"] = {
            lab: {"events": rows, "summary": failures.summary(rows)} for lab, rows in fail_rows.items() if rows
        }
        pd.DataFrame([r for rows in fail_rows.values() for r in rows]).to_csv(
            root / "tables" / "failures.csv", index=False
        )
        if plots_too:
            made.append(
                plots.failure_timeline(
                    {
                        lab: failures.timeline(
                            reps[0], [r for r in fail_rows[lab] if r["repeat"] == reps[0].repeat], tables[lab][0]
                        )
                        for lab, reps in datas.items()
                        if fail_rows[lab]
                    },
                    root / "plots",
                )
            )
    if run.get("congestion"):  # the packet engine ran PFC/ECN/DCQCN: what operators watch
        metrics["congestion"] = congestion.summary(datas, root / "tables")
        if plots_too:
            first = {lab: reps[0] for lab, reps in datas.items()}
            made += [
                plots.pause_timeline(
                    {lab: congestion.paused_intervals(fd) for lab, fd in first.items()}, root / "plots"
                ),
                plots.dcqcn_rates({lab: congestion.rate_changes(fd) for lab, fd in first.items()}, root / "plots"),
                plots.port_queue_bytes({lab: congestion.port_queues(fd) for lab, fd in first.items()}, root / "plots"),
            ]
    if emcongestion.active(datas):  # the emulation ran the congestion section's ECN and DCQCN
        metrics["emulation_congestion"] = emcongestion.summary(datas)
        modes = {fd.run["emulation_congestion"]["mode"] for reps in datas.values() for fd in reps}
        run = dict(run, transport="agents' RoCE transport: " + "; ".join(sorted(modes)))
    write_json(root / "metrics.json", metrics, sort_keys=False)
    text = markdown.markdown(run, exp, metrics, made if plots_too else None)
    referee = root / "referee" / "report.md"  # written by `zlab referee`; kept across report rebuilds
    if referee.exists():
        text += "\n" + referee.read_text()
    (root / "report.md").write_text(text)
    return metrics
