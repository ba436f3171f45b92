"""The longest functions in the tree, by source lines (def line to last line, docstring included):
the figure issue 23's closing note compares before and after a refactor.

    .venv/bin/python scripts/dev/longest_functions.py [--top N] [PATH ...]   (default: testbed controllers traffic)
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def functions(path: Path):
    """(lines, "file: qualified name") for every function and method in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                yield child.end_lineno - child.lineno + 1, f"{path.relative_to(REPO)}: {name}"
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")

    yield from walk(tree, "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["testbed", "controllers", "traffic"])
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args(argv)
    files = [f for p in args.paths for f in ([REPO / p] if (REPO / p).is_file() else sorted((REPO / p).rglob("*.py")))]
    found = [f for file in files for f in functions(file)]
    for lines, name in sorted(found, reverse=True)[: args.top]:
        print(f"{lines:5d}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
