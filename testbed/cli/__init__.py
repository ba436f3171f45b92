"""`zlab` command line: model commands (no root), lab commands (root, live fabrics) and
experiment commands, each in its own module; one error policy here.

Exit codes: 0 ok; 1 runtime failure (one line with the cause and the log's path); 2 bad input
(one line naming the field and what is allowed); 3 an experiment ran but a fabric's run is
INVALID; 130 interrupted. Programming errors keep their traceback.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import RuntimeFailure, UserInputError
from . import experiment, lab, model, referee
from .model import EPILOG_SPECS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zlab", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="zlab: emulation testbed comparing ZCube and rail-optimized fat-tree fabrics "
                    "for prefill/decode-disaggregated LLM serving.",
        epilog=EPILOG_SPECS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    lab.add_commands(sub)
    model.add_commands(sub)
    experiment.add_commands(sub)
    referee.add_commands(sub)
    return p


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n"))


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserInputError as exc:
        print(f"zlab: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except RuntimeFailure as exc:
        print(f"zlab: failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("zlab: interrupted", file=sys.stderr)
        return 130
