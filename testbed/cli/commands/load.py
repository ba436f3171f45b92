"""`zlab load`: flow-level link load and max-min rates of a traffic pattern on a fabric model."""

from __future__ import annotations

from ...fabric.params import SpecError
from .. import options
from ..output import print_fields, print_json


def run(args) -> int:
    """Every draw (seed) routes new UDP source ports (ECMP entropy) and, for random matchings, a
    new matching: figures are means over --seeds draws with a 95 % CI and the range."""
    from ...fabric import build_fabric
    from ...fabric import failures as fl
    from ...fabric.load import estimate, from_file, pattern
    from ...measure.stats import ci95

    fab = build_fabric(args.spec)
    if args.seeds < 1:
        raise SpecError(f"--seeds must be >= 1 (got {args.seeds})")
    if not args.file and not args.pattern:
        raise SpecError("give --pattern NAME or --file CSV")
    degraded = None
    if args.fail:
        degraded = fl.degrade(fab, fl.parse(fab, args.fail), args.repair)
    elif args.repair:
        raise SpecError("--repair needs --fail (a healthy fabric has nothing to repair)")
    draws = []
    for seed in range(args.seed, args.seed + args.seeds):
        traffic = (
            from_file(fab, args.file)
            if args.file
            else pattern(fab, args.pattern, fraction=args.fraction, seed=seed, fan_in=args.fan_in)
        )
        draws.append(estimate(fab, traffic, split=args.split, seed=seed, degraded=degraded).summary(fab))
    keys = [
        k
        for k, v in draws[0].items()
        if isinstance(v, (int, float))
        and not isinstance(v, bool)
        and (degraded is not None or k not in ("lost_transfers", "lost_subflows", "failed_over_subflows"))
    ]
    summary = {
        "spec": fab.spec,
        "pattern": traffic.name,
        "seeds": [args.seed, args.seed + args.seeds - 1],
        **({"failures": degraded.failures.describe(fab), "repair": degraded.policy} if degraded else {}),
        **{k: ci95([d[k] for d in draws]) for k in keys},
        "hottest_link_first_seed": draws[0]["hottest_link"],
    }
    if args.json:
        print_json(summary)
        return 0
    print(
        f"{fab.spec}  pattern={traffic.name}  seeds {args.seed}..{args.seed + args.seeds - 1} "
        "(mean ± 95 % CI [min, max] over draws)"
        + (f"\nfailed: {summary['failures']}; repair policy {summary['repair']}" if degraded else "")
    )

    def cell(c):
        half = "" if c["ci95"] is None else f" ± {c['ci95']:.3f}"
        return f"{c['mean']:.3f}{half} [{min(c['values']):.3f}, {max(c['values']):.3f}]"

    print_fields([(k, cell(summary[k])) for k in keys], width=32)
    return 0


def register(sub) -> None:
    lo = sub.add_parser(
        "load",
        parents=[options.JSON],
        help="flow-level link load and max-min rates for a traffic pattern",
        formatter_class=options.RAW,
        epilog=options.EPILOG_SPECS,
    )
    lo.add_argument("spec", help="fabric spec")
    lo.add_argument("--pattern", help="rail-aligned, rank-shifted, random, incast or all-to-all")
    lo.add_argument("--file", help="CSV traffic matrix with columns src_gpu,dst_gpu,demand_gbps")
    lo.add_argument(
        "--fraction",
        type=float,
        default=1.0,
        help="each sender's demand as a fraction of its per-GPU bandwidth (default 1.0)",
    )
    lo.add_argument("--seed", type=int, default=0, help="first seed for random matchings and ECMP entropy (default 0)")
    lo.add_argument(
        "--seeds",
        type=int,
        default=20,
        help="independent draws (seeds seed..seed+N-1); figures are means with 95 %% CI and range (default 20)",
    )
    lo.add_argument("--fan-in", type=int, default=4, help="senders per receiver for incast (default 4)")
    lo.add_argument(
        "--split",
        help="port-split policy of a multi-port kind, e.g. ZCube's half, cons or rail "
        "(default: the fabric spec's split)",
    )
    lo.add_argument(
        "--fail",
        action="append",
        metavar="WHAT",
        help="fail a cable or switch before estimating: cable:PORT (either end, e.g. g0-p0 or za0-p5), "
        "cable:NODE1,NODE2 or switch:NAME; repeatable",
    )
    lo.add_argument(
        "--repair",
        help="repair policy for --fail: ZCube none|host|detour|both (default none), ROFT ecmp (member removal)",
    )
    lo.set_defaults(func=run)
