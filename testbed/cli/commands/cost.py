"""`zlab cost`: ZCube against two- and three-tier ROFT, inventory and cost side by side."""

from __future__ import annotations

from ...fabric.params import SpecError
from .. import options
from ..output import print_json


def run(args) -> int:
    from dataclasses import fields

    from ...fabric.cost import Prices, compare, format_table

    try:
        gpus = [int(x) for x in args.gpus.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"--gpus takes comma-separated integers, got {args.gpus!r}") from None
    overrides = {}
    valid = {f.name for f in fields(Prices)}
    for item in args.price or []:
        key, _, value = item.partition("=")
        if key not in valid:
            raise SpecError(f"unknown price {key!r}; valid: {', '.join(sorted(valid))}")
        try:
            overrides[key] = float(value)
        except ValueError:
            raise SpecError(f"--price {item!r}: {value!r} is not a number") from None
    prices = Prices(**overrides)
    rows = compare(gpus, prices, args.gpus_per_server)
    if args.json:
        print_json(rows)
    else:
        print(format_table(rows, prices))
    return 0


def register(sub) -> None:
    co = sub.add_parser(
        "cost", parents=[options.JSON], help="ZCube vs two- and three-tier ROFT inventory and cost, side by side"
    )
    co.add_argument("--gpus", default="1024,16384", help="comma-separated square GPU counts (default 1024,16384)")
    co.add_argument("--gpus-per-server", type=int, default=8, help="default 8")
    co.add_argument(
        "--price",
        action="append",
        metavar="NAME=USD",
        help="override an illustrative price (switch_usd_per_gbps, optic_usd_per_gbps, "
        "fibre_cable_usd, copper_cable_usd); repeatable",
    )
    co.set_defaults(func=run)
