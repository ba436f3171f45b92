"""Emulation vs ns-3, figure by figure, and the verdict against the agreement bands.

Same scale (emulated units): per-link bytes, KV completion p50/p99 per fabric (per request: the
last of its messages, counted from the planned release, as the report's on-time figure), the
ratio of KV p99 between the experiment's two fabrics (its own pair, in its order, as
metrics.comparison does), per-port max and p99 queue, switch-queue drops.

Verdicts: "verdict" is ns-3 as it ran, printed first and never corrected; with the emulation's
link model in ns-3 (scenario link model "bucket", the default at the same scale) it is the verdict.
With ns-3's serialising links at the same scale, "verdict_link_model" judges each percentile
against the interval [ns-3 less the link-model term, ns-3] widened by the band: the term is neither
a bound nor exact, so the emulation is asked to fall between the two link models, not onto the
corrected one (with the bucket there is no term and both verdicts are the same). Both fail when
ns-3 left messages incomplete (named in "incomplete") or the routing oracle failed.
Real scale (real units): the emulation converted (times / dilation, bytes / size scale) against
ns-3 at real rates and sizes: which figures survive the scaling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..measure.stats import ci95 as mean_ci
from ..measure.tables import ACK_FRAME_BYTES, FRAME_OVERHEAD_BYTES, RETH_BYTES, FabricData
from .simulate import Result

BANDS = {"link_bytes": 0.02, "kv_p50": 0.15, "kv_p99": 0.15, "kv_p99_ratio": 0.20}


@dataclass
class Pair:
    """One fabric's repeat on both sides, in the scenario's units."""

    label: str
    repeat: int
    scale: str
    emu_kv_s: pd.Series  # per request
    ns3_kv_s: pd.Series
    emu_msg_s: pd.Series  # per message, completion from the planned release
    ns3_msg_s: pd.Series
    ns3_kv_adj_s: pd.Series  # less the link-model term (shaper_term): what an idle shaper passes at once
    ns3_msg_adj_s: pd.Series
    links: pd.DataFrame  # port, emu_bytes, ns3_bytes, error, error_beyond_frame
    queues: pd.DataFrame  # port, emu_max/p99, ns3_max/p99 (bytes), and real-equivalent delay
    drops_emu: int | None  # frames the emulation's switch egress queues dropped (None: not sampled)
    drops_ns3: int  # frames ns-3's switch egress queues dropped (host NICs apart, as in the emulation)
    ns3_wall_s: float
    ns3_end_s: float
    frame_bytes: float  # one full frame in the scenario's bytes
    emu_valid: bool | None  # the emulation's own fidelity verdict on this repeat (metrics.json)
    subset: bool  # only some requests replayed: link totals are not comparable
    xoff: dict  # the share of port-samples whose backlog stands for >= the XOFF in real bytes, both sides
    notes: list
    missing: list  # messages ns-3 did not complete: {"msg", "req", "src_port", "dst_port"}
    msg_offset_frames: pd.Series  # per message matched by (req, shard, ports): emulation less ns-3, in frames


def pair(fd: FabricData, res: Result, xoff_real_bytes: float, emu_valid: bool | None = None) -> Pair:
    sc = res.scenario
    real = sc.scale == "real"
    t_per_emu = 1.0 / fd.dilation if real else 1.0
    b_per_emu = 1.0 / fd.size_scale if real else 1.0
    ns = res.messages
    em = fd.messages()
    # the replayed requests only, by request id (scenario.build kept the first N ids); completion
    # counted from the planned release (the agent's release lateness already taken out of
    # completion_s, as in the report's on-time figure)
    em = em[em["req"].isin(set(ns["req"]))].sort_values(["t_due_ns", "msg_id"]).reset_index(drop=True)
    missing = [
        {"msg": int(m.msg), "req": int(m.req), "src_port": m.src_port, "dst_port": m.dst_port}
        for m in ns[ns["t_complete_ns"].isna()].itertuples()
    ]
    emu_msg = em["completion_s"] * t_per_emu
    ns_msg = (ns["t_complete_ns"] - ns["t_due_ns"]) / 1e9
    emu_done = em.groupby("req")["completion_s"]
    emu_kv = emu_done.max() * t_per_emu
    emu_kv = emu_kv[emu_done.size() >= ns.groupby("req").size().reindex(emu_kv.index)]  # requests complete in both
    short = {m["req"] for m in missing}  # a request with an incomplete message has no completion time
    ns_kv = ns.assign(c=ns_msg).groupby("req")["c"].max().drop(index=list(short))
    rate = fd.port_rate_bps(ns["src_port"]) / (fd.rate_scale if real else 1.0)
    # the term corrects ns-3's serialising links toward the emulation's; with the emulation's own
    # link model (bucket) there is nothing to correct
    serialiser = sc.link_model == "serialiser"
    ns_msg_adj = ns_msg - shaper_term(ns, rate, sc.payload_per_packet) if serialiser and not real else ns_msg
    ns_kv_adj = ns.assign(c=ns_msg_adj).groupby("req")["c"].max().drop(index=list(short))
    lb = fd.link_bytes().set_index("port")
    ports = list(lb.index)
    nb = res.ports.set_index("port").reindex(ports)
    links = pd.DataFrame(
        {
            "port": ports,
            "emu_bytes": lb["measured_bytes"].to_numpy() * b_per_emu,
            "ns3_bytes": nb["tx_bytes"].fillna(0).to_numpy(dtype=float),
        }
    )
    diff = links["ns3_bytes"] - links["emu_bytes"]
    base = links["emu_bytes"].clip(lower=1)
    links["error"] = np.where(links["emu_bytes"] > 0, diff / base, np.nan)
    frame = fd.burst_bytes * b_per_emu
    links["error_beyond_frame"] = np.where(links["emu_bytes"] > 0, (diff.abs() - frame).clip(lower=0) / base, np.nan)
    queues, xoff = _queues(fd, res, ports, b_per_emu, real, xoff_real_bytes)
    drops_ns3 = int(res.ports.set_index("port").reindex(ports)["drops"].fillna(0).sum())
    # message by message (the same message on both sides, not the same rank): how far the emulation
    # is from ns-3's link model, in frames of the sender's line rate
    key = ["req", "shard", "src_port", "dst_port"]
    both = (
        em.assign(emu_s=emu_msg, src_port=em["src"], dst_port=em["dst"])[key + ["emu_s"]]
        .merge(ns.assign(ns3_s=ns_msg)[key + ["ns3_s"]], on=key)
        .dropna()
    )
    frame_s = frame * 8 / (fd.port_rate_bps(both["src_port"]) / (fd.rate_scale if real else 1.0))
    offsets = pd.Series((both["emu_s"] - both["ns3_s"]).to_numpy() / frame_s, dtype=float)
    return Pair(
        fd.label,
        fd.repeat,
        sc.scale,
        emu_kv,
        ns_kv,
        emu_msg,
        ns_msg,
        ns_kv_adj,
        ns_msg_adj,
        links,
        queues,
        switch_queue_drops(fd, ports),
        drops_ns3,
        res.wall_s,
        float(res.summary["end_ns"]) / 1e9,
        frame,
        emu_valid,
        len(res.messages) < fd.messages_posted,
        xoff,
        list(sc.notes),
        missing,
        offsets,
    )


def switch_queue_drops(fd: FabricData, ports: list[str]) -> int | None:
    """Frames the emulation's switch egress queues dropped during the replay (the collector's
    per-queue drop counters, as the run's metrics count them), not OVS's port counters, which do
    not see a qdisc's drops. None when the queues were not sampled."""
    qs = fd.queue_samples()
    if qs.empty:
        return None
    d = qs[qs["port"].isin(ports)].groupby("port")["drops_total"]
    return int((d.max() - d.min()).sum())


def shaper_term(ns: pd.DataFrame, rate_bps, payload_per_packet: int) -> np.ndarray:
    """Seconds a message's completion takes longer over serialising store-and-forward links (ns-3)
    than over the emulation's links, hand-derived: an htb shaper whose bucket holds one frame passes
    a frame that finds it idle at once (a veth has no serialisation), so on an otherwise idle path
    the emulation skips the last frame's serialisation at the sender, the first frame's at each of
    the `hops` switches, and the ACK's on each of the hops + 1 links back. Under load both sides
    serialise, so this is the most the link models can differ by, per message."""
    size = ns["size_bytes"].to_numpy(dtype=float)
    n = np.maximum(1, np.ceil(size / payload_per_packet))
    first = np.minimum(size, payload_per_packet) + FRAME_OVERHEAD_BYTES + RETH_BYTES
    last = size - (n - 1) * payload_per_packet + FRAME_OVERHEAD_BYTES + np.where(n == 1, RETH_BYTES, 0)
    hops = ns["hops"].to_numpy(dtype=float)
    return (last + hops * first + (hops + 1) * ACK_FRAME_BYTES) * 8 / np.asarray(rate_bps, dtype=float)


def _queues(
    fd: FabricData, res: Result, ports: list[str], b_per_emu: float, real: bool, xoff_real_bytes: float
) -> tuple[pd.DataFrame, dict]:
    qs = fd.queue_samples()
    end_s = (res.messages["t_complete_ns"].max() / 1e9) / (1.0 / fd.dilation if real else 1.0)
    if not qs.empty:
        qs = qs[(qs["t_s"] >= 0) & (qs["t_s"] <= end_s) & qs["port"].isin(ports)]
    # the XOFF in the scenario's bytes (emulated at same scale, real at real scale)
    thr = xoff_real_bytes if real else xoff_real_bytes * fd.size_scale
    n_ns = float(res.summary["queue_samples"]) * len(ports)
    ns_s = res.samples[res.samples["port"].isin(ports)]
    xoff = {
        "xoff_real_bytes": xoff_real_bytes,
        "emu_fraction": float((qs["backlog_bytes"] * b_per_emu >= thr).mean()) if not qs.empty else 0.0,
        "ns3_fraction": float((ns_s["backlog_bytes"] >= thr).sum() / n_ns) if n_ns else 0.0,
    }
    emu = (
        qs.groupby("port")["backlog_bytes"].agg(emu_max="max", emu_p99=lambda v: float(np.quantile(v, 0.99)))
        if not qs.empty
        else pd.DataFrame(columns=["emu_max", "emu_p99"])
    )
    ns = (
        res.queue_stats(ports)
        .set_index("port")
        .rename(columns={"max_backlog_bytes": "ns3_max", "p99_backlog_bytes": "ns3_p99"})
    )
    out = emu.reindex(ports).fillna(0.0) * b_per_emu
    out = out.join(ns).reset_index().rename(columns={"index": "port"})
    rate = fd.port_rate_bps(ports) / fd.rate_scale if real else fd.port_rate_bps(ports)
    for side in ("emu", "ns3"):  # the real-equivalent queueing delay of the max (independent of sigma)
        out[f"{side}_max_delay_real_s"] = out[f"{side}_max"] * 8 / rate / (1.0 if real else fd.dilation)
    return out, xoff


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf"))


def _quantiles(ps: list[Pair], q: float, emu: str, ns3: str) -> dict:
    """One quantile per repeat on each side: mean ± CI over repeats, and the gap of the means."""
    e = [float(getattr(p, emu).quantile(q)) for p in ps]
    n = [float(getattr(p, ns3).quantile(q)) for p in ps]
    return {"emu_s": mean_ci(e), "ns3_s": mean_ci(n), "gap": _rel(np.mean(n), np.mean(e))}


def _interval_gap(emu: float, lo: float, hi: float) -> float:
    """How far emu lies outside [lo, hi], relative to emu (0 inside): the two link models bracket it."""
    lo, hi = min(lo, hi), max(lo, hi)
    if lo <= emu <= hi:
        return 0.0
    return _rel(lo if emu < lo else hi, emu)


def summarise(
    pairs: list[Pair], excluded: list[dict] | None = None, labels: list[str] | None = None, routing: dict | None = None
) -> dict:
    """Per fabric: means over repeats with 95 % CIs on both sides and their relative gaps; the p99
    ratio of the first two fabrics (labels: the experiment's order); link and queue agreement; the
    verdicts. excluded: repeats left out (INVALID emulation), named in the summary."""
    out: dict = {"fabrics": {}, "bands": BANDS, "excluded": list(excluded or []), "routing": dict(routing or {})}
    present = list(dict.fromkeys(p.label for p in pairs))
    labels = [lab for lab in (labels or present) if lab in present]
    for label in labels:
        ps = [p for p in pairs if p.label == label]
        f: dict = {"repeats": len(ps)}
        for q, pct in ((0.5, "p50"), (0.99, "p99")):
            f[f"kv_{pct}"] = _quantiles(ps, q, "emu_kv_s", "ns3_kv_s")
            f[f"kv_{pct}"]["per_repeat_gap"] = [
                _rel(b, a) for a, b in zip(f[f"kv_{pct}"]["emu_s"]["values"], f[f"kv_{pct}"]["ns3_s"]["values"])
            ]
            lm = _quantiles(ps, q, "emu_kv_s", "ns3_kv_adj_s")
            lm["interval_gap"] = _interval_gap(
                f[f"kv_{pct}"]["emu_s"]["mean"], lm["ns3_s"]["mean"], f[f"kv_{pct}"]["ns3_s"]["mean"]
            )
            f[f"kv_{pct}_link_model"] = lm
            f[f"msg_{pct}"] = _quantiles(ps, q, "emu_msg_s", "ns3_msg_s")
        f["emu_valid"] = [p.emu_valid for p in ps]
        links = pd.concat([p.links for p in ps if not p.subset] or [ps[0].links.iloc[0:0]])
        # ports that carried at least a frame: a few stray control frames (~70 B) are not replay traffic
        carried = links[links["emu_bytes"] > ps[0].frame_bytes]
        f["links"] = {
            "compared": int(len(carried)),
            "max_error": float(carried["error"].abs().max()) if len(carried) else None,
            "stray_emu_bytes": float(links.loc[links["emu_bytes"] <= ps[0].frame_bytes, "emu_bytes"].sum()),
            "max_error_beyond_frame": float(carried["error_beyond_frame"].max()) if len(carried) else None,
            "total_emu_bytes": float(links["emu_bytes"].sum()),
            "total_ns3_bytes": float(links["ns3_bytes"].sum()),
            "ns3_only_bytes": float(links.loc[links["emu_bytes"] == 0, "ns3_bytes"].sum()),
        }
        qs = pd.concat([p.queues for p in ps])
        busy = qs[(qs["emu_max"] > 0) | (qs["ns3_max"] > 0)]
        f["queues"] = {
            "ports_with_backlog": int(len(busy)),
            "emu_max_bytes": float(qs["emu_max"].max()),
            "ns3_max_bytes": float(qs["ns3_max"].max()),
            "emu_p99_bytes_max": float(qs["emu_p99"].max()),
            "ns3_p99_bytes_max": float(qs["ns3_p99"].max()),
            "emu_max_delay_real_s": float(qs["emu_max_delay_real_s"].max()),
            "ns3_max_delay_real_s": float(qs["ns3_max_delay_real_s"].max()),
            # symmetric (|a - b| / max(a, b)): a port one side never queued on counts as 100 %
            "max_gap_median": float(
                np.median([abs(n - e) / max(n, e) for e, n in zip(busy["emu_max"], busy["ns3_max"])])
            )
            if len(busy)
            else 0.0,
        }
        f["xoff"] = {
            "xoff_real_bytes": ps[0].xoff["xoff_real_bytes"],
            "emu_fraction": float(np.mean([p.xoff["emu_fraction"] for p in ps])),
            "ns3_fraction": float(np.mean([p.xoff["ns3_fraction"] for p in ps])),
        }
        emu_drops = [p.drops_emu for p in ps]
        f["drops"] = {"emu": None if None in emu_drops else sum(emu_drops), "ns3": sum(p.drops_ns3 for p in ps)}
        f["incomplete"] = [{"repeat": p.repeat, **m} for p in ps for m in p.missing]
        off = pd.concat([p.msg_offset_frames for p in ps])
        f["msg_offset_frames"] = {
            "median": float(off.median()) if len(off) else None,
            "p5": float(off.quantile(0.05)) if len(off) else None,
            "p95": float(off.quantile(0.95)) if len(off) else None,
            "within_one_frame": float((off.abs() <= 1).mean()) if len(off) else None,
            "messages": int(len(off)),
        }
        f["ns3_wall_s"] = [p.ns3_wall_s for p in ps]
        f["ns3_simulated_s"] = [p.ns3_end_s for p in ps]
        out["fabrics"][label] = f
    if len(labels) >= 2:
        a, b = labels[0], labels[1]
        fa, fb = out["fabrics"][a], out["fabrics"][b]
        emu_ratio = fa["kv_p99"]["emu_s"]["mean"] / fb["kv_p99"]["emu_s"]["mean"]
        ns3_ratio = fa["kv_p99"]["ns3_s"]["mean"] / fb["kv_p99"]["ns3_s"]["mean"]
        out["kv_p99_ratio"] = {"a": a, "b": b, "emu": emu_ratio, "ns3": ns3_ratio, "gap": _rel(ns3_ratio, emu_ratio)}
        adj = fa["kv_p99_link_model"]["ns3_s"]["mean"] / fb["kv_p99_link_model"]["ns3_s"]["mean"]
        out["kv_p99_ratio_link_model"] = {
            "a": a,
            "b": b,
            "emu": emu_ratio,
            "ns3": adj,
            "gap": _rel(adj, emu_ratio),
            "interval_gap": _interval_gap(emu_ratio, adj, ns3_ratio),
        }
    out["verdict"] = _verdict(out)
    out["verdict_link_model"] = _verdict(out, "_link_model")
    return out


def _verdict(s: dict, suffix: str = "") -> dict:
    """The bands on ns-3 as it ran (suffix ""), or on the interval between ns-3 less the link-model
    term and ns-3 as it ran ("_link_model"). A fabric with messages ns-3 never completed, or with
    no valid repeat, cannot agree."""
    gap = "gap" if not suffix else "interval_gap"
    checks = {}
    for label, f in s["fabrics"].items():
        checks[f"{label} ns-3 complete"] = not f["incomplete"]
        if f["links"]["compared"]:
            checks[f"{label} link bytes"] = bool(f["links"]["max_error_beyond_frame"] <= BANDS["link_bytes"])
        checks[f"{label} KV p50"] = bool(f["kv_p50" + suffix][gap] <= BANDS["kv_p50"])
        checks[f"{label} KV p99"] = bool(f["kv_p99" + suffix][gap] <= BANDS["kv_p99"])
    if "kv_p99_ratio" + suffix in s:
        r = s["kv_p99_ratio" + suffix]
        checks[f"{r['a']}/{r['b']} KV p99 ratio"] = bool(r[gap] <= BANDS["kv_p99_ratio"])
    for label, r in s.get("routing", {}).items():  # routes that are not the graph's make agreement moot
        checks[f"{label} routing oracle"] = bool(r["ok"])
    for e in s.get("excluded", []):
        if e["label"] not in s["fabrics"]:
            checks[f"{e['label']} has a valid repeat"] = False
    return {"checks": checks, "agree": bool(checks) and all(checks.values())}
