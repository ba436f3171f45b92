"""`zlab verify-paths`: which path probes took, from switch counters, against the model."""

from __future__ import annotations

from ...errors import UserInputError
from .. import options
from ..output import print_json


def run(args) -> int:
    from ...emulation.probes import LiveRun, prove_path

    live = LiveRun(args.run_dir)
    bad = 0
    results = []
    for item in args.pairs:
        src, _, dst = item.partition(":")
        if not dst:
            raise UserInputError(f"pair {item!r} is not SRC_PORT:DST (e.g. g0-p0:g5)")
        proof = prove_path(live, src, dst, sport=args.sport, count=args.count)
        bad += not proof.ok
        results.append(proof.__dict__ | {"ok": proof.ok})
        if not args.json:
            fmt = lambda hops: " -> ".join(f"{s}[out {p}]" for s, p in hops) or "(nothing counted)"  # noqa: E731
            print(
                f"{'ok  ' if proof.ok else 'FAIL'} {src} -> {proof.dst} sport {args.sport}: "
                f"model {fmt(proof.model)}; counters {fmt(proof.observed)}"
            )
    if args.json:
        print_json(results)
    return 1 if bad else 0


def register(sub) -> None:
    vp = sub.add_parser(
        "verify-paths", parents=[options.JSON], help="prove from switch counters which path probes took, vs the model"
    )
    vp.add_argument("run_dir", help="run folder of a running fabric")
    vp.add_argument("pairs", nargs="+", metavar="SRC_PORT:DST", help="e.g. g0-p0:g5 (DST: GPU or GPU port)")
    vp.add_argument("--sport", type=int, default=49152, help="UDP source port of the probes (ECMP entropy)")
    vp.add_argument("--count", type=int, default=20, help="probes per pair (default 20)")
    vp.set_defaults(func=run)
