"""Tables of the referee's shipped reference summaries (results/reference/referee/<run>/{same,real}.json).

Read, never copied: when those summaries are regenerated, `scripts/docs_figures.py write` redraws the tables.
"""

from __future__ import annotations

import json
from pathlib import Path

NAMES = {"zcube": "ZCube", "roft": "ROFT"}


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def _outside(emu: float, lo: float, hi: float) -> float:
    """How far emu lies outside [lo, hi], relative to emu: testbed/referee/compare.py's _interval_gap, redone here
    because the shipped summaries predate that field (and importing the referee pulls in pandas)."""
    lo, hi = min(lo, hi), max(lo, hi)
    return 0.0 if lo <= emu <= hi else abs((lo if emu < lo else hi) - emu) / abs(emu)


def _interval(f: dict, key: str) -> float:
    raw, lm = f[key], f[key + "_link_model"]
    if "interval_gap" in lm:
        return lm["interval_gap"]
    return _outside(raw["emu_s"]["mean"], lm["ns3_s"]["mean"], raw["ns3_s"]["mean"])


def _runs(folder: Path, scale: str) -> list[tuple[str, dict]]:
    return [
        (d.name, json.loads((d / f"{scale}.json").read_text()))
        for d in sorted(folder.iterdir())
        if (d / f"{scale}.json").is_file()
    ]


def _reqs(s: dict) -> str:
    return "all requests" if s.get("requests") is None else f"first {s['requests']} requests"


def _repeats(f: dict) -> str:
    valid = f.get("emu_valid") or []
    bad = sum(v is False for v in valid)
    return f"{f['repeats']}" + (f" ({bad} INVALID)" if bad else "")


def same_table(folder: Path) -> str:
    """Same scale: gaps between the means over repeats, raw and judged inside [ns-3 less the term, ns-3]."""
    out = [
        "| run | fabric | repeats replayed | KV p50 gap | KV p99 gap | p50 / p99 less the link-model term "
        "| p50 / p99 outside [ns-3 less the term, ns-3] | link bytes, worst port beyond one frame "
        "| largest queue, emu vs ns-3 | p99 ratio, emu vs ns-3 (gap) | ns-3 wall per replay |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run, s in _runs(folder, "same"):
        r = s.get("kv_p99_ratio")
        for i, (label, f) in enumerate(s["fabrics"].items()):
            lm50, lm99 = f["kv_p50_link_model"], f["kv_p99_link_model"]
            inside = f"{_pct(_interval(f, 'kv_p50'))} / {_pct(_interval(f, 'kv_p99'))}"
            q = f["queues"]
            ratio = f"{r['emu']:.3f} vs {r['ns3']:.3f} ({_pct(r['gap'])})" if (r and i == 0) else ""
            out.append(
                f"| {f'`{run}/`' if i == 0 else ''} | {NAMES.get(label, label)} "
                f"| {_repeats(f)} | {_pct(f['kv_p50']['gap'])} | {_pct(f['kv_p99']['gap'])} "
                f"| {_pct(lm50['gap'])} / {_pct(lm99['gap'])} | {inside} "
                f"| {_pct(f['links']['max_error_beyond_frame'])} "
                f"| {q['emu_max_bytes'] / 1e3:.0f} vs {q['ns3_max_bytes'] / 1e3:.0f} KB | {ratio} "
                f"| {max(f['ns3_wall_s']):.2f} s |"
            )
    return "\n".join(out)


def real_table(folder: Path) -> str:
    """Real scale: ns-3 at real rates and sizes against the emulation converted to real units."""
    out = [
        "| run, size_scale (dilation), requests | fabric | KV p50 gap | KV p99 gap "
        "| max queue, real MB (emu → ns-3) | max queueing delay, real µs (emu → ns-3) "
        "| port-samples above the XOFF (emu → ns-3) | ns-3 wall per repeat |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, s in _runs(folder, "real"):
        for i, (label, f) in enumerate(s["fabrics"].items()):
            q, x, wall = f["queues"], f["xoff"], f["ns3_wall_s"]
            head = (
                (f"`{run}/`, {s['size_scale'][label]:.3g} ({s['dilation'][label]:,.0f}), {_reqs(s)}") if i == 0 else ""
            )
            out.append(
                f"| {head} | {NAMES.get(label, label)} | {_pct(f['kv_p50']['gap'])} | {_pct(f['kv_p99']['gap'])} "
                f"| {q['emu_max_bytes'] / 1e6:.3g} → {q['ns3_max_bytes'] / 1e6:.3g} "
                f"| {q['emu_max_delay_real_s'] * 1e6:,.1f} → {q['ns3_max_delay_real_s'] * 1e6:,.1f} "
                f"| {100 * x['emu_fraction']:.3g} % → {100 * x['ns3_fraction']:.3g} % "
                f"(XOFF {x['xoff_real_bytes'] / 1e3:,.0f} KB) | {min(wall):.0f}–{max(wall):.0f} s |"
            )
    return "\n".join(out)


TABLES = {"referee-same": same_table, "referee-real": real_table}
