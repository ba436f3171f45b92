"""A run folder -> tables, metrics, plots and report.md (`zlab report RUN` rebuilds them).

Reads the run folder only: experiment.json (the resolved experiment), run.json and each
fabric's raw records. Never imports the emulation: analysis works on any copy of a run folder.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserInputError
from ..records import read_json, write_json
from . import markdown, plots
from .metrics import fabric_metrics
from .tables import FabricData


class RunFolderError(UserInputError):
    """A folder that is not a (readable) zlab run folder."""


def load(root: Path) -> tuple[dict, dict, dict[str, FabricData]]:
    """(resolved experiment, run record, {label: FabricData} for fabrics that recorded data)."""
    root = Path(root)
    if not (root / "experiment.json").exists():
        raise RunFolderError(f"{root}: not a zlab run folder (no experiment.json); "
                             "`zlab run` prints the folder it writes")
    exp = read_json(root / "experiment.json")
    run = read_json(root / "run.json")
    datas = {}
    for label, resolved in exp["fabrics"].items():
        if (root / label / "raw" / "plan.json").exists():
            datas[label] = FabricData(root / label, resolved)
    return exp, run, datas


def build(root: Path) -> dict:
    root = Path(root)
    exp, run, datas = load(root)
    spec = exp["spec"]
    m = spec["measurement"]
    tables = {label: fd.write_tables(root / "tables", m["xoff_bytes"], m["util_window_ms"] / 1e3)
              for label, fd in datas.items()}
    metrics = {label: fabric_metrics(datas[label], tables[label], m) for label in datas}
    if not metrics:
        (root / "report.md").write_text(f"# zlab run `{run['run_id']}`\n\nNo fabric recorded any data "
                                        f"(status {run.get('status')}"
                                        + (f": {run['cause']}" if run.get("cause") else "") + ").\n")
        return {}
    made = plots.all_plots(datas, tables, root / "plots")
    write_json(root / "metrics.json", metrics)
    first = next(iter(datas.values()))
    (root / "report.md").write_text(markdown.markdown(run, spec, metrics, made, first.plan["summary"]))
    return metrics
