"""The capacity search's two figures: throughput vs offered load, and TTFT P99 vs load with the SLO line.

Why every evaluated point: the bisection visits different rates per repeat; plotting them all (one
colour per fabric and engine) shows both where the knee is and how much the repeats scatter.
"""

from __future__ import annotations

from pathlib import Path


def write(doc: dict, folder: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    groups: dict[str, list[dict]] = {}
    for run in doc["runs"]:
        groups.setdefault(f"{run['fabric']} ({run['engine']})", []).extend(run["points"])
    for fname, key, ylabel in (
        (
            "throughput_vs_load.png",
            "served_in_window_per_s_per_gpu",
            "served requests/s per GPU (done within the arrival window)",
        ),
        ("ttft_p99_vs_load.png", "ttft_p99", "TTFT P99 (s)"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, points in groups.items():
            pts = sorted(points, key=lambda p: p["rate_per_gpu"])
            y = [p["ttft_s"]["p99"] if key == "ttft_p99" else p.get(key) for p in pts]
            ax.plot([p["rate_per_gpu"] for p in pts], y, marker="o", ms=3, lw=1, label=name)
        if key != "ttft_p99":  # served cannot exceed offered: the line a fabric leaves at its knee
            top = max(p["rate_per_gpu"] for pts in groups.values() for p in pts)
            ax.plot([0, top], [0, top], color="grey", ls=":", lw=1, label="served = offered")
        if key == "ttft_p99":
            ax.axhline(doc["settings"]["slo_s"]["ttft"], color="red", ls="--", lw=1, label="TTFT SLO")
            ax.set_yscale("log")
        ax.set_xlabel("offered load (requests/s per GPU)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(folder / fname, dpi=110)
        plt.close(fig)
        names.append(fname)
    return names
