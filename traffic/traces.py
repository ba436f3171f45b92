"""Request-trace readers: Azure LLM inference CSV and Mooncake JSONL.

Every reader returns arrival times in seconds from the trace's first request, and fails on a
bad row with the file name and line number — a trace silently half-read changes an experiment.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).parent / "data"
BUILTIN = {"azure-code": DATA / "azure_llm_2023_code.csv"}
MOONCAKE_BLOCK_TOKENS = 512


class TraceError(ValueError):
    pass


@dataclass(frozen=True)
class TraceRequest:
    t_s: float  # arrival, seconds after the trace's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = field(default=())  # Mooncake: one id per 512-token prefix block


def resolve(name_or_path: str) -> Path:
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]
    p = Path(name_or_path)
    if not p.exists():
        raise TraceError(f"trace {name_or_path!r} not found; built-in traces: {', '.join(BUILTIN)}")
    return p


def read(name_or_path: str) -> list[TraceRequest]:
    p = resolve(name_or_path)
    if p.suffix == ".jsonl":
        return read_mooncake(p)
    return read_azure(p)


def _parse_ts(text: str) -> dt.datetime:
    # 'YYYY-MM-DD HH:MM:SS.fffffff' (7 fractional digits; Python parses up to 6)
    head, _, frac = text.strip().partition(".")
    base = dt.datetime.strptime(head, "%Y-%m-%d %H:%M:%S")
    micro = int((frac + "000000")[:6]) if frac else 0
    if frac and not frac.isdigit():
        raise ValueError(f"bad fraction {frac!r}")
    return base.replace(microsecond=micro)


def read_azure(path) -> list[TraceRequest]:
    path = Path(path)
    out, t0 = [], None
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
            raise TraceError(f"{path}:1: expected header TIMESTAMP,ContextTokens,GeneratedTokens, got {header}")
        prev = None
        for line, row in enumerate(reader, start=2):
            try:
                if len(row) != 3:
                    raise ValueError(f"{len(row)} columns, expected 3")
                ts = _parse_ts(row[0])
                inp, outp = int(row[1]), int(row[2])
                if inp < 0 or outp < 0:
                    raise ValueError("negative token count")
                if prev is not None and ts < prev:
                    raise ValueError("timestamps go backwards")
            except ValueError as exc:
                raise TraceError(f"{path}:{line}: {exc}: {','.join(row)}") from None
            prev = ts
            t0 = t0 or ts
            out.append(TraceRequest((ts - t0).total_seconds(), inp, outp))
    if not out:
        raise TraceError(f"{path}: no requests")
    return out


def read_mooncake(path) -> list[TraceRequest]:
    """Mooncake FAST'25 format: {"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}."""
    path = Path(path)
    out, t0 = [], None
    with open(path, encoding="utf-8") as fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
                ts = float(rec["timestamp"]) / 1000.0
                inp, outp = int(rec["input_length"]), int(rec["output_length"])
                hashes = tuple(int(h) for h in rec.get("hash_ids", []))
                if inp < 0 or outp < 0:
                    raise ValueError("negative length")
                if hashes and len(hashes) != -(-inp // MOONCAKE_BLOCK_TOKENS):
                    raise ValueError(f"{len(hashes)} hash_ids for {inp} tokens (512-token blocks)")
            except (ValueError, KeyError, TypeError) as exc:
                raise TraceError(f"{path}:{line}: {exc.__class__.__name__}: {exc}") from None
            t0 = ts if t0 is None else t0
            out.append(TraceRequest(ts - t0, inp, outp, hashes))
    if not out:
        raise TraceError(f"{path}: no requests")
    return out
