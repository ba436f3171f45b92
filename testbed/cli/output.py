"""One way to print results: aligned tables for people, JSON for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def fmt(value: Any, spec: str = "{:.2f}", missing: str = "—") -> str:
    """A value for a table cell: None prints as a dash, floats with `spec`."""
    if value is None:
        return missing
    if isinstance(value, float):
        return spec.format(value)
    return str(value)


def print_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, Callable[[Any], str] | None]]) -> None:
    """columns: (key, header, formatter). Text columns align left, the rest right."""
    cells = [[(f or fmt)(r.get(k)) for k, _, f in columns] for r in rows]
    heads = [h for _, h, _ in columns]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]
    left = [all(isinstance(r.get(k), str) for r in rows) for k, _, _ in columns]

    def line(vals):
        return " ".join(v.ljust(w) if lf else v.rjust(w) for v, w, lf in zip(vals, widths, left)).rstrip()

    print(line(heads))
    for c in cells:
        print(line(c))


def print_fields(pairs: Sequence[tuple[str, Any]], width: int = 15, indent: int = 2) -> None:
    """`key value` lines, keys padded to `width` (or the longest key), floats to 3 decimals."""
    width = max([width] + [len(k) for k, _ in pairs])
    for k, v in pairs:
        print(" " * indent + f"{k:<{width}} {fmt(v, '{:.3f}')}")
