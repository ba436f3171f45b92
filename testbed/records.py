"""The run folder's file formats: JSON documents and append-only JSON lines.

One writer and one reader for every raw record zlab keeps (agent transfers, queue and CPU
samples, controller logs), with one policy for a torn record:

* writers append one JSON object per line and flush it, so a crash loses nothing written;
* readers skip an unparsable **last** line — the record a killed process was writing — and
  report that they did; an unparsable line anywhere else means the file is damaged, and
  reading fails naming the file and line, because silently dropping records would change
  every metric computed from them.

Standard library only: the controller, the traffic agents' glue and the analysis all use it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class RecordError(Exception):
    """A raw record file that cannot be read as written."""


class JsonLines:
    """Append-only JSON-lines writer; a None path writes nothing (records disabled).
    compact=True drops spaces (for high-rate samples)."""

    def __init__(self, path, compact: bool = False):
        self._fh = open(path, "a", encoding="utf-8") if path else None
        self._sep = (",", ":") if compact else (", ", ": ")

    def write(self, rec: dict) -> None:
        if self._fh:
            self._fh.write(json.dumps(rec, sort_keys=True, separators=self._sep) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Records(list):
    """The records of one JSON-lines file; `torn` tells whether a torn last line was skipped."""

    def __init__(self, items=(), torn: bool = False):
        super().__init__(items)
        self.torn = torn


def read_jsonl(path) -> Records:
    """All records of a JSON-lines file (an absent file has none). See the module's policy."""
    path = Path(path)
    if not path.exists():
        return Records()
    lines = path.read_text(encoding="utf-8").splitlines()
    out, torn = [], False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:
                torn = True  # the record a killed writer was in the middle of
                continue
            raise RecordError(f"{path}:{i + 1}: damaged record (not JSON) before the end of the file") from None
    return Records(out, torn)


def write_json(path, obj, sort_keys: bool = True) -> None:
    """Write a JSON document atomically (readers never see half a file). sort_keys=False keeps
    an order that means something (the fabrics of an experiment, in the order given)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=sort_keys)
        fh.write("\n")
    os.replace(tmp, path)


def read_json(path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
