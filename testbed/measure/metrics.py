"""Tables -> the metrics of one fabric's replays, the fidelity rules that can void them, and
their summary over repeats (mean with a 95 % confidence interval).

Why the rules live with the metrics: a figure from a run that was CPU-bound, lost samples,
sent faster than its links allow or routed off the model measures the machine, not the
fabric. The verdict is computed from the same records as the figure, and every rule is tested
offline on records that must fail it. Units: *_real_* are real-cluster units (emulated /
dilation); queues are also given as real-equivalent queueing delay, which does not depend on
the size scale; *_emulated_* are what the emulator held.
"""

from __future__ import annotations

import numpy as np

from . import draws, emcongestion, lossexplain
from .rules import Unreadable, Verdict, number
from .stats import ci95
from .tables import FabricData

LOWER_IS_BETTER = (
    "kv_p50_real_s",
    "kv_p99_real_s",
    "ttft_p50_real_s",
    "ttft_p99_real_s",
    "queue_delay_max_real_s",
    "queue_delay_p99_real_s",
    "max_offered_util",
    "backlog_episodes",
)


def pct(values, q) -> float | None:
    v = np.asarray([x for x in values if x is not None and not np.isnan(x)], dtype=float)
    return float(np.percentile(v, q)) if v.size else None


ALLOWANCE_SHARE = 0.1  # the carried rule's two-frame allowance, at most this share of a window's capacity


def carried_rule_window_s(fd: FabricData, window_s: float, loaded) -> float:
    """The window the carried-utilisation rule reads: the report's window, widened until the two
    frames a one-frame bucket may send ahead of line rate are at most a tenth of the slowest loaded
    port's capacity in it. Why: the rule sees only what a link carried beyond that allowance, so in a
    window the allowance fills it is blind — at the 256-GPU planner's 0.17 Mb/s links two 9,000-byte
    frames are 0.85 s of link time, and a 100 ms window could not have caught a link carrying 8x its
    rate; at the default 2.5 Mb/s, 1.6x."""
    if not loaded:
        return window_s
    rate = float(fd.port_rate_bps(sorted(loaded)).min())
    return max(window_s, 2 * fd.burst_bytes * 8 / rate / ALLOWANCE_SHARE)


def repeat_metrics(fd: FabricData, tables: dict, m: dict) -> dict:
    """One repeat's figures. m: the spec's measurement section (thresholds of the rules)."""
    req, msgs, qs, lu = tables["requests"], tables["messages"], tables["queue_samples"], tables["link_util"]
    lb, ep = tables["link_bytes"], tables["backlog_episodes"]
    kv = req["kv_transfer_real_s"].dropna()
    tt = req["ttft_real_s"].dropna()
    loaded = set(lb.loc[lb["predicted_bytes"] > 0, "port"]) if not lb.empty else set()
    lq = qs[qs["port"].isin(loaded)] if not qs.empty else qs
    llu = lu[lu["port"].isin(loaded)] if not lu.empty else lu
    cw = carried_rule_window_s(fd, float(m["util_window_ms"]) / 1e3, loaded)
    if cw > float(m["util_window_ms"]) / 1e3:
        lcu = fd.link_util(cw)
        lcu = lcu[lcu["port"].isin(loaded)] if not lcu.empty else lcu
    else:
        lcu = llu
    footer = fd.queue_footer or {}
    late_frac = (footer.get("late", 0) / max(footer.get("samples", 0) + footer.get("late", 0), 1)) if footer else None
    done_span = (req["kv_done_s"].max() - req["t_arrival_s"].min()) / fd.dilation if len(kv) else None
    ports = fd.counters.get("ports", {})
    frame = fd.burst_bytes
    acct = _loss_accounting(fd, qs)
    if not lb.empty and acct["touched_ports"]:
        # a failure moves traffic between ports mid-replay: the model's healthy bytes hold only on the ports no
        # failure state changed; the rest are not compared (lossexplain.py)
        lb = lb[~lb["port"].isin(acct["touched_ports"])]
    ld = lb[lb["predicted_bytes"] > 0] if not lb.empty else lb
    stray = (
        lb[(lb["predicted_bytes"] == 0) & (lb["measured_bytes"] > 4 * frame + lb["control_allowance_bytes"])]
        if not lb.empty
        else lb
    )
    out = {
        "repeat": fd.repeat,
        "engine": fd.engine,
        "replay_status": fd.replay_status,
        "voided_attempts": fd.voided_attempts,
        "messages_posted": fd.messages_posted,
        "messages_completed": int(len(msgs)),
        "integrity_ok": bool(msgs["integrity_ok"].all()) if not msgs.empty else None,
        "requests": int(len(req)),
        "requests_completed": int(len(kv)),
        "kv_transfer_real_s": {"n": int(len(kv)), "p50": pct(kv, 50), "p99": pct(kv, 99), "p999": pct(kv, 99.9)},
        "ttft_real_s": {"n": int(len(tt)), "p50": pct(tt, 50), "p99": pct(tt, 99), "p999": pct(tt, 99.9)},
        "ttft_components_real_s": {
            c: {"p50": pct(req[f"{c}_real_s"], 50), "p99": pct(req[f"{c}_real_s"], 99)}
            for c in ("prefill_wait", "prefill", "kv_transfer", "first_decode_step")
        },
        "loaded_ports": len(loaded),
        "queue_max_emulated_bytes": int(qs["backlog_bytes"].max()) if not qs.empty else None,
        "queue_max_emulated_frames": float(qs["backlog_bytes"].max() / frame) if not qs.empty else None,
        "queue_delay_max_real_s": float(qs["queue_delay_real_s"].max()) if not qs.empty else None,
        "queue_delay_p99_real_s": pct(lq["queue_delay_real_s"], 99) if not lq.empty else None,
        "backlog_episodes": int(ep["events"].sum()) if not ep.empty else 0,
        "backlog_total_real_s": float(ep["total_real_s"].sum()) if not ep.empty else 0.0,
        "max_offered_util": float(llu["offered_util"].max()) if not llu.empty else None,
        # carried: bytes beyond the two frames a one-frame bucket can send ahead of line rate, over windows
        # long enough to see an overrun (carried_rule_window_s); the raw ratio is in the link_util table
        "max_carried_util": float(lcu["carried_beyond_frame"].max()) if not lcu.empty else None,
        "carried_util_window_s": cw,
        "throughput_req_per_s_real": float(len(kv) / done_span) if done_span else None,
        "kv_gbps_real": float(req.loc[req["kv_done_s"].notna(), "kv_real_bytes"].sum() * 8 / done_span / 1e9)
        if done_span
        else None,
        "retransmits": int(sum(q["requester"]["retransmits"] for q in fd.counters.get("qps", []))),
        "queue_drops": int(
            qs.groupby("port")["drops_total"].max().sum() - qs.groupby("port")["drops_total"].min().sum()
        )
        if not qs.empty
        else None,
        "below_floor_messages": int(msgs["below_floor"].sum()) if not msgs.empty else 0,
        "release_lateness_p99_s": pct(msgs["release_lateness_s"], 99) if not msgs.empty else None,
        "lateness_shift": _lateness_shift(req),
        "blocked_sends": int(sum(p.get("tx_blocked", 0) for p in ports.values())),
        "link_bytes_max_error": float(ld["error_beyond_frame"].max()) if not ld.empty else None,
        "link_bytes_stray_ports": sorted(stray["port"].tolist()) if not stray.empty else [],
        "drops": _drops(fd, qs),
        "drops_unreadable": fd.drops_unreadable,
        "drops_outside": acct["outside"],
        "drops_excused": acct["excused"],
        "loss_unexplained": acct["unexplained"],
        "link_bytes_skipped_ports": len(acct["touched_ports"]),
        "transport_loss_events": int(
            sum(
                q["requester"]["retransmits"] + q["requester"]["naks"] + q["requester"]["timeouts"]
                for q in fd.counters.get("qps", [])
            )
        ),
        "cpu_fraction": fd.cpu_fractions(),
        "late_sample_fraction": late_frac,
        "calibration": fd.run.get("calibration"),
        # this draw's ECMP choices put two concurrent QPs on one fabric link (the model's answer, draws.py)
        "ecmp_collision": draws.repeat_collides(fd),
        # injected failures drop frames at dead ports (excused and counted: drops_excused) and move traffic off the
        # healthy routes on purpose (those ports are left out of the link-bytes rule); every loss rule still applies
        "failures_injected": (fd.raw / "injections.jsonl").exists(),
        "pause_loop": emcongestion.pause_record(fd),  # lossless mode only (None otherwise)
    }
    out["fidelity"] = fidelity(out, m)
    return out


def _drops(fd: FabricData, qs) -> dict | None:
    """Frames dropped during the replay, per location: switch egress queues (the collector's
    samples), every counter losses.py snapshots, and the agent's sockets. None: not recorded."""
    if fd.drops is None:
        return None
    out = {
        "switch_queues": int(
            qs.groupby("port")["drops_total"].max().sum() - qs.groupby("port")["drops_total"].min().sum()
        )
        if not qs.empty
        else 0
    }
    for loc, items in fd.drops.items():
        out[loc] = int(sum(items.values()))
    out["agent_sockets"] = int(sum(p.get("socket_drops", 0) for p in fd.counters.get("ports", {}).values()))
    return out


def _queue_drops(qs) -> dict[str, int]:
    if qs.empty:
        return {}
    g = qs.groupby("port")["drops_total"]
    return {p: int(n) for p, n in (g.max() - g.min()).items() if n}


def _loss_accounting(fd: FabricData, qs) -> dict:
    """lossexplain.account, or an empty accounting when no drops were recorded (the drop rule voids)."""
    if fd.drops is None:
        return {"excused": {}, "outside": {}, "unexplained": [], "touched_ports": []}
    return lossexplain.account(fd, _queue_drops(qs))


def _lateness_shift(req) -> float | None:
    """How much the agent's late releases moved the headline KV figures: the larger relative
    change of KV p50 or p99 against the same requests recomputed with every message's release
    lateness taken out."""
    kv, on_time = req["kv_transfer_real_s"].dropna(), req["kv_transfer_on_time_real_s"].dropna()
    if kv.empty or on_time.empty:
        return None
    return max(abs(pct(kv, q) / pct(on_time, q) - 1) for q in (50, 99) if pct(on_time, q))


# the emulation's rules that judge the machine, not the network: for a repeat ns-3 simulated they have
# nothing to read and are reported as not applicable instead of passing or failing silently
NOT_APPLICABLE_TO_NS3 = (
    "CPU and hypervisor steal",
    "calibration",
    "queue sample periods missed",
    "serialisation floor",
    "carried utilisation",
    "agent release lateness",
    "blocked sends",
    "drops outside switch queues",
    "link bytes vs the model",
)


def replay_reason(status: str | None) -> str | None:
    """Why a repeat's replay voids it (None: it completed). No status at all means the run.json
    holds no record of the repeat's replay: the run was stopped (a signal) before it ended."""
    if status == "complete":
        return None
    if status is None:
        return "replay not recorded (the run was stopped before the repeat's replay ended)"
    return f"replay {status}"


def fidelity(out: dict, m: dict) -> dict:
    """The repeat's verdict: valid, or the list of rules it broke (m: the spec's measurement).
    Every rule fails closed (rules.py): one that cannot read its input voids the repeat."""
    if out.get("engine", "emulation") == "ns3":
        return _ns3_fidelity(out)
    v = Verdict()
    cpu = out["cpu_fraction"]
    if (reason := replay_reason(out["replay_status"])) is not None:
        v.void(reason)
    v.check("CPU", lambda: _cpu_rule(cpu, m))
    late_frac, calib = out["late_sample_fraction"], out["calibration"]
    if late_frac is None:
        v.void("no queue samples")
    elif late_frac > m["max_late_sample_fraction"]:
        v.void(f"{100 * late_frac:.1f} % of queue sample periods missed")
    if calib:  # missing: the rule cannot run, and the report prints "uncalibrated"
        v.check(
            "calibration",
            lambda: (
                [f"calibration {100 * calib['ratio']:.0f} % of the configured rate"]
                if number(calib.get("ratio"), "calibration ratio") < m["min_calibration_ratio"]
                else []
            ),
        )
    if out["integrity_ok"] is False:
        v.void("corrupted transfers")
    if out["below_floor_messages"]:
        v.void(f"{out['below_floor_messages']} messages faster than their serialisation floor (shaping not exact)")
    over = out["max_carried_util"]
    if over is not None and over > m["max_carried_util"]:
        v.void(
            f"carried utilisation {over:.3f} > {m['max_carried_util']} beyond the two frames a one-frame "
            "bucket can send ahead (a link carried more than its rate)"
        )
    shift, lat = out["lateness_shift"], out["release_lateness_p99_s"]
    if shift is not None and shift > m["max_lateness_shift"]:
        steal = cpu.get("steal", {}).get("max")
        v.void(
            f"agent released messages late (p99 {1e3 * lat:.1f} ms emulated), moving KV p50/p99 by "
            f"{100 * shift:.1f} % (limit {100 * m['max_lateness_shift']:.0f} %)"
            + (f"; hypervisor steal up to {100 * steal:.0f} % of the cores" if steal else "")
        )
    v.check("drop", lambda: _drop_rule(out))
    if out["blocked_sends"]:
        v.void(f"{out['blocked_sends']} agent sends blocked by a full host queue")
    err = out["link_bytes_max_error"]
    if err is not None and err > m["max_link_bytes_error"]:
        v.void(
            f"link bytes off the model by up to {100 * err:.1f} % beyond one frame (limit "
            f"{100 * m['max_link_bytes_error']:.0f} %): misrouting or uncounted traffic"
        )
    if out["link_bytes_stray_ports"]:
        v.void(f"replay bytes on ports the model does not route through: {out['link_bytes_stray_ports'][:4]}")
    if out.get("pause_loop") is not None:
        v.check("pause reaction", lambda: _pause_rule(out["pause_loop"]))
    return v.result()


def _pause_rule(p: dict) -> list[str]:
    """Lossless mode: the pause loop must shut a gate within the time real PFC's headroom buys
    (factor x link delay), in real-equivalent time, at the 99th percentile; a loop that missed
    sampling periods cannot say when it saw a crossing."""
    out = []
    if p["pauses"]:
        r99, budget = number(p["reaction_real_ns_p99"], "pause reaction p99"), p["headroom_real_ns"]
        if r99 > budget:
            out.append(
                f"pause reaction p99 {r99 / 1e3:.1f} us real-equivalent > the {budget / 1e3:.1f} us real PFC's headroom "
                "covers: lower emulation.rate_scale (more dilation) or raise congestion.pfc_headroom_factor"
            )
    if p["late_periods"] > 0.01 * max(1, p["samples"]):
        out.append(f"the pause loop missed {p['late_periods']} of {p['samples']} sampling periods (CPU)")
    return out


def _ns3_fidelity(out: dict) -> dict:
    """A repeat ns-3 simulated: it ran to completion, every message arrived whole, and its queues
    were sampled (fail closed: a repeat without samples is void). The emulation's machine rules
    are listed as not applicable."""
    v = Verdict()
    if out["replay_status"] != "complete":
        v.void(f"ns-3 replay {out['replay_status']}")
    if out["messages_completed"] != out["messages_posted"]:
        v.void(f"ns-3 completed {out['messages_completed']} of {out['messages_posted']} messages")
    if out["integrity_ok"] is False:
        v.void("messages received short (bytes lost)")
    if out["late_sample_fraction"] is None:
        v.void("no queue samples")
    res = v.result()
    res["not_applicable"] = [f"{name}: not applicable to ns3" for name in NOT_APPLICABLE_TO_NS3]
    return res


def _cpu_rule(cpu: dict, m: dict) -> list[str]:
    """CPU-bound daemons, machine or hypervisor; an unreadable sample voids (NaN passes any limit)."""
    reasons = []
    for who in ("ovs", "agent", "machine"):
        if who not in cpu:
            raise Unreadable(f"no CPU samples of {who}")
        if cpu[who].get("unreadable_samples"):
            raise Unreadable(f"{cpu[who]['unreadable_samples']} CPU samples of {who} unreadable (process gone?)")
    for who in ("ovs", "agent"):
        if number(cpu[who]["max"], f"CPU of {who}") > m["max_cpu_fraction"]:
            reasons.append(
                f"CPU-bound: {who} at {100 * cpu[who]['max']:.0f} % of a core (limit "
                f"{100 * m['max_cpu_fraction']:.0f} %)"
            )
    if number(cpu["machine"]["max"], "CPU of the machine") > m["max_machine_cpu_fraction"]:
        reasons.append(
            f"CPU-bound: the machine at {100 * cpu['machine']['max']:.0f} % of all cores (limit "
            f"{100 * m['max_machine_cpu_fraction']:.0f} %)"
        )
    steal = cpu.get("steal", {}).get("max")
    if steal is not None and number(steal, "hypervisor steal") > m["max_steal_fraction"]:
        reasons.append(
            f"CPU-bound: the hypervisor stole up to {100 * steal:.0f} % of the cores (limit "
            f"{100 * m['max_steal_fraction']:.0f} %): stalls stretch transfers, not only releases"
        )
    return reasons


def _drop_rule(out: dict) -> list[str]:
    """Frames dropped outside a switch egress queue (minus the failure's own, excused and counted),
    and loss no drop counter on the QP's own path explains."""
    if out["drops"] is None:
        raise Unreadable("no drop counters recorded (raw drops.json missing)")
    if out["drops_unreadable"]:
        raise Unreadable("drop counters unreadable: " + "; ".join(out["drops_unreadable"][:3]))
    reasons = []
    outside = {k: v for k, v in out["drops_outside"].items() if v}
    if outside:
        reasons.append(
            "frames dropped outside a switch egress queue: "
            + ", ".join(f"{v} at {k.replace('_', ' ')}" for k, v in sorted(outside.items()))
        )
    bad = out["loss_unexplained"]
    if bad:
        reasons.append(
            f"the transport saw loss on {len(bad)} QPs that no drop counter explains on their own path: "
            + "; ".join(bad[:3])
        )
    return reasons


def headline(r: dict) -> dict:
    """The per-repeat numbers that are summarised over repeats and compared between fabrics."""
    return {
        "kv_p50_real_s": r["kv_transfer_real_s"]["p50"],
        "kv_p99_real_s": r["kv_transfer_real_s"]["p99"],
        "ttft_p50_real_s": r["ttft_real_s"]["p50"],
        "ttft_p99_real_s": r["ttft_real_s"]["p99"],
        "queue_delay_max_real_s": r["queue_delay_max_real_s"],
        "queue_delay_p99_real_s": r["queue_delay_p99_real_s"],
        "max_offered_util": r["max_offered_util"],
        "max_carried_util": r["max_carried_util"],
        "backlog_episodes": r["backlog_episodes"],
        "retransmits": r["retransmits"],
    }


def fabric_summary(repeats: list[dict]) -> dict:
    """Over a fabric's repeats: mean and 95 % CI of each headline figure, and the verdict (a
    fabric is valid only if every repeat is)."""
    keys = headline(repeats[0]).keys()
    reasons = [f"repeat {r['repeat']}: {x}" for r in repeats for x in r["fidelity"]["reasons"]]
    return {
        "repeats": len(repeats),
        **{k: ci95([headline(r)[k] for r in repeats]) for k in keys},
        "fidelity": {"valid": not reasons, "reasons": reasons},
    }


def comparison(per_fabric: dict[str, list[dict]], a: str, b: str) -> dict:
    """a/b ratios per repeat (repeat k of each: independent draws), as mean +- CI, and in how
    many repeats a was better (lower) than b."""
    n = min(len(per_fabric[a]), len(per_fabric[b]))
    out = {"a": a, "b": b, "repeats": n}
    for k in LOWER_IS_BETTER:
        pairs = [(headline(per_fabric[a][i])[k], headline(per_fabric[b][i])[k]) for i in range(n)]
        pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
        ratios = [x / y for x, y in pairs if y > 0]
        out[k] = {"ratio": ci95(ratios), "a_better": sum(x < y for x, y in pairs), "n": len(pairs)}
    return out
