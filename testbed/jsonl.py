"""Append-only JSON lines: the raw-record format of every zlab collector.

Writers flush per record so a crash loses nothing already written; readers skip a torn last
line (a run killed mid-write) instead of failing.
"""

from __future__ import annotations

import json
from pathlib import Path


class JsonLines:
    def __init__(self, path):
        self._fh = open(path, "a", encoding="utf-8") if path else None

    def write(self, rec: dict) -> None:
        if self._fh:
            self._fh.write(json.dumps(rec, sort_keys=True) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh:
            self._fh.close()


def read_jsonl(path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a torn last line of an interrupted run
    return out
