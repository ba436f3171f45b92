"""`zlab` command line: one module per command under cli/commands/ (its `register(subparsers)`
beside its `run(args)`), listed once in COMMANDS in the order `zlab -h` shows them; one error
policy here. docs/development-cli.md says how to add a command.

Exit codes: 0 ok; 1 runtime failure (one line with the cause and the log's path); 2 bad input
(one line naming the field and what is allowed); 3 an experiment ran but a fabric's run is
INVALID; 130 interrupted. Programming errors keep their traceback.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import RuntimeFailure, Terminated, UserInputError
from .commands import (
    capacity,
    capture,
    clean,
    compare,
    controller,
    cost,
    deadlock,
    destroy,
    doctor,
    fabric,
    flowsim,
    inspect,
    layout,
    load,
    multiplane,
    referee,
    report,
    resilience,
    route,
    run,
    send,
    sweep,
    up,
    verify_paths,
    wiring_check,
)
from .options import EPILOG_SPECS

# lab (root, live fabrics), model (no root), experiment, referee: the order of `zlab -h`
COMMANDS = (
    doctor,
    clean,
    up,
    inspect,
    destroy,
    controller,
    wiring_check,
    verify_paths,
    send,
    capture,
    fabric,
    route,
    cost,
    load,
    resilience,
    deadlock,
    flowsim,
    layout,
    multiplane,
    run,
    sweep,
    capacity,
    compare,
    report,
    referee,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zlab",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="zlab: emulation testbed comparing ZCube and rail-optimized fat-tree fabrics "
        "for prefill/decode-disaggregated LLM serving.",
        epilog=EPILOG_SPECS,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
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
    except Terminated as exc:  # zlab destroy or kill: whatever was brought up was torn down on the way out
        print(f"zlab: terminated ({exc})", file=sys.stderr)
        return 143
