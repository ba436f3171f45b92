"""`zlab report`: rebuild a run's tables, plots and report.md from its raw records."""

from __future__ import annotations

from pathlib import Path

from ..experiments import print_summary


def run(args) -> int:
    from ...measure import report

    metrics = report.build(Path(args.run_dir), plots_too=not args.no_plots)
    print_summary(args.run_dir, metrics)
    return 0


def register(sub) -> None:
    rp = sub.add_parser("report", help="rebuild tables, plots and report.md of a run from its raw records")
    rp.add_argument("run_dir")
    rp.add_argument(
        "--no-plots",
        action="store_true",
        help="tables, metrics.json and report.md only: skip drawing plots/ (most of a small run's rebuild time; "
        "the verdict never depends on them)",
    )
    rp.set_defaults(func=run)
