"""`zlab controller`: the zlab OpenFlow app on os-ken for a run folder (its own flags)."""

from __future__ import annotations

import argparse


def run(args) -> int:
    from controllers.launch import main as launch

    return launch(args.rest)


def register(sub) -> None:
    ct = sub.add_parser("controller", help="run the zlab OpenFlow app on os-ken for a run folder", add_help=False)
    ct.add_argument("rest", nargs=argparse.REMAINDER)
    ct.set_defaults(func=run)
