"""Tables -> the metrics of one fabric's replay, and the fidelity rules that can void them.

Why the rules live with the metrics: a figure from a run that was CPU-bound, lost samples or
corrupted data measures the machine, not the fabric; the verdict is computed from the same
records as the figure, and every rule is tested offline on records that must fail it.
"""

from __future__ import annotations

import numpy as np

from .tables import FabricData


def pct(values, q) -> float | None:
    v = np.asarray([x for x in values if x is not None and not np.isnan(x)], dtype=float)
    return float(np.percentile(v, q)) if v.size else None


def fabric_metrics(fd: FabricData, tables: dict, m: dict) -> dict:
    """m: the spec's measurement section (thresholds of the fidelity rules)."""
    req = tables["requests"]
    kv = req["kv_transfer_real_s"].dropna()
    tt = req["ttft_real_s"].dropna()
    qs = tables["queue_samples"]
    lu = tables["link_util"]
    pfc = tables["pfc_standin"]
    msgs = tables["messages"]
    ctr = fd.counters
    retrans = sum(q["requester"]["retransmits"] for q in ctr.get("qps", []))
    queue_max = int(qs["backlog_bytes"].max()) if not qs.empty else None
    busy = qs[qs.groupby("port")["sent_bytes_total"].transform("max") > 0] if not qs.empty else qs
    footer = fd.queue_footer or {}
    late_frac = footer.get("late", 0) / max(footer.get("samples", 0), 1) if footer else None
    cpu = fd.cpu_fractions()
    calib = fd.run.get("calibration")
    done_span = (req["kv_done_s"].max() - req["t_arrival_s"].min()) / fd.dilation if len(kv) else None
    out = {
        "fabric": fd.fabric.spec,
        "replay_status": fd.run.get("replay_status"),
        "messages_posted": fd.messages_posted, "messages_completed": int(len(msgs)),
        "integrity_ok": bool(msgs["integrity_ok"].all()) if not msgs.empty else None,
        "requests": int(len(req)), "requests_completed": int(len(kv)),
        "kv_transfer_real_s": {"n": int(len(kv)), "p50": pct(kv, 50), "p99": pct(kv, 99), "p999": pct(kv, 99.9)},
        "ttft_real_s": {"n": int(len(tt)), "p50": pct(tt, 50), "p99": pct(tt, 99), "p999": pct(tt, 99.9)},
        "queue_max_bytes": queue_max,
        "queue_p99_bytes": pct(busy["backlog_bytes"], 99) if not busy.empty else None,
        "queue_samples": int(len(qs)),
        "pfc_standin_events": int(pfc["events"].sum()) if not pfc.empty else 0,
        "pfc_standin_total_s": float(pfc["total_s"].sum()) if not pfc.empty else 0.0,
        "max_offered_link_util": float(lu["offered_util"].max()) if not lu.empty else None,
        "max_carried_link_util": float(lu["carried_util"].max()) if not lu.empty else None,
        "throughput_req_per_s_real": float(len(kv) / done_span) if done_span else None,
        "kv_gbps_real": float(req.loc[req["kv_done_s"].notna(), "kv_real_bytes"].sum() * 8 / done_span / 1e9)
        if done_span else None,
        "retransmits": int(retrans),
        "queue_drops": int(qs.groupby("port")["drops_total"].max().sum()) if not qs.empty else None,
        "cpu_fraction": cpu, "late_sample_fraction": late_frac, "calibration": calib,
    }
    out["fidelity"] = fidelity(out, m)
    return out


def fidelity(out: dict, m: dict) -> dict:
    """The run's verdict: valid, or the list of rules it broke (m: the spec's measurement)."""
    cpu, late_frac, calib = out["cpu_fraction"], out["late_sample_fraction"], out["calibration"]
    reasons = []
    if out["replay_status"] != "complete":
        reasons.append(f"replay {out['replay_status']}")
    for who in ("ovs", "agent"):
        if who in cpu and cpu[who]["max"] > m["max_cpu_fraction"]:
            reasons.append(f"CPU-bound: {who} at {100 * cpu[who]['max']:.0f} % of a core (limit "
                           f"{100 * m['max_cpu_fraction']:.0f} %)")
    if late_frac is None:
        reasons.append("no queue samples")
    elif late_frac > m["max_late_sample_fraction"]:
        reasons.append(f"{100 * late_frac:.1f} % of queue samples late")
    if calib and calib["ratio"] < m["min_calibration_ratio"]:
        reasons.append(f"calibration {100 * calib['ratio']:.0f} % of the configured rate")
    if out["integrity_ok"] is False:
        reasons.append("corrupted transfers")
    return {"valid": not reasons, "reasons": reasons}
