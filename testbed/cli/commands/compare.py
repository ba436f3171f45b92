"""`zlab compare`: key metrics of several run folders side by side."""

from __future__ import annotations

from .. import options
from ..experiments import compare_roots


def run(args) -> int:
    return compare_roots(args.runs, args.json)


def register(sub) -> None:
    cm = sub.add_parser(
        "compare",
        parents=[options.JSON],
        help="key metrics of several runs side by side (means over repeats; real ms, µs)",
    )
    cm.add_argument("runs", nargs="+", help="run folders")
    cm.set_defaults(func=run)
