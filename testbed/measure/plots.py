"""Plots of a run, one function per figure; every axis names its unit and says emulated or real.

Time series and heatmaps show repeat 0 (one draw); distributions pool every repeat."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .tables import FabricData


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    _plt().close(fig)
    return name


def queue_over_time(tables: dict[str, dict], out: Path) -> str:
    """Max queueing delay per switch tier over time (repeat 0), real-equivalent µs."""
    plt = _plt()
    labels = list(tables)
    fig, axes = plt.subplots(len(labels), 1, figsize=(10, 3 * len(labels)), squeeze=False, sharex=True)
    for ax, lab in zip(axes[:, 0], labels):
        qs = tables[lab]["queue_samples"]
        if not qs.empty:
            for tier, g in qs.groupby("tier"):
                s = g.groupby("t_s")["queue_delay_real_s"].max() * 1e6
                ax.plot(s.index, s.values, lw=0.8, label=tier)
            ax.legend(fontsize=7, loc="upper right")
        ax.set_title(f"{lab}: max egress queueing delay per switch tier (repeat 0)", fontsize=9)
        ax.set_ylabel("real-equivalent µs")
    axes[-1, 0].set_xlabel("emulated time (s)")
    return _save(fig, out, "queue_over_time.png")


def max_queue_heatmap(tables: dict[str, dict], out: Path) -> str:
    """Max queueing delay per switch (rows) and port (columns), repeat 0."""
    plt = _plt()
    labels = list(tables)
    fig, axes = plt.subplots(1, len(labels), figsize=(5 * len(labels), 4), squeeze=False)
    for ax, lab in zip(axes[0], labels):
        qs = tables[lab]["queue_samples"]
        if qs.empty:
            continue
        mx = qs.groupby("port")["queue_delay_real_s"].max() * 1e6
        sw = mx.index.str.rsplit("-p", n=1).str[0]
        num = mx.index.str.rsplit("-p", n=1).str[1].astype(int)
        grid = pd.DataFrame({"sw": sw, "num": num, "v": mx.values}).pivot(index="sw", columns="num", values="v")
        im = ax.imshow(grid.values, aspect="auto", cmap="viridis")
        ax.set_yticks(range(len(grid.index)), grid.index, fontsize=7)
        step = max(1, len(grid.columns) // 16)  # legible at 48-64 ports: label every step-th port
        ax.set_xticks(range(0, len(grid.columns), step), grid.columns[::step], fontsize=7)
        ax.set_xlabel("switch port number")
        ax.set_title(f"{lab}: max queueing delay (real-equivalent µs, repeat 0)", fontsize=9)
        fig.colorbar(im, ax=ax)
    return _save(fig, out, "max_queue_heatmap.png")


def completion_cdf(pooled: dict[str, pd.DataFrame], out: Path, column: str, name: str, title: str) -> str:
    """CDF over every repeat's requests."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for lab, req in pooled.items():
        v = np.sort(req[column].dropna().values * 1e3)
        if v.size:
            ax.step(
                v,
                np.arange(1, v.size + 1) / v.size,
                where="post",
                label=f"{lab} (n={v.size}, {req['repeat'].nunique()} repeats)",
            )
    ax.set_xlabel(f"{title}, real-cluster ms")
    ax.set_ylabel("CDF")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out, name)


def link_util_heatmap(tables: dict[str, dict], out: Path) -> str:
    """Offered utilisation of each loaded switch egress port over time (repeat 0)."""
    plt = _plt()
    labels = list(tables)
    fig, axes = plt.subplots(len(labels), 1, figsize=(10, 3.2 * len(labels)), squeeze=False)
    for ax, lab in zip(axes[:, 0], labels):
        lu = tables[lab]["link_util"]
        if lu.empty:
            continue
        used = lu.groupby("port")["carried_util"].max()
        ports = used[used > 0].index
        grid = lu[lu["port"].isin(ports)].pivot(index="port", columns="t_s", values="offered_util")
        im = ax.imshow(
            grid.values,
            aspect="auto",
            cmap="magma",
            vmin=0,
            vmax=max(1.0, float(np.nanmax(grid.values))),
            extent=[grid.columns.min(), grid.columns.max(), len(grid.index), 0],
        )
        ax.set_yticks(np.arange(len(grid.index)) + 0.5, grid.index, fontsize=5)
        ax.set_title(f"{lab}: offered utilisation of each loaded switch egress port (repeat 0)", fontsize=9)
        ax.set_xlabel("emulated time (s)")
        fig.colorbar(im, ax=ax)
    return _save(fig, out, "link_util_heatmap.png")


def nic_kv_bytes(datas: dict[str, FabricData], tables: dict[str, dict], out: Path) -> str:
    """KV bytes sent per NIC port (repeat 0), real GB."""
    plt = _plt()
    labels = list(tables)
    fig, axes = plt.subplots(1, len(labels), figsize=(6 * len(labels), 3.5), squeeze=False)
    for ax, lab in zip(axes[0], labels):
        nb = tables[lab]["nic_bytes"]
        if nb.empty:
            continue
        nb = nb[nb["sent_bytes"] > 0]
        ax.bar(nb["port"], nb["sent_bytes"] / datas[lab].size_scale / 1e9)
        ax.set_ylabel("KV sent, real GB")
        ax.tick_params(axis="x", rotation=90, labelsize=6)
        ax.set_title(f"{lab}: KV bytes per NIC port", fontsize=9)
    return _save(fig, out, "nic_kv_bytes.png")


def link_bytes_scatter(pooled: dict[str, pd.DataFrame], out: Path) -> str:
    """Model vs emulation: every loaded switch egress port's replay bytes, predicted from the
    QPs' source ports through the model's tables against what its queue counted (all repeats)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    top = 1.0
    for lab, lb in pooled.items():
        d = lb[lb["predicted_bytes"] > 0]
        if d.empty:
            continue
        ax.scatter(
            d["predicted_bytes"] / 1e6,
            d["measured_bytes"] / 1e6,
            s=10,
            alpha=0.6,
            label=f"{lab} (max error beyond one frame {100 * d['error_beyond_frame'].max():.2f} %)",
        )
        top = max(top, float(d[["predicted_bytes", "measured_bytes"]].max().max()) / 1e6)
    ax.plot([0, top], [0, top], color="grey", lw=0.8, ls="--", label="measured = predicted")
    ax.set_xlabel("predicted by the model, MB (emulated)")
    ax.set_ylabel("counted by the switch queue, MB (emulated)")
    ax.set_title("Replay bytes per loaded switch egress port", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, out, "link_bytes_model_vs_measured.png")


def all_plots(datas: dict[str, list[FabricData]], tables: dict[str, list[dict]], out: Path) -> list[str]:
    """Every figure of the report, in report order; returns their file names."""
    out.mkdir(parents=True, exist_ok=True)
    first = {lab: reps[0] for lab, reps in tables.items()}

    def pool(name):
        out = {}
        for lab, reps in tables.items():
            parts = [t[name].assign(repeat=i) for i, t in enumerate(reps) if not t[name].empty]
            out[lab] = pd.concat(parts) if parts else pd.DataFrame(columns=list(reps[0][name].columns) + ["repeat"])
        return out

    requests = pool("requests")
    return [
        queue_over_time(first, out),
        max_queue_heatmap(first, out),
        completion_cdf(requests, out, "kv_transfer_real_s", "kv_completion_cdf.png", "KV-transfer completion time"),
        completion_cdf(requests, out, "ttft_real_s", "ttft_cdf.png", "TTFT"),
        link_util_heatmap(first, out),
        nic_kv_bytes({lab: d[0] for lab, d in datas.items()}, first, out),
        link_bytes_scatter(pool("link_bytes"), out),
    ]


def failure_timeline(timelines: dict[str, dict], out: Path) -> str:
    """Per fabric (repeat 0): each message's completion time at its post time (real ms, log
    scale), the injected events and the controller's detections as vertical lines, and the
    deepest detour-port queue (emulated bytes) underneath."""
    plt = _plt()
    labels = list(timelines)
    fig, axes = plt.subplots(
        2 * len(labels),
        1,
        figsize=(10, 4.2 * len(labels)),
        squeeze=False,
        gridspec_kw={"height_ratios": [3, 1] * len(labels)},
    )
    colours = {
        "down": "red",
        "gray": "purple",
        "up": "green",
        "clear": "green",
        "detected": "orange",
        "installed": "teal",
    }
    for i, lab in enumerate(labels):
        tl = timelines[lab]
        ax, axq = axes[2 * i, 0], axes[2 * i + 1, 0]
        m = tl["messages"]
        if not m.empty:
            ax.scatter(
                m["t_post_s"],
                m["completion_real_s"] * 1e3,
                s=6,
                c=np.where(m["qp_migrations"] > 0, "C1", "C0") if "qp_migrations" in m else "C0",
            )
            ax.set_yscale("log")
        seen = set()
        for t, what, _note in tl["marks"]:
            for a in (ax, axq):
                a.axvline(
                    t,
                    color=colours.get(what, "black"),
                    lw=1,
                    ls="--",
                    label=what if a is ax and what not in seen else None,
                )
            seen.add(what)
        ax.legend(fontsize=7, loc="upper right")
        ax.set_title(
            f"{lab}: KV message completion vs post time, recovery '{tl['recovery']}' (repeat 0; "
            f"orange dots: QPs that migrated)",
            fontsize=9,
        )
        ax.set_ylabel("completion, real ms")
        q = tl["detour_backlog"]
        if len(q):
            axq.plot(q.index, q.values / 1e3, lw=0.8, color="C3")
        axq.set_ylabel("detour queue\nemulated KB")
        axq.set_xlabel("emulated time since the replay's start (s)")
        if not m.empty:  # the replay, not the teardown after it
            for a in (ax, axq):
                a.set_xlim(min(0.0, m["t_post_s"].min()) - 0.2, m["t_post_s"].max() + 1.0)
    return _save(fig, out, "failure_timeline.png")


def pause_timeline(pauses: dict[str, pd.DataFrame], out: Path) -> str:
    """Per fabric (repeat 0): every paused interval of every port a PAUSE held, one row per port
    (upstream switch egress ports and GPU NIC ports), over the simulated time in ms. Input per
    fabric: rows (port, t_start_ns, t_end_ns), from pfc.csv's PAUSE/RESUME pairs."""
    plt = _plt()
    labels = list(pauses)
    fig, axes = plt.subplots(len(labels), 1, figsize=(10, 3.2 * len(labels)), squeeze=False)
    for i, lab in enumerate(labels):
        ax, p = axes[i, 0], pauses[lab]
        names = sorted(p.port.unique()) if len(p) else []
        row = {n: k for k, n in enumerate(names)}
        for r in p.itertuples():
            ax.plot([r.t_start_ns / 1e6, r.t_end_ns / 1e6], [row[r.port]] * 2, lw=4, color="C3", solid_capstyle="butt")
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=6)
        ax.set_xlabel("simulated time (ms)")
        ax.set_title(f"{lab}: ports held by PFC PAUSE (repeat 0; {len(p)} paused intervals)", fontsize=9)
        if not names:
            ax.text(0.5, 0.5, "no port was paused", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, out, "pause_timeline.png")


def dcqcn_rates(rates: dict[str, pd.DataFrame], out: Path, most: int = 8) -> str:
    """Per fabric (repeat 0): the DCQCN sending rate of the QPs that were cut most often, as steps
    over simulated time. Input per fabric: rows (t_ns, qp, rate_bps) at every rate change."""
    plt = _plt()
    labels = list(rates)
    fig, axes = plt.subplots(len(labels), 1, figsize=(10, 3.2 * len(labels)), squeeze=False)
    for i, lab in enumerate(labels):
        ax, r = axes[i, 0], rates[lab]
        qps = r.qp.value_counts().index[:most].tolist() if len(r) else []
        for q in sorted(qps):
            g = r[r.qp == q].sort_values("t_ns", kind="stable")
            ax.step(g.t_ns / 1e6, g.rate_bps / 1e9, where="post", lw=0.8, label=f"QP {q}")
        ax.set_xlabel("simulated time (ms)")
        ax.set_ylabel("DCQCN rate (Gb/s)")
        ax.set_title(
            f"{lab}: DCQCN rate of the {len(qps)} QPs cut most often (repeat 0; {len(r)} rate changes in all)",
            fontsize=9,
        )
        if qps:
            ax.legend(fontsize=6, loc="upper right", ncol=2)
        else:
            ax.text(0.5, 0.5, "no QP changed its rate", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, out, "dcqcn_rates.png")


def port_queue_bytes(series: dict[str, pd.DataFrame], out: Path) -> str:
    """Per fabric (repeat 0): the backlog of the deepest switch egress queues, in real KB over
    simulated time. Input per fabric: one column per port, indexed by the sampling instants (ns),
    empty samples as 0 (congestion.port_queues)."""
    plt = _plt()
    labels = list(series)
    fig, axes = plt.subplots(len(labels), 1, figsize=(10, 3.2 * len(labels)), squeeze=False)
    for i, lab in enumerate(labels):
        ax, q = axes[i, 0], series[lab]
        for port in q.columns:
            ax.plot(q.index / 1e6, q[port] / 1e3, lw=0.8, label=port)
        ax.set_xlabel("simulated time (ms)")
        ax.set_ylabel("egress backlog (real KB)")
        ax.set_title(f"{lab}: the {len(q.columns)} deepest switch egress queues over time (repeat 0)", fontsize=9)
        if len(q.columns):
            ax.legend(fontsize=6, loc="upper right", ncol=2)
        else:
            ax.text(0.5, 0.5, "no queue was sampled with a backlog", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, out, "port_queue_bytes.png")
