"""`zlab run`: run an experiment spec (or plan it with --dry-run, or retry an earlier run's invalid fabrics)."""

from __future__ import annotations

from pathlib import Path

from ...errors import UserInputError
from .. import options
from ..experiments import print_plan, print_summary, resolved


def retry_spec(run_dir: str):
    """The spec of an earlier run, narrowed to its invalid fabrics, with the advice applied."""
    from ...experiment import advice
    from ...experiment import spec as especs
    from ...measure.report import RunFolderError
    from ...records import read_json, write_json

    root = Path(run_dir)
    if not (root / "experiment.json").exists() or not (root / "metrics.json").exists():
        raise RunFolderError(f"{root}: no experiment.json/metrics.json; --retry-invalid takes a finished run folder")
    exp, metrics = read_json(root / "experiment.json"), read_json(root / "metrics.json")
    a = advice.advise(exp, metrics)
    if not a.fabrics:
        raise UserInputError(f"{root}: every fabric's run is valid; nothing to retry")
    if not a.retry_possible:
        raise UserInputError(f"{root}: the invalid runs are not fixable by scaling: {'; '.join(a.unfixable[:3])}")
    spec = dict(exp["spec"], fabrics={lab: exp["spec"]["fabrics"][lab] for lab in a.fabrics})
    for o in a.overrides:
        spec = especs.apply_override(spec, o)
    path = root / "retry-spec.json"
    write_json(path, spec, sort_keys=False)
    for w in a.why:
        print(f"[zlab] retry: {w}")
    return especs.validate(spec)


def _ns3_experiment(args):
    """The experiment for engine ns3, or None when the spec's engine is the emulation. ns-3 runs
    at real scale, so the emulation's scaling planner (presets, capacity cap) has nothing to do."""
    from ...experiment import spec as especs
    from ...experiment.resolve import resolve

    if args.retry_invalid:
        if args.engine == "ns3":
            raise UserInputError("--retry-invalid reruns an emulation run's invalid fabrics; it takes no --engine ns3")
        return None
    spec = especs.load(args.spec, args.set)
    from ...experiment import ns3engine

    if spec["engine"] != "ns3":
        if ns3engine.congestion_on(spec):
            from ...emulation.congestion import refuse

            refuse(spec)  # PFC and link delays: engine ns3 only
        return None
    if args.preset != "as-given" or args.precision is not None:
        raise UserInputError("engine ns3 runs at real scale: --preset and --precision are the emulation's")
    ns3engine.refuse(spec)
    return resolve(spec)


def run(args) -> int:
    from ...experiment.runner import run_experiment

    if args.engine is not None:  # the spec field, so one validation names a bad value
        args.set = (args.set or []) + [f"engine={args.engine}"]
    ns3 = _ns3_experiment(args)
    if ns3 is not None:
        from ...experiment import ns3engine

        if args.dry_run:
            print_plan(ns3)
            return 0
        root, status = ns3engine.run_experiment(ns3, results_dir=args.results, show_progress=not args.no_progress)
        return _finish(root, status)
    if args.retry_invalid:
        if args.spec or args.set:
            raise UserInputError("--retry-invalid takes the earlier run's spec; give no SPEC or --set with it")
        from ...experiment import planner
        from ...experiment.resolve import resolve

        exp = resolve(retry_spec(args.retry_invalid))
        exp.scaling_choice = planner.assess(exp, "retry").to_dict()
    else:
        exp = resolved(args.spec, args.set, args.preset, args.budget_s)  # every part checked before bring-up
    if args.precision is not None:
        from ...experiment import planner

        if args.retry_invalid:
            raise UserInputError("--precision sets the number of repeats; --retry-invalid keeps the earlier run's")
        n, lines = planner.draws_for_precision(exp, args.precision)
        for line in lines:
            print(f"[zlab] precision: {line}")
        print(f"[zlab] precision: repeats={n}")
        if n != exp.spec["repeats"]:
            exp = resolved(args.spec, (args.set or []) + [f"repeats={n}"], args.preset, args.budget_s)
    if args.dry_run:
        print_plan(exp)
        return 0
    root, status = run_experiment(exp, results_dir=args.results, show_progress=not args.no_progress)
    return _finish(root, status)


def _finish(root: Path, status: str) -> int:
    """Print the run's summary; exit 0 (valid), 3 (a fabric invalid, with advice) or 130 (stopped)."""
    from ...experiment import advice
    from ...records import read_json

    metrics = read_json(root / "metrics.json") if (root / "metrics.json").exists() else {}
    print(f"[zlab] run {status}: {root}")
    print_summary(root, metrics)
    if status != "complete":
        return 130
    if all(f["summary"]["fidelity"]["valid"] for f in metrics.get("fabrics", {}).values()):
        return 0
    for line in advice.lines(advice.advise(read_json(root / "experiment.json"), metrics), str(root)):
        print(line)
    return 3


def register(sub) -> None:
    ru = sub.add_parser(
        "run",
        parents=[options.EXPERIMENT],
        help="run an experiment spec (default: ZCube(4,2) vs 16-GPU two-segment ROFT, "
        "Azure code trace); writes results/<run>/report.md",
    )
    ru.add_argument("spec", nargs="?", help="YAML experiment spec merged over the built-in default")
    ru.add_argument(
        "--engine",
        metavar="ENGINE",
        help="where it runs: emulation (the default; Mininet/OVS, root, time-dilated, scaled sizes) or ns3 "
        "(ns-3 at real rates and sizes, no root; needs provision.sh --referee); same as --set engine=ENGINE",
    )
    ru.add_argument(
        "--dry-run",
        action="store_true",
        help="resolve everything and print the plan per fabric (rates, scaling, messages, bytes, "
        "expected duration and peak packet rate) and the scaling planner's trade-off; bring nothing up",
    )
    ru.add_argument(
        "--preset",
        choices=("as-given", "queue-faithful"),
        default="as-given",
        help="as-given: the spec's scales (the default spec is the fast preset); queue-faithful: the "
        "planner picks rate and size scales so the XOFF is >= 4 frames and the peak stays within "
        "70 %% of the measured capacity, and cuts requests to the budget",
    )
    ru.add_argument(
        "--retry-invalid",
        metavar="RUN",
        help="rerun only the INVALID fabrics of an earlier run, with the change its verdict suggested "
        "(printed after an invalid run)",
    )
    ru.add_argument(
        "--budget-s",
        type=float,
        default=600.0,
        help="wall-time budget for --preset queue-faithful, seconds (default 600)",
    )
    ru.add_argument(
        "--precision",
        type=float,
        metavar="P",
        help="choose the number of repeats (ECMP draws) so the 95 %% interval on the share of draws "
        "with an ECMP collision is within ±P (e.g. 0.1), at the routing model's probability",
    )
    ru.set_defaults(func=run)
