"""`zlab resilience`: every single cable and switch failure of a fabric model, per repair policy."""

from __future__ import annotations

from ...fabric.params import SpecError
from .. import options
from ..output import print_json


def run(args) -> int:
    import sys

    from ...fabric import build_fabric
    from ...fabric import failures as fl
    from ...fabric.load import pattern
    from ...fabric.resilience import sweep

    if args.sample is not None and args.sample < 1:
        raise SpecError(f"--sample must be >= 1 (got {args.sample})")
    results = []
    for spec in args.spec:
        fab = build_fabric(spec)
        pols = fl.policies(fab) if args.repair == "all" else (fl.check_policy(fab, args.repair),)
        traffic = pattern(fab, args.pattern, fraction=args.fraction, seed=args.seed)
        for pol in pols:
            n = len(fl.single_failures(fab))
            print(
                f"[zlab] {fab.spec} repair={pol}: {min(n, args.sample or n):,} of {n:,} single failures ...",
                file=sys.stderr,
                flush=True,
            )
            r = sweep(
                fab,
                traffic,
                pol,
                sample=args.sample,
                seed=args.seed,
                progress=lambda k, t: print(f"[zlab]   {k:,}/{t:,}", file=sys.stderr, flush=True),
            )
            results.append(r)
    if args.json:
        print_json([{k: v for k, v in r.items() if k != "rows"} for r in results])
        return 0
    print(
        f"pattern {args.pattern} at {args.fraction:g} of line rate; one failure at a time; max link util (mean / "
        "worst), transfers losing every path, throughput lost vs healthy (mean / worst)"
    )
    head = (
        f"{'fabric':<34} {'repair':<7} {'failure':<13} {'runs':>6} {'util mean':>9} {'worst':>6} "
        f"{'losing':>7} {'lost max':>8} {'tput lost':>9} {'worst':>6}  worst failure"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        for what, c in r["classes"].items():
            print(
                f"{r['spec'][:34]:<34} {r['policy']:<7} {what:<13} {c['scenarios']:>6,} "
                f"{c['max_link_util_mean']:>9.2f} {c['max_link_util_worst']:>6.2f} {c['scenarios_losing_transfers']:>7,}"
                f" {c['lost_transfers_max']:>8,} {100 * c['throughput_lost_mean']:>8.2f}% "
                f"{100 * c['throughput_lost_worst']:>5.1f}%  {c['worst_failure']}"
            )
        print(
            f"{'':<34} {r['policy']:<7} healthy util {r['healthy_max_link_util']:.2f}; "
            f"{r['scenarios_run']:,} of {r['scenarios_total']:,} failures"
            f"{' (random sample, seed ' + str(r['seed']) + ')' if r['sampled'] else ''} in {r['seconds']:.1f} s"
        )
    return 0


def register(sub) -> None:
    rs = sub.add_parser(
        "resilience",
        parents=[options.JSON],
        help="every single cable and switch failure: worst case and mean, per repair policy, side by side",
        formatter_class=options.RAW,
        epilog=options.EPILOG_SPECS,
    )
    rs.add_argument("spec", nargs="+", help="fabric spec(s)")
    rs.add_argument("--pattern", default="rank-shifted", help="traffic pattern (default rank-shifted)")
    rs.add_argument("--fraction", type=float, default=1.0, help="each sender's demand as a fraction of its bandwidth")
    rs.add_argument("--repair", default="all", help="repair policy, or all (default): every policy of each kind")
    rs.add_argument("--sample", type=int, help="run this many failures drawn at random (with --seed) instead of all")
    rs.add_argument("--seed", type=int, default=0, help="seed of the pattern, ECMP entropy and the sample (default 0)")
    rs.set_defaults(func=run)
