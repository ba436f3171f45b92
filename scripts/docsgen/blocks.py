"""Find and replace generated blocks in Markdown, so no measured figure is pasted by hand.

A block is ``<!-- figure:NAME -->`` ... ``<!-- /figure -->``; everything between the markers belongs
to the generator and is rewritten by ``scripts/docs_figures.py write``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

BLOCK = re.compile(r"<!-- figure:(?P<name>[A-Za-z0-9_.-]+) -->\n(?P<body>.*?)<!-- /figure -->", re.S)


@dataclass(frozen=True)
class Block:
    path: Path
    name: str
    body: str
    line: int


def markdown_files(root: Path) -> list[Path]:
    """README.md and every page under docs/, the set the figures and links are checked on."""
    docs = sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []
    return [root / "README.md", *docs]


def blocks(path: Path, text: str | None = None) -> list[Block]:
    text = path.read_text() if text is None else text
    return [Block(path, m["name"], m["body"], text.count("\n", 0, m.start()) + 1) for m in BLOCK.finditer(text)]


def replace(text: str, render) -> str:
    """Text with every block's body replaced by render(name) (None leaves a block as it is)."""

    def sub(m: re.Match) -> str:
        body = render(m["name"])
        if body is None:
            return m.group(0)
        return f"<!-- figure:{m['name']} -->\n{body.rstrip()}\n<!-- /figure -->"

    return BLOCK.sub(sub, text)
