"""`zlab inspect`: the live runs on this machine (zlab up and zlab run)."""

from __future__ import annotations

from .. import options
from ..output import print_json


def run(args) -> int:
    from ...lab.live import describe, live_runs

    rows = [describe(r) for r in live_runs()]
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("zlab inspect: no live zlab runs")
        return 0
    from ..output import print_table

    for r in rows:
        r["age"] = "?" if r["age_s"] is None else f"{r['age_s']:.0f} s"
        r["ports_s"] = f"{r['ports']} ({r['bridges']} switches, {r['hosts']} hosts)"
    print_table(
        rows,
        [
            ("run", "run", None),
            ("kind", "kind", None),
            ("spec", "spec", None),
            ("pid", "pid", None),
            ("age", "age", None),
            ("controller", "controller", None),
            ("datapath", "datapath", None),
            ("ports_s", "veth ends", None),
            ("status", "status", None),
            ("user", "user", None),
        ],
    )
    return 0


def register(sub) -> None:
    ins = sub.add_parser(
        "inspect",
        parents=[options.JSON],
        help="live runs (zlab up and zlab run): spec, pid, age, controller, ports, datapath",
    )
    ins.set_defaults(func=run)
