"""Request-trace readers: Azure LLM inference CSV and Mooncake JSONL.

Every reader returns arrival times in seconds from the trace's first request, and fails on a
bad row with the file name and line number — a trace silently half-read changes an experiment.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).parent / "data"
BUILTIN = {"azure-code": DATA / "azure_llm_2023_code.csv", "azure-conv": DATA / "azure_llm_2023_conv.csv"}
MOONCAKE_BLOCK_TOKENS = 512


class TraceError(ValueError):
    """A trace that cannot be read, naming the file and line."""


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


FORMATS = {".csv": "Azure LLM inference CSV", ".jsonl": "Mooncake JSON lines"}


def read(name_or_path: str) -> list[TraceRequest]:
    """The trace's requests; the reader is chosen by the file's extension (.csv or .jsonl)."""
    p = resolve(name_or_path)
    if p.suffix == ".jsonl":
        return read_mooncake(p)
    if p.suffix == ".csv":
        return read_azure(p)
    raise TraceError(
        f"{p}: unsupported trace format {p.suffix or '(no extension)'!r}; zlab reads "
        + ", ".join(f"{ext} ({what})" for ext, what in FORMATS.items())
    )


def _read_text(path: Path) -> str:
    """The file as UTF-8 text, or a TraceError naming the file (and line) of what is not."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
    if data[:2] == b"\x1f\x8b":
        raise TraceError(f"{path}: gzip-compressed; decompress it first (gunzip -k {path.name})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TraceError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); is this a trace file?"
        ) from None


def _whole(value, name: str) -> int:
    """A token count: a JSON integer (or an integral number), never a bool, fraction or string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} is negative ({value})")
    return int(value)


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
    with io.StringIO(_read_text(path), newline="") as fh:
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
    out, t0, prev = [], None, None
    for line, text in enumerate(_read_text(path).splitlines(), start=1):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
            if not isinstance(rec, dict):
                raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
            stamp = rec["timestamp"]
            if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
                raise ValueError(f"timestamp must be a finite number of milliseconds, got {stamp!r}")
            ts = float(stamp) / 1000.0
            if prev is not None and ts < prev:
                raise ValueError(f"timestamps go backwards ({stamp} after {prev * 1000:g})")
            inp, outp = _whole(rec["input_length"], "input_length"), _whole(rec["output_length"], "output_length")
            hashes = tuple(_whole(h, "hash_id") for h in rec.get("hash_ids", []))
            if hashes and len(hashes) != -(-inp // MOONCAKE_BLOCK_TOKENS):
                raise ValueError(f"{len(hashes)} hash_ids for {inp} tokens (512-token blocks)")
        except KeyError as exc:
            raise TraceError(f"{path}:{line}: missing field {exc.args[0]!r}") from None
        except (ValueError, TypeError) as exc:
            raise TraceError(f"{path}:{line}: {exc}") from None
        prev = ts
        t0 = ts if t0 is None else t0
        out.append(TraceRequest(ts - t0, inp, outp, hashes))
    if not out:
        raise TraceError(f"{path}: no requests")
    return out
