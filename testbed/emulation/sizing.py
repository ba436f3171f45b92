"""Will a fabric of this size fit this machine? Predicted from measured bring-ups, before any.

Why a record, not constants: what a fabric costs here (bring-up time, memory, ovs-vswitchd's idle
polling) was measured by `scripts/bench/emulation.py --costs`, one point per fabric size, into
size_costs.json next to this file, with the command, commit and machine of each point. A size is
predicted by interpolating between the two measured points nearest to it in links (each link is a
veth pair, two OVS or host interfaces), on a log-log scale (a power law between them), and
extrapolated beyond the largest with the slope of the last two. A fabric kind with two measured
points or more is predicted from its own; otherwise from every point. A measured size that did not
come up, and every larger one of its kind, is reported with the error it failed with; what it
measured before it failed (its build, its memory) still counts for those quantities.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

COSTS = Path(__file__).with_name("size_costs.json")
QUANTITIES = ("ready_s", "teardown_s", "peak_memory_bytes", "ovs_idle_cores")
TIGHT = 0.8  # of MemAvailable: above it, the page cache and the run's own processes have little left


@dataclass
class Prediction:
    spec: str
    gpus: int
    links: int
    values: dict = field(default_factory=dict)  # QUANTITIES -> predicted value
    basis: str = ""  # which measured points, interpolated or extrapolated
    history: str = ""  # this very size measured more than once: the range of its ready times
    verdict: str = "fits"  # fits | tight | does not fit | unknown
    reasons: list = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.verdict in ("fits", "tight")


def load(path: Path = COSTS) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _ok(p: dict) -> bool:
    z = p.get("zlab", {})
    return all(k in z for k in QUANTITIES)


def interpolate(points: list[tuple[float, float]], x: float) -> float:
    """y at x on the log-log polyline through points (x ascending, all > 0); beyond either end, the
    end segment's power law. One point: y scales in proportion to x."""
    pts = sorted(points)
    if len(pts) == 1:
        return pts[0][1] * x / pts[0][0]
    i = 1
    while i < len(pts) - 1 and x > pts[i][0]:
        i += 1
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    if y0 <= 0 or y1 <= 0:  # a power law needs positive values: linear between (and beyond) them
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    k = math.log(y1 / y0) / math.log(x1 / x0)
    return y0 * (x / x0) ** k


def predict(fabric, costs: dict | None, mem_available_bytes: int, cpu_headroom: float) -> Prediction:
    """The prediction for one fabric (a testbed.fabric Fabric) on a machine with mem_available_bytes
    free now; cpu_headroom: the share of a core ovs-vswitchd may use before a replay is not valid."""
    pr = Prediction(fabric.spec, fabric.n_gpus, len(fabric.links))
    if not costs or not costs.get("points"):
        pr.verdict = "unknown"
        pr.reasons.append(f"no measured sizes ({COSTS.name} missing): run scripts/bench/emulation.py --costs")
        return pr
    pts = costs["points"]
    failed = [p for p in pts if not _ok(p) and p["spec"].split(":")[0] == fabric.kind]
    over = [p for p in failed if p["links"] <= pr.links]
    good = [p for p in pts if _ok(p)]
    own = [p for p in good if p["spec"].split(":")[0] == fabric.kind]
    use = own if len(own) >= 2 else good
    if not use:
        pr.verdict = "unknown"
        pr.reasons.append("no measured size came up")
        return pr
    for q in QUANTITIES:  # a size that failed still counts for what it measured before it failed (its memory)
        have = [p for p in pts if q in p.get("zlab", {})]
        mine = [p for p in have if p["spec"].split(":")[0] == fabric.kind]
        pr.values[q] = interpolate([(p["links"], p["zlab"][q]) for p in (mine if len(mine) >= 2 else have)], pr.links)
    lo = min(p["links"] for p in use)
    hi = max(p["links"] for p in use)
    how = "interpolated" if lo <= pr.links <= hi else "extrapolated"
    names = ", ".join(f"{p['spec']} ({p['links']} links)" for p in sorted(use, key=lambda p: p["links"]))
    pr.basis = f"{how} from {len(use)} measured bring-ups: {names}"
    pr.history = _history([p for p in pts if p["spec"].split(":")[0] == fabric.kind and p["links"] == pr.links])
    mem = pr.values["peak_memory_bytes"]
    if mem > mem_available_bytes:
        pr.verdict = "does not fit"
        pr.reasons.append(
            f"peak memory {mem / 2**30:.1f} GiB > {mem_available_bytes / 2**30:.1f} GiB available (MemAvailable)"
        )
    elif mem > TIGHT * mem_available_bytes:
        pr.verdict = "tight"
        pr.reasons.append(
            f"peak memory {mem / 2**30:.1f} GiB is over {100 * TIGHT:.0f} % of the "
            f"{mem_available_bytes / 2**30:.1f} GiB available"
        )
    idle = pr.values["ovs_idle_cores"]
    if idle >= cpu_headroom:
        pr.reasons.append(
            f"ovs-vswitchd idles at {idle:.2f} cores (>= {cpu_headroom:g}, the fidelity guard's headroom): "
            "it comes up, but a replay on it would not be valid"
        )
        if pr.verdict == "fits":
            pr.verdict = "tight"
    for p in over:
        pr.verdict = "does not fit"
        pr.reasons.append(f"{p['spec']} ({p['links']} links) did not come up here: {p['zlab'].get('error', '?')}")
    return pr


def _history(same_size: list[dict]) -> str:
    """The spread of this size's own bring-ups (a point keeps its earlier runs under `earlier`): the
    prediction uses the latest, and a user sizing a lab should know how far runs have strayed."""
    runs = [r for p in same_size for r in (p, *p.get("earlier", []))]
    if len(runs) < 2:
        return ""
    ready = [r["zlab"]["ready_s"] for r in runs if "ready_s" in r.get("zlab", {})]
    failed = len(runs) - len(ready)
    text = f"this size was brought up {len(runs)} times here (older code included)"
    if len(ready) == 1:
        text += f": ready in {ready[0]:.0f} s once"
    elif ready:
        text += f": ready in {min(ready):.0f}-{max(ready):.0f} s over {len(ready)}"
    if failed:
        text += f"; {failed} failed"
    return text + "; the prediction uses the latest"


def describe(pr: Prediction) -> list[str]:
    """Lines for a person: the verdict, the predicted costs, and why."""
    if not pr.values:
        return [f"size check: {pr.verdict}: " + "; ".join(pr.reasons)]
    v = pr.values
    out = [
        f"size check: {pr.verdict} — predicted ready in {v['ready_s']:.0f} s (build, tables, reachability), "
        f"teardown {v['teardown_s']:.0f} s, peak memory {v['peak_memory_bytes'] / 2**30:.1f} GiB, "
        f"ovs-vswitchd idle {v['ovs_idle_cores']:.2f} cores",
        f"  ({pr.basis})",
    ]
    if pr.history:
        out.append(f"  {pr.history}")
    out += [f"  {r}" for r in pr.reasons]
    return out


def mem_available(meminfo: str = "/proc/meminfo") -> int:
    """MemAvailable now, bytes."""
    for line in open(meminfo):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"no MemAvailable in {meminfo}")
