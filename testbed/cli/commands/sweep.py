"""`zlab sweep`: run a spec once per value of one field, then compare the runs."""

from __future__ import annotations

from ...errors import UserInputError
from .. import options
from ..experiments import compare_roots, resolved


def run(args) -> int:
    from ...experiment.runner import run_experiment

    key, eq, values = args.param.partition("=")
    if not eq or not values:
        raise UserInputError(f"--param takes KEY=v1,v2,... (got {args.param!r})")
    exps = [(v, resolved(args.spec, (args.set or []) + [f"{key}={v}"])) for v in values.split(",")]
    roots = []
    for v, exp in exps:  # every value resolved before the first run
        print(f"[zlab] sweep {key}={v}")
        root, status = run_experiment(exp, results_dir=args.results, show_progress=not args.no_progress)
        roots.append(root)
        if status != "complete":
            print("[zlab] sweep interrupted")
            break
    return compare_roots(roots, args.json)


def register(sub) -> None:
    sw = sub.add_parser(
        "sweep", parents=[options.JSON, options.EXPERIMENT], help="run a spec once per value of one field, then compare"
    )
    sw.add_argument("spec", nargs="?", help="YAML experiment spec (default: the built-in one)")
    sw.add_argument(
        "--param", required=True, metavar="KEY=v1,v2", help="e.g. workload.offered_load=0.2,0.5 (a load sweep)"
    )
    sw.set_defaults(func=run)
