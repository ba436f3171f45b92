"""Pictures of small fabrics: Graphviz DOT text and a PNG drawn from the nodes' coordinates.

Why coordinates and not a layout engine: tiers are rows, so the picture shows what the
model means (GPUs at the bottom, A/B or leaves above, spines on top) and is deterministic.
"""

from __future__ import annotations

import textwrap

from .kinds import kind_of
from .model import Fabric
from .params import SpecError

MAX_DRAW_GPUS = 256
GPU_COLOUR = "#9ecae1"


def _colour(fab: Fabric, node) -> str:
    """GPUs one colour; a switch its group's, as its kind declares it."""
    return GPU_COLOUR if node.role == "gpu" else kind_of(fab).switch_group(node.group).colour


def _check_size(fab: Fabric) -> None:
    if fab.n_gpus > MAX_DRAW_GPUS:
        raise SpecError(f"drawing {fab.n_gpus} GPUs would be unreadable; drawings stop at {MAX_DRAW_GPUS} GPUs")


def to_dot(fab: Fabric) -> str:
    _check_size(fab)
    lines = [f'graph "{fab.spec}" {{', "  rankdir=BT; splines=false; node [style=filled, fontsize=10];"]
    for tier in sorted({n.tier for n in fab.nodes}):
        names = " ".join(f'"{n.name}"' for n in fab.nodes if n.tier == tier)
        lines.append(f"  {{ rank=same; {names} }}")
    for n in fab.nodes:
        shape = "box" if n.role == "switch" else "ellipse"
        lines.append(f'  "{n.name}" [shape={shape}, fillcolor="{_colour(fab, n)}"];')
    for l in fab.links:
        a, b = fab.ports[l.a], fab.ports[l.b]
        style = "dashed" if l.medium == "copper" else "solid"
        lines.append(
            f'  "{fab.nodes[a.node].name}" -- "{fab.nodes[b.node].name}" '
            f'[taillabel="{a.number}", headlabel="{b.number}", fontsize=7, style={style}];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _row(fab: Fabric, node) -> int:
    """Drawing row: the kind's hint (the tier unless the kind says otherwise)."""
    return kind_of(fab).draw_row(node)


def positions(fab: Fabric) -> dict[int, tuple[float, float]]:
    """x spread evenly per row, y = row."""
    pos = {}
    for r in sorted({_row(fab, n) for n in fab.nodes}):
        row = [n for n in fab.nodes if _row(fab, n) == r]
        width = max(len(row) - 1, 1)
        for i, n in enumerate(row):
            pos[n.id] = (i / width if len(row) > 1 else 0.5, float(r))
    return pos


def to_png(fab: Fabric, path: str) -> None:
    _check_size(fab)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = positions(fab)
    fig, ax = plt.subplots(figsize=(max(8, fab.n_gpus * 0.35), 4.5))
    for l in fab.links:
        na, nb = fab.ports[l.a].node, fab.ports[l.b].node
        (x1, y1), (x2, y2) = pos[na], pos[nb]
        colour = "#d62728" if l.kind == "nic" and _row(fab, fab.nodes[nb]) != 1 else "#555555"
        ax.plot([x1, x2], [y1, y2], color=colour, lw=0.6, alpha=0.7, ls="--" if l.medium == "copper" else "-")
    for n in fab.nodes:
        x, y = pos[n.id]
        ax.scatter(
            [x],
            [y],
            s=220 if n.role == "switch" else 90,
            c=_colour(fab, n),
            marker="s" if n.role == "switch" else "o",
            edgecolors="black",
            linewidths=0.5,
            zorder=3,
        )
        ax.annotate(
            n.name,
            (x, y),
            textcoords="offset points",
            xytext=(0, -12 if n.role == "gpu" else 9),
            ha="center",
            fontsize=6 if n.role == "gpu" else 7,
        )
    counts = fab.counts()
    spec = textwrap.fill(fab.spec.replace(",", ", "), 80)
    ax.set_title(f"{spec}\n{counts['gpus']} GPUs, {counts['switches']} switches, {counts['cables']} cables", fontsize=9)
    rows = sorted({_row(fab, n) for n in fab.nodes})
    kind = kind_of(fab)
    names = kind.row_labels
    ax.set_yticks(rows)
    ax.set_yticklabels([names[r] for r in rows])
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    if kind.draw_note:
        ax.text(0.0, -0.4, kind.draw_note, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
