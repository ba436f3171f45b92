"""The floor-plan drawing of a layout: racks seen from above, coloured by role, with each rack's
longest cable medium; a picture a cabling crew can check against the patch list."""

from __future__ import annotations

from collections import defaultdict

from .layout import MEDIA, Layout
from .model import Fabric

ROLE_COLOURS = {"server": "#d9e4f0", "row-network": "#f2c57c", "central-network": "#e07b5f"}


def draw(fab: Fabric, lay: Layout, path: str, title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    c = lay.constraints
    per_rack = defaultdict(int)
    for cb in lay.cables:
        for port in (fab.links[cb.link].a, fab.links[cb.link].b):
            per_rack[lay.node_place[fab.ports[port].node].rack] += 1
    width = lay.row_length_m
    depth = max(r.y_m for r in lay.racks) + c.row_pitch_m
    scale = min(1.0, 40.0 / max(width, depth))
    fig, ax = plt.subplots(figsize=(max(6.0, width * scale * 0.9 + 2), max(3.0, depth * scale * 0.6 + 1.5)))
    rack_depth = c.row_pitch_m * 0.5
    for r in lay.racks:
        ax.add_patch(
            Rectangle(
                (r.x_m, r.y_m),
                c.rack_width_m * 0.92,
                rack_depth,
                facecolor=ROLE_COLOURS[r.role],
                edgecolor="#444",
                linewidth=0.4,
            )
        )
    for t in (0.0, width / 2, width):  # cross trays
        ax.plot([t, t], [0, depth - c.row_pitch_m + rack_depth], color="#999", linestyle=":", linewidth=0.8)
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(depth, -0.5)
    ax.set_aspect("equal")
    ax.set_xlabel("m along the row")
    ax.set_ylabel("m across rows")
    counts = {m: sum(1 for cb in lay.cables if cb.medium == m) for m in MEDIA}
    ax.set_title(
        title or (f"{fab.spec}\n{len(lay.racks)} racks; cables " + ", ".join(f"{m} {n:,}" for m, n in counts.items())),
        fontsize=8,
    )
    ax.legend(
        handles=[Patch(facecolor=col, edgecolor="#444", label=role) for role, col in ROLE_COLOURS.items()]
        + [Patch(facecolor="none", edgecolor="#999", linestyle=":", label="cross tray")],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=7,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
