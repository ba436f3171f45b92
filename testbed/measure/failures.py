"""Failure experiments: per injected failure, when it was detected, when the fabric recovered,
what it hit and what the degraded paths cost — from the raw records of one repeat.

Sources (all in the fabric's run folder): failures.json (the plan: steps, states, tables),
raw/rep<k>/injections.jsonl (what the injector did, when), controller/failures.jsonl (what the
controller detected and installed, when), raw/rep<k>/counters.json (each QP's acknowledgement
stalls and path migrations), transfers.jsonl and the queue samples. All clocks are
CLOCK_MONOTONIC; times are reported emulated (s) and real (÷ dilation).

Definitions: the QPs a failure hits are those whose healthy path crosses a cable it took down
(the routing model's answer). A hit QP recovers when its first acknowledgement stall that ends
after the failure ends (data moving again); the recovery time is the last such moment minus the
injection. Detection is the controller's first state change that contains the failed cables
(host recovery: the first path migration of a hit QP, if earlier).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..fabric.failures import crossing
from ..records import read_json, read_jsonl


def _onsets(doc: dict, inj: list[dict]) -> list[tuple[dict, dict, list[int]]]:
    """(injection record, plan step, cables newly down) for every step that took cables down."""
    out, before = [], set()
    recs = [r for r in inj if r["action"] in ("down", "up", "gray", "clear")]
    for rec, step in zip(recs, doc["steps"]):
        now = set(step["state"])
        new = sorted(now - before)
        if new and step["action"] in ("down", "gray"):
            out.append((rec, step, new))
        before = now
    return out


def _detour_ports(fd, doc: dict, state_links: list[int]) -> list[str]:
    """Switch ports that carry entries in the degraded state they did not carry before (detours,
    surviving ECMP members): where the rerouted traffic queues."""
    st = next((s for s in doc["states"] if s["down_links"] == state_links), None)
    if st is None:
        return []
    flows = read_json(fd.dir / "flows.json")["switches"]
    out = set()
    for sw, entries in st["switches"].items():
        before = {
            (e["priority"], e["ipv4_dst"], e["ipv4_mask"], tuple(e["udp_src"] or ())): e["out_port"]
            for e in flows[sw]["entries"]
        }
        for e in entries:
            k = (e["priority"], e["ipv4_dst"], e["ipv4_mask"], tuple(e["udp_src"] or ()))
            if before.get(k) != e["out_port"]:
                out.add(f"{sw}-p{e['out_port']}")
    return sorted(out)


def qp_outcome(q: dict, t_fail: int, t_fixed: int, t_next: int) -> tuple[str, int | None]:
    """How a failure treated one QP it hit: ("recovered", t_resumed), ("unrecovered", None) or
    ("unhurt", None). q: the QP's counters (stalls_ns, repairs_ns, migrations_ns, open_since_ns).

    The failure's part is the stall that spans it or began before the QP's path was repaired (the
    controller's install, or the QP's own move to its other port), and its loss repairs (go-back-N):
    every one that began before the path was repaired (a gray failure loses frames again and again),
    and the first after it — frames sent before the cut can still be acknowledged after the repair,
    from deep queues on the surviving hops, so the NAK for the last loss may come late. The QP
    resumed when the last of these ended. Later stalls without loss repair are congestion."""
    moved = [t for t in q.get("migrations_ns", []) if t >= t_fail]
    t_q = moved[0] if moved else t_fixed
    stall = next((s for s in q.get("stalls_ns", []) if s[1] > t_fail and s[0] < t_q), None)
    during = [r for r in q.get("repairs_ns", []) if t_fail <= r[0] < t_next]
    repairs = [r for r in during if r[0] < t_q] + [r for r in during if r[0] >= t_q][:1]
    if any(r[1] is None for r in repairs):
        return "unrecovered", None
    ends = [x[1] for x in [stall, *repairs] if x is not None]
    if ends:
        return "recovered", max(ends)
    if q.get("open_since_ns") is not None and q["open_since_ns"] < t_next:
        return "unrecovered", None
    return "unhurt", None


def events(fd, tables: dict) -> list[dict]:
    """One row per injected failure of this repeat (empty when the run injected none). tables: the
    repeat's tables as the report built them (messages, queue samples), not rebuilt here."""
    path = fd.dir / "failures.json"
    inj_path = fd.raw / "injections.jsonl"
    if not path.exists() or not inj_path.exists():
        return []
    doc = read_json(path)
    inj = read_jsonl(inj_path)
    t_end = read_json(fd.raw / "run_clock.json").get("t_end_ns") or max(r["t_ns"] for r in inj)
    ctrl_path = fd.dir / "controller" / "failures.jsonl"
    ctrl = [r for r in read_jsonl(ctrl_path) if fd.t0_ns - 1e9 <= r["t_ns"] <= t_end] if ctrl_path.exists() else []
    qps = fd.counters.get("qps", [])
    flows = [(q["home"][0], q["home"][1], q["sport"]) for q in qps]
    msgs, qs = tables["messages"], tables["queue_samples"]
    D = fd.dilation
    onsets = _onsets(doc, inj)
    ends = [r["t_ns"] for r in inj if r["action"] in ("up", "clear", "restore")]
    out = []
    for rec, step, new in onsets:
        t_fail = rec["t_ns"]
        t_next = min([t for t in ends if t > t_fail] + [t_end])
        hit = [q for q, x in zip(qps, crossing(fd.fabric, flows, new)) if x]
        detect = next(
            (r for r in ctrl if r["event"] == "state" and r["t_ns"] >= t_fail and set(new) <= set(r["down_links"])),
            None,
        )
        installs = [
            r
            for r in ctrl
            if r["event"] == "install"
            and detect
            and r["t_ns"] >= detect["t_ns"]
            and r["down_links"] == detect["down_links"]
        ]
        done = [
            r
            for r in ctrl
            if r["event"] == "installed"
            and installs
            and installs[0]["t_ns"] <= r["t_ns"] <= t_next
            and r["switch"] in {x["switch"] for x in installs}
        ]
        migrations = [t for q in hit for t in q.get("migrations_ns", []) if t >= t_fail]
        t_detect = detect["t_ns"] if detect else None
        if migrations and (t_detect is None or min(migrations) < t_detect):
            t_detect, via = min(migrations), "host: path migration"
        else:
            via = detect["via"] if detect else None
        t_fixed = max(r["t_ns"] for r in done) if done else t_next  # the fabric stops black-holing
        resumed, unrecovered, unhurt = [], 0, 0
        for q in hit:
            verdict, t = qp_outcome(q, t_fail, t_fixed, t_next)
            if verdict == "recovered":
                resumed.append(t)
            elif verdict == "unrecovered":
                unrecovered += 1
            else:
                unhurt += 1
        t_rec = max(resumed) if resumed and not unrecovered else None
        row = {
            "repeat": fd.repeat,
            "event": step["event"],
            "action": step["action"],
            "target": step["target"],
            "cables": [fd.fabric.ports[fd.fabric.links[c].a].name for c in new],
            "recovery_mode": doc["recovery"],
            "t_fail_s": (t_fail - fd.t0_ns) / 1e9,
            "qps_hit": len(hit),
            "qps_recovered": len(resumed),
            "qps_unrecovered": unrecovered,
            "qps_unhurt": unhurt,
            "detection_s": None if t_detect is None else (t_detect - t_fail) / 1e9,
            "detected_via": via,
            "installed_s": (max(r["t_ns"] for r in done) - t_fail) / 1e9 if done else None,
            "recovery_s": None if t_rec is None else (t_rec - t_fail) / 1e9,
            "retransmits_hit": int(sum(q["requester"]["retransmits"] for q in hit)),
            "timeouts_hit": int(sum(q["requester"]["timeouts"] for q in hit)),
            "migrations": len(migrations),
            "switches_changed": len(installs),
            "entries_changed": sum(r["added"] + r["deleted"] for r in installs),
        }
        for k in ("detection_s", "installed_s", "recovery_s"):
            row[k.replace("_s", "_real_s")] = None if row[k] is None else row[k] / D
        if not msgs.empty:
            t_post, t_done = msgs["t_post_ns"], msgs["t_complete_ns"]
            t_ok = t_rec if t_rec is not None else t_next
            hit_ids = {q["qp"] for q in hit}
            phase = np.where(t_done < t_fail, "before", np.where(t_post > t_ok, "after", "during"))
            row["messages_hit"] = int(((phase == "during") & msgs["qp"].isin(hit_ids)).sum())
            row["integrity_ok"] = bool(msgs["integrity_ok"].all())
            for ph in ("before", "during", "after"):
                c = msgs.loc[phase == ph, "completion_real_s"]
                row[f"kv_p50_{ph}_real_s"] = float(c.quantile(0.5)) if len(c) else None
                row[f"kv_p99_{ph}_real_s"] = float(c.quantile(0.99)) if len(c) else None
                row[f"messages_{ph}"] = int(len(c))
        ports = _detour_ports(fd, doc, step["state"])
        row["detour_ports"] = ports
        if not qs.empty and ports:
            a, b = (t_fail - fd.t0_ns) / 1e9, (t_next - fd.t0_ns) / 1e9
            on = qs["port"].isin(ports)
            w = qs[(qs["t_s"] >= a) & (qs["t_s"] <= b) & on]
            pre = qs[(qs["t_s"] >= a - (b - a)) & (qs["t_s"] < a) & on]  # the same ports, as long before
            row["detour_peak_backlog_bytes"] = int(w["backlog_bytes"].max()) if len(w) else 0
            row["detour_peak_queue_delay_real_s"] = float(w["queue_delay_real_s"].max()) if len(w) else 0.0
            row["detour_peak_before_real_s"] = float(pre["queue_delay_real_s"].max()) if len(pre) else 0.0
        out.append(row)
    return out


def timeline(fd, rows: list[dict], tables: dict) -> dict:
    """What the timeline plot draws: message completions over time, the events and the queues
    of the detour ports (emulated seconds since the replay's start)."""
    doc = read_json(fd.dir / "failures.json")
    inj = read_jsonl(fd.raw / "injections.jsonl")
    marks = [
        ((r["t_ns"] - fd.t0_ns) / 1e9, r["action"], r.get("target", ""))
        for r in inj
        if r["action"] in ("down", "up", "gray", "clear")
    ]
    for r in rows:  # per failure: when the controller saw it, and when the last switch confirmed its new entries
        t_fail = r["t_fail_s"]
        if r["detection_s"] is not None:
            marks.append((t_fail + r["detection_s"], "detected", r["detected_via"] or ""))
        if r["installed_s"] is not None:
            marks.append((t_fail + r["installed_s"], "installed", ""))
    ports = sorted({p for r in rows for p in r.get("detour_ports", [])})
    qs = tables["queue_samples"]
    q = qs[qs["port"].isin(ports)].groupby("t_s")["backlog_bytes"].max() if ports and not qs.empty else pd.Series()
    return {"messages": tables["messages"], "marks": sorted(marks), "detour_backlog": q, "recovery": doc["recovery"]}


SUMMARY_KEYS = (
    "detection_s",
    "installed_s",
    "recovery_s",
    "entries_changed",
    "detection_real_s",
    "installed_real_s",
    "recovery_real_s",
    "qps_hit",
    "qps_unrecovered",
    "messages_hit",
    "retransmits_hit",
    "kv_p99_before_real_s",
    "kv_p99_during_real_s",
    "kv_p99_after_real_s",
    "detour_peak_queue_delay_real_s",
    "detour_peak_before_real_s",
)


def summary(rows: list[dict]) -> dict:
    """Per figure over every injected failure of every repeat: mean, min, max and count (a
    figure missing from a row — e.g. never recovered — is counted in `missing`)."""
    out = {}
    for k in SUMMARY_KEYS:
        v = [r[k] for r in rows if r.get(k) is not None]
        out[k] = {
            "mean": float(np.mean(v)) if v else None,
            "min": float(np.min(v)) if v else None,
            "max": float(np.max(v)) if v else None,
            "n": len(v),
            "missing": len(rows) - len(v),
        }
    return out
