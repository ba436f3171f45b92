"""Flags and texts several commands share, declared once: a command lists the parents it takes
(`parents=[options.JSON]`), so `--json` means the same everywhere and its help cannot drift."""

from __future__ import annotations

import argparse

RAW = argparse.RawDescriptionHelpFormatter

EPILOG_SPECS = """fabric specs (kind:key=value,...), e.g.
  zcube:n=4,gpus_per_server=4              ZCube(4,2), the paper's 16-GPU testbed
  zcube:n=8,gpus=32,links_per_pair=2       Zhipu's rectangular 32-GPU form
  roft:gpus=16,gpus_per_server=4,segments=2
  roft:gpus=16384,radix=128                three tiers (640 switches)
run 'zlab fabric kinds' for every parameter with its default."""


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


JSON = _parent()
JSON.add_argument("--json", action="store_true", help="machine-readable output")

EXPERIMENT = _parent()  # what `zlab run` and `zlab sweep` both take
EXPERIMENT.add_argument(
    "--set",
    action="append",
    metavar="KEY=VALUE",
    help="override a spec field, e.g. deployment.mapping=rank-shifted (repeatable)",
)
EXPERIMENT.add_argument("--results", default="results", help="where run folders go (default ./results)")
EXPERIMENT.add_argument("--no-progress", action="store_true", help="no progress bar")
