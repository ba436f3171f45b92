"""`zlab flowsim`: KV-transfer completion times at 64-16,384 GPUs on the flow-level engine (no root):
a traffic pattern's transfers sharing the fabric max-min fairly over the tables' exact routes, one
draw per seed, medians with distribution-free intervals, fabric against fabric."""

from __future__ import annotations

import sys

from ...errors import UserInputError
from .. import options
from ..output import print_json


def run(args) -> int:
    import time

    import numpy as np

    from ...fabric import build_fabric
    from ...fabric.load import PATTERNS
    from ...flowsim.engine import FlowEngine, run_transfers
    from ...flowsim.schedule import kv_completion_ms, kv_schedule
    from ...measure.draws import median_interval

    if args.pattern not in PATTERNS:
        raise UserInputError(f"--pattern {args.pattern!r}; valid: {', '.join(PATTERNS)}")
    for name, v in (("--seeds", args.seeds), ("--rounds", args.rounds)):
        if v < 1:
            raise UserInputError(f"{name} must be >= 1 (got {v})")
    for name, v in (("--size-mb", args.size_mb), ("--window-ms", args.window_ms)):
        if not v > 0:
            raise UserInputError(f"{name} must be > 0 (got {v})")
    fabs = [build_fabric(s) for s in args.spec]  # every spec checked before any work
    results = []
    for spec, fab in zip(args.spec, fabs):
        p50, p99, t0 = [], [], time.monotonic()
        for seed in range(args.seeds):
            sched = kv_schedule(
                fab, args.pattern, args.rounds, int(args.size_mb * 1e6), int(args.window_ms * 1e6), seed
            )
            done = dict(run_transfers(FlowEngine(fab), sched.transfers))
            kv = kv_completion_ms(sched, done)
            p50.append(float(np.percentile(kv, 50)))
            p99.append(float(np.percentile(kv, 99)))
            print(
                f"[zlab] {spec}: seed {seed + 1}/{args.seeds}, {len(kv):,} KV transfers, {time.monotonic() - t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        results.append(
            {
                "spec": spec,
                "gpus": fab.n_gpus,
                "kv_transfers_per_seed": len(sched.parts),
                "alone_ms": args.size_mb * 8e6 / (float(fab.params["gpu_gbps"]) * 1e9) * 1e3,
                "kv_p50_ms": median_interval(p50),
                "kv_p99_ms": median_interval(p99),
                "seconds": round(time.monotonic() - t0, 1),
            }
        )
    setup = {
        "engine": "flow (max-min fair shares over the tables' routes)",
        "pattern": args.pattern,
        "rounds": args.rounds,
        "size_mb": args.size_mb,
        "window_ms": args.window_ms,
        "seeds": args.seeds,
    }
    if args.json:
        print_json({"setup": setup, "results": results})
        return 0
    print(
        f"engine flow; pattern {args.pattern}; {args.rounds} KV transfer(s) of {args.size_mb:g} MB per prefill GPU, "
        f"starts uniform over {args.window_ms:g} ms; {args.seeds} seed(s): medians over seeds [distribution-free "
        f"interval, coverage]"
    )
    head = f"{'fabric':<44} {'GPUs':>6} {'alone ms':>8}  {'KV p50 ms':<30} {'KV p99 ms':<30}"
    print(head)
    print("-" * len(head))
    for r in results:
        print(
            f"{r['spec'][:44]:<44} {r['gpus']:>6,} {r['alone_ms']:>8.3f}  {_mi(r['kv_p50_ms']):<30} "
            f"{_mi(r['kv_p99_ms']):<30}"
        )
    return 0


def _mi(m: dict) -> str:
    return f"{m['median']:.3f} [{m['lo']:.3f}-{m['hi']:.3f}, {100 * m['coverage']:.1f} %]"


def register(sub) -> None:
    p = sub.add_parser(
        "flowsim",
        parents=[options.JSON],
        help="KV-transfer completion times at scale on the flow-level engine (no root)",
        formatter_class=options.RAW,
        epilog=options.EPILOG_SPECS,
    )
    p.add_argument("spec", nargs="+", help="fabric spec(s)")
    p.add_argument("--pattern", default="rank-shifted", help="traffic pattern (default rank-shifted)")
    p.add_argument("--rounds", type=int, default=2, help="KV transfers per prefill GPU (default 2)")
    p.add_argument("--size-mb", type=float, default=100.0, help="KV transfer size in MB (default 100)")
    p.add_argument(
        "--window-ms", type=float, default=20.0, help="starts spread uniformly over this window (default 20)"
    )
    p.add_argument("--seeds", type=int, default=6, help="independent draws (starts, source ports) (default 6)")
    p.set_defaults(func=run)
