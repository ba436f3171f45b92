"""What to change after an INVALID run, and the rerun of only the invalid fabrics with it.

Why: a verdict without a remedy leaves the user guessing. Each fidelity rule says whether the
emulator ran out of machine (fixed by a larger dilation: a lower rate scale, so fewer frames per
second for the same real traffic), ran out of socket buffer (fixed by the default buffer), or
found something scaling cannot fix (misrouting, corruption, inexact shaping: a bug to report).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..emulation.config import MIN_LINK_MBPS
from ..fabric import build_fabric
from .planner import capacity, factor_for

MACHINE_BOUND = (
    "CPU-bound",
    "queue sample periods missed",
    "agent released messages late",
    "calibration",
    "agent sends blocked",
    "frames dropped outside",
    "no drop counter explains",
    "replay timeout",
)
NOT_SCALING = (
    "corrupted transfers",
    "serialisation floor",
    "carried utilisation",
    "off the model",
    "does not route through",
    "cannot read its input",
)  # an unreadable rule input: not the rate
DEFAULT_SOCKET_BUFFER = 8388608


@dataclass
class Advice:
    fabrics: list[str] = field(default_factory=list)  # the invalid ones
    overrides: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    unfixable: list[str] = field(default_factory=list)
    rerun_as_is: bool = False  # only the hypervisor's steal voided it: nothing in the spec to change

    @property
    def retry_possible(self) -> bool:
        return bool(self.fabrics) and (bool(self.overrides) or self.rerun_as_is) and not self.unfixable


def advise(experiment: dict, metrics: dict) -> Advice:
    """experiment: a run's experiment.json; metrics: its metrics.json."""
    spec = experiment["spec"]
    a = Advice()
    reasons = {}
    for label, f in metrics.get("fabrics", {}).items():
        if not f["summary"]["fidelity"]["valid"]:
            a.fabrics.append(label)
            reasons[label] = f["summary"]["fidelity"]["reasons"]
    flat = [r for rs in reasons.values() for r in rs]
    a.unfixable = sorted({r.split(": ", 1)[-1] for r in flat if any(k in r for k in NOT_SCALING)})
    if (
        any("at agent sockets" in r for r in flat)
        and spec["emulation"]["agent_socket_buffer_bytes"] < DEFAULT_SOCKET_BUFFER
    ):
        a.overrides.append(f"emulation.agent_socket_buffer_bytes={DEFAULT_SOCKET_BUFFER}")
        a.why.append("frames died in the agent's socket buffers: back to the default 8 MiB")
    elif flat and all("hypervisor stole" in r for r in flat):
        a.rerun_as_is = True
        a.why.append(
            "only the hypervisor's steal voided it, a cause outside the run that a lower rate does not remove: "
            "rerun as is on a quieter host (the runner already re-took such repeats up to "
            f"measurement.steal_retakes = {spec['measurement'].get('steal_retakes', 0)} times)"
        )
    elif any(any(k in r for k in MACHINE_BOUND) for r in flat):
        rho = spec["emulation"]["rate_scale"]
        _, measured = capacity()
        new = rho * min(0.5, factor_for([f["figures"] for lab, f in experiment["fabrics"].items() if lab in a.fabrics]))
        floor = lowest_rate_scale(experiment, a.fabrics)
        if rho <= floor * (1 + 1e-9):
            a.why.append(
                f"the machine, not the fabric, limited the run, and rate_scale {rho:g} is already the lowest these "
                f"fabrics allow (their slowest link at {MIN_LINK_MBPS:g} Mb/s; htb is inaccurate below): no lower rate "
                "can fix it here; more cores or the kernel datapath (docs/emulation.md, 'What fits this machine')"
            )
            return a
        lowered = new < floor
        new = max(new, floor)
        if float(f"{new:.3g}") < floor:  # the 3 digits printed must not round below the floor
            new = float(f"{floor * 1.006:.3g}")
        a.overrides.append(f"emulation.rate_scale={new:.3g}")
        a.why.append(
            f"the machine, not the fabric, limited the run: rate_scale {rho:g} -> {new:.3g} "
            + (
                f"(the lowest these fabrics allow: their slowest link at {MIN_LINK_MBPS:g} Mb/s) lowers"
                if lowered
                else "halves (or more)"
            )
            + f" the frames per second (dilation {spec['workload']['size_scale'] / rho:g} -> "
            f"{spec['workload']['size_scale'] / new:g}; the wall time grows by the same factor)"
            + ("" if measured else "; run `zlab doctor --capacity` for a measured limit")
        )
    return a


def lowest_rate_scale(experiment: dict, labels: list[str]) -> float:
    """The smallest rate_scale the emulation accepts for these fabrics: their slowest link at
    MIN_LINK_MBPS (EmulationConfig.validate refuses less). Why here: advice that suggests a rate
    the spec then refuses is a dead end (a 256-GPU run at 7.5e-7 was told to retry at 3.75e-7)."""
    return max(
        MIN_LINK_MBPS * 1e6 / min(link.rate_bps for link in build_fabric(experiment["fabrics"][lab]["fabric"]).links)
        for lab in labels
    )


def lines(a: Advice, run_dir: str) -> list[str]:
    out = []
    if a.unfixable:
        out.append("[zlab] not fixable by scaling (report it as a bug): " + "; ".join(a.unfixable[:4]))
    for w in a.why:
        out.append(f"[zlab] suggestion: {w}")
    if a.retry_possible:
        same = f"   (same as --set {' --set '.join(a.overrides)})" if a.overrides else "   (same settings)"
        out.append(f"[zlab] rerun only {', '.join(a.fabrics)} with it: zlab run --retry-invalid {run_dir}{same}")
    return out
