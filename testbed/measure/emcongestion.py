"""The emulation's congestion signals, from a run whose fabrics ran the congestion section's ECN
and DCQCN (run.json "emulation_congestion"): ECN marks at the switches (the BPF marker's
counters, raw/rep<k>/ecn.json), CE-marked frames and CNPs at the NICs and each QP's DCQCN rate
changes (the agent's counters.json), per fabric with 95 % intervals over repeats.

Why apart from congestion.py: the packet engine's records are ns-3's files; these are the
marker's and the agents'. It fails closed like it: a fabric that says it marked but has no
marker record, or whose marker chose frames the kernel could not mark, voids the result.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..records import read_jsonl
from .congestion import CongestionRecordsMissing
from .stats import ci95

KEYS = ("ect_frames", "marks", "marked_fraction", "ce_rx", "cnps_tx", "cnps_rx", "rate_changes", "lowest_rate_fraction")
PAUSE_KEYS = (
    "pauses",
    "pauses_after_failure",
    "pauses_on_detours",
    "reaction_real_ns_p50",
    "reaction_real_ns_p99",
    "reaction_real_ns_max",
)


def pause_record(fd) -> dict | None:
    """Lossless mode's pauses in one repeat (raw/rep<k>/pfc.csv and pauses.json, written by
    testbed/emulation/pauses.py), or None when the fabric did not run lossless. The reaction time
    of a PAUSE runs from the sample before the one that saw the crossing (the crossing can be
    anywhere after it) to the kernel's acknowledgement of the shut gate, in real-equivalent ns
    (wall / dilation). Fails closed: a lossless fabric without its records voids the result."""
    mode = fd.run.get("emulation_congestion") or {}
    if not mode.get("pause_period_us"):
        return None
    raw = Path(fd.raw)
    for name in ("pfc.csv", "pauses.json"):
        if not (raw / name).exists():
            raise CongestionRecordsMissing(f"{raw / name}: missing; the fabric ran lossless, so the result is void")
    ev = pd.read_csv(raw / "pfc.csv")
    loop = json.loads((raw / "pauses.json").read_text())
    d = float(mode["dilation"])
    c = mode["section"]
    pauses = ev[ev.event == 1]
    reaction = (pauses.t_applied_ns - pauses.t_prev_sample_ns).to_numpy(dtype=float) / d
    plan_path = raw / "pause_plan.json"
    detours = set(json.loads(plan_path.read_text()).get("detour_ports", [])) if plan_path.exists() else set()
    cut = None
    if (raw / "injections.jsonl").exists():
        downs = [r["t_ns"] for r in read_jsonl(raw / "injections.jsonl") if r.get("action") in ("down", "gray")]
        cut = min(downs) if downs else None
    return {
        "pauses": int(len(pauses)),
        # failure runs: pauses from the first injected failure on, and those a detour port caused (and
        # the transmitters they held: does a storm on a detour spread?)
        "pauses_after_failure": int((pauses.t_ns >= cut).sum()) if cut is not None else None,
        "pauses_on_detours": int(pauses.cause_port.isin(detours).sum()),
        "held_by_detours": sorted(set(pauses.peer_port[pauses.cause_port.isin(detours)])),
        "paused_transmitters": sorted(set(pauses.peer_port)),
        "reaction_real_ns_p50": float(np.percentile(reaction, 50)) if len(reaction) else None,
        "reaction_real_ns_p99": float(np.percentile(reaction, 99)) if len(reaction) else None,
        "reaction_real_ns_max": float(reaction.max()) if len(reaction) else None,
        # the time real PFC's headroom buys: factor x link delay (its bytes arrive at line rate)
        "headroom_real_ns": float(c["pfc_headroom_factor"] * c["link_delay_ns"]),
        "period_real_ns": float(loop["period_ns"]) / d,
        "samples": int(loop["samples"]),
        "late_periods": int(loop["late_periods"]),
    }


def repeat_summary(fd) -> dict:
    """One repeat of one fabric. ect_frames counts ECT frames at every switch egress they left
    (a frame crossing three switches counts three times); marks, those marked there."""
    mode = fd.run.get("emulation_congestion") or {}
    out = {
        "repeat": fd.repeat,
        "ect_frames": 0,
        "marks": 0,
        "qualitative_ports": len(mode.get("qualitative_ports", [])),
    }
    if mode.get("ecn_ports"):
        path = Path(fd.raw) / "ecn.json"
        if not path.exists():
            raise CongestionRecordsMissing(f"{path}: missing; the fabric ran the ECN marker, so the result is void")
        ports = json.loads(path.read_text())["ports"]
        bad = {p: sum(v["unmarkable"]) for p, v in ports.items() if sum(v["unmarkable"])}
        if bad:
            port, n = next(iter(bad.items()))
            raise CongestionRecordsMissing(
                f"{path}: the kernel could not mark {n} frame(s) the curve chose at {port}; the marking is void"
            )
        out["ect_frames"] = sum(sum(v["frames"]) for v in ports.values())
        out["marks"] = sum(sum(v["marked"]) for v in ports.values())
    qps = fd.counters.get("qps")
    if qps is None:
        raise CongestionRecordsMissing(f"{fd.raw}/counters.json: no QP counters; the CNP figures are void")
    missing = [q["qp"] for q in qps if "ecn" not in q]
    if missing:
        raise CongestionRecordsMissing(f"{fd.raw}/counters.json: QP {missing[0]} has no ECN counters; void")
    out["marked_fraction"] = out["marks"] / out["ect_frames"] if out["ect_frames"] else 0.0
    out["ce_rx"] = sum(q["ecn"]["ce_rx"] for q in qps)
    out["cnps_tx"] = sum(q["ecn"]["cnps_tx"] for q in qps)
    out["cnps_rx"] = sum(q["ecn"]["cnps_rx"] for q in qps)
    changes = [q["ecn"]["rate_changes"] for q in qps]
    out["rate_changes"] = sum(len(c) for c in changes)
    lows = []
    for q, c in zip(qps, changes):
        if c:
            line = fd.port_rate_bps([q["src"]])[0]
            lows.append(min(r for _, r in c) / line)
    out["lowest_rate_fraction"] = min(lows) if lows else 1.0
    out["pause_loop"] = pause_record(fd)
    return out


def summary(datas: dict) -> dict:
    """Per fabric: each repeat's figures and mean ± 95 % CI of each."""
    out = {}
    for label, reps in datas.items():
        rows = [repeat_summary(fd) for fd in reps]
        out[label] = {"repeats": rows, **{k: ci95([r[k] for r in rows]) for k in KEYS}}
        loops = [r["pause_loop"] for r in rows if r["pause_loop"] is not None]
        if loops:
            out[label]["lossless"] = {k: ci95([p[k] for p in loops]) for k in PAUSE_KEYS}
            out[label]["lossless"]["headroom_real_ns"] = loops[0]["headroom_real_ns"]
            out[label]["lossless"]["period_real_ns"] = loops[0]["period_real_ns"]
    return out


def active(datas: dict) -> bool:
    return any(fd.run.get("emulation_congestion") for reps in datas.values() for fd in reps)


def markdown(cong: dict, labels: list[str], mode: str) -> list[str]:
    def c(x: dict, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
        if x["mean"] is None:
            return "—"
        s = fmt.format(x["mean"] * scale)
        return s + (f" ± {fmt.format(x['ci95'] * scale)}" if x["ci95"] is not None else "")

    lines = [
        "## Congestion (emulation: ECN marking, CNPs, DCQCN, lossless pauses)",
        "",
        f"Mode: {mode}. Mean ± 95 % CI over repeats. ECT frames and marks are counted at every switch egress port a "
        "frame left (the BPF marker's counters); CE frames and CNPs at the NICs; the lowest DCQCN rate is a "
        "fraction of the QP's line rate.",
        "",
        "| fabric | ECT frames at switch ports | marks | marked % | CE frames received | CNPs sent | CNPs received "
        "| DCQCN rate changes | lowest rate (% of line) | qualitative ports |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lab in labels:
        f = cong[lab]
        q = f["repeats"][0]["qualitative_ports"]
        lines.append(
            f"| {lab} | {c(f['ect_frames'])} | {c(f['marks'])} | {c(f['marked_fraction'], 100, '{:.1f}')} | "
            f"{c(f['ce_rx'])} | {c(f['cnps_tx'])} | {c(f['cnps_rx'])} | {c(f['rate_changes'])} | "
            f"{c(f['lowest_rate_fraction'], 100, '{:.1f}')} | {q} |"
        )
    lossless = [lab for lab in labels if "lossless" in cong[lab]]
    if lossless:
        lines += [
            "",
            "Lossless mode (egress-triggered pauses, docs/congestion.md): PAUSE events per repeat, and the pause loop's "
            "reaction time in real-equivalent microseconds (from the sample before the crossing to the shut gate), "
            "against the time real PFC's headroom covers.",
            "",
            "| fabric | PAUSE events | after the first failure | caused at detour ports | reaction p50 (us) "
            "| reaction p99 (us) | reaction max (us) | headroom covers (us) | sampling period (us) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for lab in lossless:
            x = cong[lab]["lossless"]
            lines.append(
                f"| {lab} | {c(x['pauses'])} | {c(x['pauses_after_failure'])} | {c(x['pauses_on_detours'])} | "
                f"{c(x['reaction_real_ns_p50'], 1e-3, '{:.2f}')} | "
                f"{c(x['reaction_real_ns_p99'], 1e-3, '{:.2f}')} | {c(x['reaction_real_ns_max'], 1e-3, '{:.2f}')} | "
                f"{x['headroom_real_ns'] / 1e3:.2f} | {x['period_real_ns'] / 1e3:.2f} |"
            )
    if any(cong[lab]["repeats"][0]["qualitative_ports"] for lab in labels):
        lines += [
            "",
            "Ports whose Kmax is below 4 emulated frames mark on a queue the emulation cannot resolve: there the "
            "marking is qualitative (docs/congestion.md, the emulation).",
        ]
    return lines
