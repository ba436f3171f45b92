"""Tables -> metrics, plots and report.md for a run folder (`zlab report RUN` rebuilds them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..emulation.network import write_json
from .tables import FabricData

# spec §5, production figures (not comparable one-to-one with a 16-GPU emulation)
PUBLISHED = [
    ("GPU inference throughput", "> +15 %", "ZCube vs ROFT, ~1,000-GPU GLM-5.1 coding cluster"),
    ("TTFT P99", "-40.6 %", "same"),
    ("switch + optics capex", "-33 %", "same"),
    ("NIC cap 100G -> 200G", "throughput +19 %, TTFT -22 %", "32-GPU inference service"),
    ("queue depths, PFC counts, link loads, KV completion times", "not published", "what this testbed measures"),
]


def pct(values, q) -> float | None:
    v = np.asarray([x for x in values if x is not None and not np.isnan(x)], dtype=float)
    return float(np.percentile(v, q)) if v.size else None


def fabric_metrics(fd: FabricData, tables: dict, spec: dict) -> dict:
    m = spec["measurement"]
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
    out["fidelity"] = {"valid": not reasons, "reasons": reasons}
    return out


def _plots(datas: dict[str, FabricData], tables: dict[str, dict], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        made.append(name)

    labels = list(datas)
    n = len(labels)

    fig, axes = plt.subplots(n, 1, figsize=(10, 3 * n), squeeze=False, sharex=True)
    for ax, lab in zip(axes[:, 0], labels):
        qs = tables[lab]["queue_samples"]
        if not qs.empty:
            for tier, g in qs.groupby("tier"):
                s = g.groupby("t_s")["backlog_bytes"].max() / 1024
                ax.plot(s.index, s.values, lw=0.8, label=tier)
            ax.legend(fontsize=7, loc="upper right")
        ax.set_title(f"{lab}: max egress backlog per switch tier", fontsize=9)
        ax.set_ylabel("KiB")
    axes[-1, 0].set_xlabel("emulated time (s)")
    save(fig, "queue_over_time.png")

    fig, axes = plt.subplots(1, n, figsize=(5 * n, 4), squeeze=False)
    for ax, lab in zip(axes[0], labels):
        qs = tables[lab]["queue_samples"]
        if qs.empty:
            continue
        mx = qs.groupby("port")["backlog_bytes"].max()
        sw = mx.index.str.rsplit("-p", n=1).str[0]
        num = mx.index.str.rsplit("-p", n=1).str[1].astype(int)
        grid = pd.DataFrame({"sw": sw, "num": num, "v": mx.values / 1024}).pivot(index="sw", columns="num", values="v")
        im = ax.imshow(grid.values, aspect="auto", cmap="viridis")
        ax.set_yticks(range(len(grid.index)), grid.index, fontsize=7)
        ax.set_xticks(range(len(grid.columns)), grid.columns, fontsize=7)
        ax.set_xlabel("port")
        ax.set_title(f"{lab}: max egress queue (KiB)", fontsize=9)
        fig.colorbar(im, ax=ax)
    save(fig, "max_queue_heatmap.png")

    for col, name, title in (("kv_transfer_real_s", "kv_completion_cdf.png", "KV-transfer completion time"),
                             ("ttft_real_s", "ttft_cdf.png", "TTFT")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for lab in labels:
            v = np.sort(tables[lab]["requests"][col].dropna().values * 1e3)
            if v.size:
                ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=f"{lab} (n={v.size})")
        ax.set_xlabel(f"{title}, real-cluster ms")
        ax.set_ylabel("CDF")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, name)

    fig, axes = plt.subplots(n, 1, figsize=(10, 3.2 * n), squeeze=False)
    for ax, lab in zip(axes[:, 0], labels):
        lu = tables[lab]["link_util"]
        if lu.empty:
            continue
        used = lu.groupby("port")["carried_util"].max()
        ports = used[used > 0].index
        grid = lu[lu["port"].isin(ports)].pivot(index="port", columns="t_s", values="offered_util")
        im = ax.imshow(grid.values, aspect="auto", cmap="magma", vmin=0, vmax=max(1.0, float(np.nanmax(grid.values))),
                       extent=[grid.columns.min(), grid.columns.max(), len(grid.index), 0])
        ax.set_yticks(np.arange(len(grid.index)) + 0.5, grid.index, fontsize=5)
        ax.set_title(f"{lab}: offered utilisation of each loaded switch egress port", fontsize=9)
        ax.set_xlabel("emulated time (s)")
        fig.colorbar(im, ax=ax)
    save(fig, "link_util_heatmap.png")

    fig, axes = plt.subplots(1, n, figsize=(6 * n, 3.5), squeeze=False)
    for ax, lab in zip(axes[0], labels):
        nb = tables[lab]["nic_bytes"]
        if nb.empty:
            continue
        nb = nb[nb["sent_bytes"] > 0]
        ax.bar(nb["port"], nb["sent_bytes"] / 1e6 / datas[lab].plan["summary"]["scaling"]["size_scale"] / 1e3)
        ax.set_ylabel("KV sent, real GB")
        ax.tick_params(axis="x", rotation=90, labelsize=6)
        ax.set_title(f"{lab}: KV bytes per NIC port", fontsize=9)
    save(fig, "nic_kv_bytes.png")
    return made


def _ms(x):
    return "—" if x is None else f"{1e3 * x:.2f}"


def _fmt(x, f="{:.2f}"):
    return "—" if x is None else f.format(x)


def markdown(root: Path, run: dict, spec: dict, metrics: dict, plots: list[str], plan_summary: dict) -> str:
    labels = list(metrics)
    L = [f"# zlab run `{run['run_id']}`", "",
         f"Status: **{run.get('status')}**" + (" — INCOMPLETE: numbers cover only what was recorded"
                                               if run.get("status") != "complete" else ""), ""]
    L.append("Fidelity: " + "; ".join(
        f"{lab} **{'valid' if m['fidelity']['valid'] else 'INVALID'}**"
        + ("" if m["fidelity"]["valid"] else f" ({', '.join(m['fidelity']['reasons'])})") for lab, m in metrics.items()))
    L += ["", "| metric | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]

    def row(name, fn):
        L.append(f"| {name} | " + " | ".join(fn(metrics[lab]) for lab in labels) + " |")

    for key, title in (("kv_transfer_real_s", "KV-transfer completion"), ("ttft_real_s", "TTFT")):
        for q in ("p50", "p99", "p999"):
            row(f"{title} {q} (real ms)", lambda m, k=key, q=q: f"{_ms(m[k][q])} (n={m[k]['n']})")
    row("max egress queue (KiB)", lambda m: _fmt(m["queue_max_bytes"] and m["queue_max_bytes"] / 1024, "{:.1f}"))
    row("p99 egress queue, loaded ports (KiB)", lambda m: _fmt(m["queue_p99_bytes"] and m["queue_p99_bytes"] / 1024, "{:.1f}"))
    row("PFC stand-in: episodes above XOFF / total s", lambda m: f"{m['pfc_standin_events']} / {m['pfc_standin_total_s']:.2f}")
    row("max offered link utilisation", lambda m: _fmt(m["max_offered_link_util"]))
    row("max carried link utilisation", lambda m: _fmt(m["max_carried_link_util"]))
    row("throughput (requests/s, real)", lambda m: _fmt(m["throughput_req_per_s_real"], "{:.1f}"))
    row("KV throughput (Gb/s, real)", lambda m: _fmt(m["kv_gbps_real"], "{:.1f}"))
    row("messages completed / posted", lambda m: f"{m['messages_completed']} / {m['messages_posted']}")
    row("retransmits / queue drops", lambda m: f"{m['retransmits']} / {m['queue_drops']}")
    row("max CPU: ovs-vswitchd / agent", lambda m: " / ".join(
        f"{100 * m['cpu_fraction'][k]['max']:.0f} %" if k in m["cpu_fraction"] else "—" for k in ("ovs", "agent")))
    row("calibration (iperf3 / configured)", lambda m: f"{100 * m['calibration']['ratio']:.1f} %" if m["calibration"] else "—")
    s = plan_summary
    d, w, em = spec["deployment"], spec["workload"], spec["emulation"]
    L += ["", "## Setup", "",
          *[f"- `{lab}`: `{spec['fabrics'][lab]}`" for lab in labels],
          f"- workload: trace `{w['trace']}` requests {w['start_index']}…{w['start_index'] + w['requests'] - 1}, model "
          f"`{w['model']}` ({s['kv_bytes_per_token']:,} KV bytes/token), offered load {100 * s['offered_load']:.1f} % of the "
          f"prefill side's NIC capacity (the trace alone: {100 * s['natural_load']:.3f} %; load factor "
          f"{s['scaling']['load_factor']:.1f}), prefill utilisation {100 * s['prefill_utilisation']:.0f} %",
          f"- deployment: {d['prefill_instances']} P + {d['decode_instances']} D instances of TP {d['tp']}, mapping "
          f"`{d['mapping']}`, scheduler `{d['scheduler']}`, ZCube split `{d['split']}`, RoCE path MTU {d['path_mtu']}",
          f"- scaling: rate_scale {em['rate_scale']:g} (link rates), size_scale {w['size_scale']:g} (bytes), time dilation "
          f"{s['dilation']:g} (emulated s per real s). Times above are real-cluster units: emulated / {s['dilation']:g}.",
          f"- measurement: every switch egress queue sampled every {spec['measurement']['queue_sample_ms']} ms; PFC "
          f"stand-in threshold (XOFF) {spec['measurement']['xoff_bytes']} bytes — this kernel cannot emulate PFC pauses, "
          "so episodes of backlog above XOFF are counted instead; utilisation windows "
          f"{spec['measurement']['util_window_ms']} ms; offered utilisation = (sent + backlog growth + drops) / capacity.",
          "", "## Published reference numbers (spec §5)", "",
          "Production-scale figures, listed for orientation; a 16-GPU emulation does not reproduce them one to one.", "",
          "| what | value | context |", "|---|---|---|",
          *[f"| {a} | {b} | {c} |" for a, b, c in PUBLISHED], "", "## Plots", ""]
    L += [f"![{p}](plots/{p})" for p in plots]
    L += ["", "Raw records (`<fabric>/raw/*.jsonl`) and tables (`tables/*.parquet`) hold everything these numbers "
          "come from; `zlab report RUN` recomputes them.", ""]
    return "\n".join(L)


def build(root: Path) -> dict:
    root = Path(root)
    spec = yaml.safe_load((root / "spec.yaml").read_text())
    run = json.loads((root / "run.json").read_text())
    datas, tables, metrics = {}, {}, {}
    for label in spec["fabrics"]:
        fdir = root / label
        if not (fdir / "raw" / "plan.json").exists():
            continue
        fd = FabricData(fdir)
        datas[label] = fd
        tables[label] = fd.write_tables(root / "tables", spec["measurement"]["xoff_bytes"],
                                        spec["measurement"]["util_window_ms"] / 1e3)
        metrics[label] = fabric_metrics(fd, tables[label], spec)
    if not metrics:
        (root / "report.md").write_text(f"# zlab run `{run['run_id']}`\n\nNo fabric recorded any data "
                                        f"(status {run.get('status')}).\n")
        return {}
    plots = _plots(datas, tables, root / "plots")
    write_json(root / "metrics.json", metrics)
    first = next(iter(datas.values()))
    (root / "report.md").write_text(markdown(root, run, spec, metrics, plots, first.plan["summary"]))
    return metrics
