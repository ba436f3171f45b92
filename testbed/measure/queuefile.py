"""A repeat's queue samples (raw/rep<k>/queues.jsonl) read straight into arrays.

Why not records.read_jsonl: the collector writes one line per 10 ms sample with four counters per
switch egress port, and a 256-GPU fabric's 19,000 samples x 1,024 ports held as dicts of lists of
Python ints took about 1.4 GB per fabric (the report holds every fabric) before the tables were
even built. Here each line is parsed and copied into preallocated int64 arrays at once, so only
the arrays (8 bytes a counter) stay. Same reading policy as read_jsonl: blank lines are skipped, a
torn last line (a killed writer) is dropped, a damaged line before the end is an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..records import RecordError

COUNTERS = ("b", "q", "d", "x")  # backlog bytes, queue length (frames), drops, sent bytes: cumulative per port


@dataclass
class QueueFile:
    """The header and footer records, and per sample (rows) its t_ns and dump_ns and, per port
    (columns, in the header's port order), each counter."""

    header: dict | None = None
    footer: dict | None = None
    t_ns: np.ndarray = field(default_factory=lambda: np.array([]))
    dump_ns: np.ndarray = field(default_factory=lambda: np.array([], dtype=float))
    counters: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return len(self.t_ns)


def _line_count(path: Path) -> int:
    n = 1
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            n += chunk.count(b"\n")
    return n


def read(path) -> QueueFile:
    """The samples of one queues.jsonl (an absent file has none)."""
    path = Path(path)
    out = QueueFile()
    if not path.exists():
        return out
    cap = _line_count(path)
    t_ns, dump_ns, arrays = [], [], {}
    damaged = None  # the line number of an unparsable line: an error unless it is the last line
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if damaged is not None:
                raise RecordError(f"{path}:{damaged}: damaged record (not JSON) before the end of the file")
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError:
                damaged = i + 1
                continue
            if r.get("type") == "header" and out.header is None:
                out.header = r
            if r.get("type") == "footer" and out.footer is None:
                out.footer = r
            if "t_ns" not in r:
                continue
            if not arrays:
                arrays = {k: np.zeros((cap, len(r[k])), dtype=np.int64) for k in COUNTERS}
            for k in COUNTERS:
                arrays[k][len(t_ns)] = r[k]
            t_ns.append(r["t_ns"])
            dump_ns.append(r.get("dump_ns", 0))
    out.t_ns = np.array(t_ns)
    out.dump_ns = np.array(dump_ns, dtype=float)
    # a view: the few spare rows (header, footer) were never written, so their zero pages were never touched
    out.counters = {k: a[: len(t_ns)] for k, a in arrays.items()}
    return out
