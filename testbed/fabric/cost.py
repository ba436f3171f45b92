"""Inventory (switches, cables, transceivers) and cost of a fabric model.

Counts come from the built model, never from formulas, so the cost table checks the
generators too. Prices are not published: they are parameters with illustrative defaults.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass

from .kinds import build_fabric
from .model import Fabric
from .params import SpecError


@dataclass(frozen=True)
class Prices:
    """Illustrative list prices (USD), NOT published figures: override them for real quotes."""

    switch_usd_per_gbps: float = 2.0  # per Gb/s of switch port capacity (a 51.2T box ~ 100k)
    optic_usd_per_gbps: float = 2.0  # per Gb/s of transceiver (a 400G module ~ 800)
    fibre_cable_usd: float = 100.0  # per fibre run, any speed
    copper_cable_usd: float = 150.0  # per DAC cable, any speed


def inventory(fab: Fabric) -> dict:
    ports_used = Counter(fab.ports[p].node for l in fab.links for p in (l.a, l.b))
    switches = Counter()
    used_gbps = 0.0
    for sw in fab.switches:
        rate = max(fab.ports[p].rate_bps for p in fab.switch_port_ids[sw.id].values())
        switches[(sw.radix, rate / 1e9)] += 1
        used_gbps += ports_used[sw.id] * rate / 1e9
    cables = Counter((l.medium, l.rate_bps / 1e9) for l in fab.links)
    optics = Counter()
    for (medium, gbps), count in cables.items():
        if medium == "fibre":
            optics[gbps] += 2 * count  # one module at each end of a fibre run
    N = fab.n_gpus
    return {
        "gpus": N,
        "switches": sum(switches.values()),
        "switch_models": [
            {"radix": r, "port_gbps": g, "count": c, "asic_tbps": r * g / 1000}
            for (r, g), c in sorted(switches.items())
        ],
        "cables": sum(cables.values()),
        "cables_by_medium": {f"{m} {g:g}G": c for (m, g), c in sorted(cables.items())},
        "transceivers": sum(optics.values()),
        "transceivers_by_speed": {f"{g:g}G": c for g, c in sorted(optics.items())},
        "switch_tbps_per_gpu": used_gbps / 1000 / N,
        "cable_gbps_per_gpu": sum(g * c for (m, g), c in cables.items()) / N,
        "optics_tbps_per_gpu": sum(g * c for g, c in optics.items()) / 1000 / N,
    }


def price(inv: dict, prices: Prices) -> dict:
    switch = sum(m["count"] * m["radix"] * m["port_gbps"] for m in inv["switch_models"]) * prices.switch_usd_per_gbps
    optics = sum(int(g.rstrip("G")) * c for g, c in inv["transceivers_by_speed"].items()) * prices.optic_usd_per_gbps
    cables = sum(
        c * (prices.fibre_cable_usd if k.startswith("fibre") else prices.copper_cable_usd)
        for k, c in inv["cables_by_medium"].items()
    )
    total = switch + optics + cables
    return {
        "switch_usd": switch,
        "optics_usd": optics,
        "cables_usd": cables,
        "total_usd": total,
        "total_usd_per_gpu": total / inv["gpus"],
    }


def comparison_specs(gpus: int, gpus_per_server: int = 8, gpu_gbps: float = 400.0) -> dict[str, str]:
    """The fabrics compared at one size, all at equal per-GPU bandwidth on one switch ASIC.

    ZCube(n,2) needs N = n*n and 2n ports of gpu_gbps/2 (n=32: 64x200G = 12.8T). The same ASIC
    as n ports of gpu_gbps gives the three-tier ROFT (32x400G at 1,024 GPUs); the two-tier ROFT
    needs the smallest power-of-two radix R with R*R/2 >= N.
    """
    n = math.isqrt(gpus)
    if n * n != gpus:
        raise SpecError(f"cost: {gpus} GPUs is not a square; ZCube(n,2) has n*n GPUs (e.g. 1024, 4096, 16384)")
    if n % gpus_per_server:
        raise SpecError(f"cost: gpus_per_server={gpus_per_server} must divide n={n}")
    r2 = 1 << max(1, math.ceil(math.log2(math.sqrt(2 * gpus))))
    common = f"gpus_per_server={gpus_per_server},gpu_gbps={gpu_gbps:g}"
    return {
        "ZCube(n,2)": f"zcube:n={n},{common}",
        "ZCube, NIC->A copper": f"zcube:n={n},{common},copper=nic-a",
        "ROFT 2-tier": f"roft:gpus={gpus},{common},radix={r2},tiers=2",
        "ROFT 3-tier": f"roft:gpus={gpus},{common},radix={n},tiers=3",
    }


def compare(gpus_list: list[int], prices: Prices = Prices(), gpus_per_server: int = 8) -> list[dict]:
    rows = []
    for gpus in gpus_list:
        specs = comparison_specs(gpus, gpus_per_server)
        base = {}
        for label, spec in specs.items():
            fab = build_fabric(spec)
            inv = inventory(fab)
            row = {"gpus": gpus, "fabric": label, "spec": fab.spec, **inv, **price(inv, prices)}
            base[label] = row
            rows.append(row)
        z = base["ZCube(n,2)"]
        for row in rows[-len(specs) :]:
            for key in ("switch_tbps_per_gpu", "optics_tbps_per_gpu", "total_usd"):
                row[f"zcube_vs_this_{key}_pct"] = 100.0 * (z[key] / row[key] - 1.0)
    return rows


def format_table(rows: list[dict], prices: Prices) -> str:
    head = (
        f"{'GPUs':>6}  {'fabric':<22} {'switches':>8}  {'switch model':<22} {'cables':>7} {'optics':>7}"
        f"  {'sw Tb/s/GPU':>11} {'optic Tb/s/GPU':>14} {'ZCube Δsw':>9} {'ZCube Δoptics':>13}"
        f" {'cost $/GPU':>10} {'ZCube Δcost':>11}"
    )
    lines = [head, "-" * len(head)]

    def pct(r, key):
        return f"{r[key]:>+8.1f}%" if r["fabric"].startswith("ROFT") else f"{'—':>9}"

    for r in rows:
        models = "+".join(f"{m['count']}x{m['radix']}x{m['port_gbps']:g}G" for m in r["switch_models"])
        lines.append(
            f"{r['gpus']:>6}  {r['fabric']:<22} {r['switches']:>8}  {models:<22} {r['cables']:>7} {r['transceivers']:>7}"
            f"  {r['switch_tbps_per_gpu']:>11.2f} {r['optics_tbps_per_gpu']:>14.2f}"
            f" {pct(r, 'zcube_vs_this_switch_tbps_per_gpu_pct')} {pct(r, 'zcube_vs_this_optics_tbps_per_gpu_pct'):>13}"
            f" {r['total_usd_per_gpu']:>10.0f} {pct(r, 'zcube_vs_this_total_usd_pct'):>11}"
        )
    lines.append("")
    lines.extend(published_check(rows))
    lines.append(
        "Δ columns: ZCube(n,2) relative to the row's fabric. Prices are illustrative parameters, "
        "not published: " + ", ".join(f"{k}={v:g}" for k, v in asdict(prices).items())
    )
    return "\n".join(lines)


# Published figures (../shared/design/zcube-spec.md §3) that the table must reproduce.
PUBLISHED = {
    "switch capacity ZCube vs ROFT 2-tier": -33.3,
    "switch capacity ZCube vs ROFT 3-tier": -60.0,
    "inventory 1024": {"ROFT 3-tier": (160, 32, 400), "ZCube(n,2)": (64, 64, 200)},
    "inventory 16384": {"ROFT 3-tier": (640, 128, 400), "ZCube(n,2)": (256, 256, 200)},
}


def published_check(rows: list[dict]) -> list[str]:
    out = ["Published reference (spec §3) vs this model:"]
    for tier in ("2-tier", "3-tier"):
        got = sorted(
            {round(r["zcube_vs_this_switch_tbps_per_gpu_pct"], 1) for r in rows if r["fabric"] == f"ROFT {tier}"}
        )
        want = PUBLISHED[f"switch capacity ZCube vs ROFT {tier}"]
        out.append(
            f"  ZCube switch capacity vs ROFT {tier}: published {want:+.0f} %, model {', '.join(f'{g:+.1f} %' for g in got)}"
        )
    for gpus in (1024, 16384):
        want = PUBLISHED.get(f"inventory {gpus}")
        if not any(r["gpus"] == gpus for r in rows):
            continue
        parts = []
        for label, (count, radix, gbps) in want.items():
            r = next(r for r in rows if r["gpus"] == gpus and r["fabric"] == label)
            m = r["switch_models"][0]
            parts.append(
                f"{label} published {count} x {radix}x{gbps}G, model {r['switches']} x {m['radix']}x{m['port_gbps']:g}G"
            )
        out.append(f"  {gpus} GPUs: " + "; ".join(parts))
    return out
