"""The scaling planner: rate scale, size scale and dilation from what the machine can forward
and the smallest real queue quantity the run must represent.

Why (docs/experiments.md "Scaling planner"; the arithmetic is the design note's):
  * one emulated frame of F bytes stands for F / size_scale real bytes, so a real queue
    quantity Q (an XOFF, an ECN threshold) is representable only if Q x size_scale >= k x F;
  * every loaded port may send at line rate, so the peak switch-forward rate the workload can
    drive grows with rate_scale and must stay below headroom x C, C being the forwards per
    core-second the datapath achieved on this machine (`zlab doctor --capacity`);
  * dilation = size_scale / rate_scale: emulated seconds per real second, hence wall time.
The figures of a resolved experiment are linear in rate_scale (packet rates) at a fixed frame
size, so the planner needs no second resolution to predict them.

Why the capacity shrinks with the fabric: the userspace datapath's main thread polls every switch
port on every wake-up (about 5 µs a port here), so a frame that wakes it costs in proportion to the
ports polled. The capacity is measured on ZCube(4,2)'s 64 switch ports; a fabric with P ports gets
that figure x 64 / P (never more than measured). Measured on ZCube(16,2), 1,024 ports: ~700
forwards per core-second in a replay, against 239 predicted from this machine's 4 Mb/s point and
3,828 unscaled (docs/emulation.md): conservative by about 3x (a replay batches a few frames per
wake-up, the capacity probe's 8 slow QPs about one), where the unscaled figure overrated it 5x.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..emulation.config import CAPACITY_SPEC
from ..errors import UserInputError
from ..fabric import build_fabric
from ..lab import state

HEADROOM = 0.7  # of one core for ovs-vswitchd: bursts and the agents need the rest
FRAMES_PER_QUEUE = 4  # k: a queue quantity smaller than this many frames is not representable
EVIDENCE = Path(__file__).with_name(
    "scaling_evidence.json"
)  # what the ns-3 referee measured (scripts/referee_evidence.py)
UNMEASURED_CAPACITY = 15000.0  # forwards per core-second; used, and labelled, when none was measured
SETUP_S_PER_FABRIC, SETUP_S_PER_REPEAT = 12.0, 3.0  # bring-up + calibration; collector + agent set-up


@dataclass
class Choice:
    preset: str
    rate_scale: float
    size_scale: float
    dilation: float
    requests: int
    repeats: int
    capacity_forwards_per_core_s: float
    capacity_measured: bool
    peak_forwards_per_s: float  # the busiest fabric's, at this choice
    forwards_budget_per_s: float  # headroom x capacity
    frame_bytes: int
    smallest_representable_real_queue_bytes: float  # k frames, in real bytes
    queue_real_bytes: float  # the smallest real quantity the run claims (the XOFF)
    queue_representable: bool
    expected_wall_s: float
    notes: list

    def to_dict(self) -> dict:
        return asdict(self)


UNMEASURED_AGENT_CAPACITY = 20000.0  # frames sent + received per agent core-second, when none was measured
AGENT_OPS_PER_NIC_FRAME = 2  # a data frame is sent by one NIC and received by another (ACKs are a few %)


def capacity() -> tuple[float, bool]:
    """The flat figure (the curve's minimum when a curve was measured) and whether it was measured."""
    rec = state.capacity()
    if rec and rec.get("forwards_per_core_s"):
        return float(rec["forwards_per_core_s"]), True
    return UNMEASURED_CAPACITY, False


@dataclass(frozen=True)
class Curve:
    """This machine's capacity record, read once: (switch forwards per ovs core-second, agent
    frames per agent core-second) at a per-link rate. Why per rate: ovs-vswitchd's cost per frame
    is ~3x higher on 33 Mb/s links than on 300 Mb/s ones (docs/experiments.md "Scaling planner")."""

    rates: tuple  # log(link rate), ascending; empty: flat figures only
    forwards: tuple
    agent: tuple
    flat_forwards: float
    flat_agent: float
    switch_ports: int = 0  # of the fabric the capacity was measured on; 0: the capacity probe's

    @classmethod
    def load(cls) -> Curve:
        rec = state.capacity() or {}
        pts = sorted(rec.get("curve") or [], key=lambda p: p["link_rate_mbps"])
        flat = float(rec["forwards_per_core_s"]) if rec.get("forwards_per_core_s") else UNMEASURED_CAPACITY
        return cls(
            tuple(np.log([p["link_rate_mbps"] for p in pts])),
            tuple(p["forwards_per_core_s"] for p in pts),
            tuple(p["agent_frames_per_core_s"] for p in pts),
            flat,
            float(rec.get("agent_frames_per_core_s") or UNMEASURED_AGENT_CAPACITY),
            int(rec.get("switch_ports") or 0),
        )

    def port_factor(self, switch_ports: int) -> float:
        """The capacity's share left when ovs-vswitchd polls switch_ports instead of the measured
        fabric's ports on every wake-up (the module docstring); 1 at or below the measured size."""
        ref = self.switch_ports or capacity_probe_switch_ports()
        return min(1.0, ref / switch_ports) if switch_ports else 1.0

    def at(self, link_rate_mbps: float) -> tuple[float, float]:
        """Interpolated in log(rate), clamped at the curve's ends; the flat figures without a curve."""
        if not self.rates:
            return self.flat_forwards, self.flat_agent
        x = float(np.log(max(link_rate_mbps, 1e-9)))
        return float(np.interp(x, self.rates, self.forwards)), float(np.interp(x, self.rates, self.agent))


def capacity_at(link_rate_mbps: float) -> tuple[float, float]:
    return Curve.load().at(link_rate_mbps)


@functools.lru_cache(maxsize=1)
def capacity_probe_switch_ports() -> int:
    """Switch ports of the capacity probe's fabric, computed from its spec (64 for ZCube(4,2))."""
    return build_fabric(CAPACITY_SPEC).n_switch_ports


def shares(figures: dict, g: float = 1.0, curve: Curve | None = None) -> tuple[float, float, float]:
    """(ovs-vswitchd cores, agent cores, capacity used) of one fabric's planned peak with its
    rate_scale multiplied by g: packet rates grow by g, and the link rate too, which moves the
    capacity along the measured curve; the capacity is scaled by the switch ports polled."""
    curve = curve or Curve.load()
    cap, agent_cap = curve.at(min(figures["link_rates_mbps"]) * g)
    cap *= curve.port_factor(int(figures.get("switch_ports") or 0))
    ovs = figures["peak_switch_forwards_per_s"] * g / cap
    agent = AGENT_OPS_PER_NIC_FRAME * figures["peak_nic_frames_per_s"] * g / agent_cap
    return ovs, agent, cap


def _fits(figures: dict, g: float, curve: Curve) -> bool:
    # each within its headroom, and the two together within the same headroom of one core: the other
    # core is the kernel's (veth, htb: softirq), the collector's and the controller's. Measured: with
    # the two together at a full core, 3 of 10 queue-faithful repeats saw ovs-vswitchd at 96-100 %
    # in some 250 ms intervals.
    ovs, agent, _ = shares(figures, g, curve)
    return ovs <= HEADROOM and agent <= HEADROOM and ovs + agent <= HEADROOM


def factor_for(figures_list: list[dict]) -> float:
    """By how much rate_scale may grow (< 1: must shrink) before ovs-vswitchd or the agent of the
    busiest fabric passes the headroom. Bisection in log(g): the capacity curve is monotone in rate
    and grows slower than the rate."""
    curve = Curve.load()  # once, not per bisection step
    out = []
    for fig in figures_list:
        lo, hi = -12.0, 12.0  # log(g)
        if _fits(fig, np.exp(hi), curve):
            out.append(float(np.exp(hi)))
            continue
        if not _fits(fig, np.exp(lo), curve):
            out.append(float(np.exp(lo)))
            continue
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _fits(fig, np.exp(mid), curve) else (lo, mid)
        out.append(float(np.exp(lo)))
    return min(out)


def rate_limit_factor(exp) -> float:
    return factor_for([fr.figures for fr in exp.fabrics.values()])


def capped_default_rate(exp, user_chose: bool) -> float | None:
    """The default rate_scale is a preset, not a promise: where this machine's measured capacity
    cannot carry it, the default is lowered to what the capacity allows (never raised: the fast
    preset's scales are the tested ones). None when it fits, when nothing was measured, or when
    the user chose the rate (then the assessment warns instead)."""
    if user_chose or not capacity()[1]:
        return None
    grow = rate_limit_factor(exp)
    if grow >= 1.0:
        return None
    first = next(iter(exp.fabrics.values()))
    return first.plan.scaling.rate_scale * grow


def assess(exp, preset: str = "as given") -> Choice:
    """The trade-off of a resolved experiment as it stands."""
    spec = exp.spec
    first = next(iter(exp.fabrics.values()))
    rho, sigma = first.plan.scaling.rate_scale, first.plan.scaling.size_scale
    frame = first.emulation.burst_bytes
    _, measured = capacity()
    curve = Curve.load()
    busiest = max(exp.fabrics.values(), key=lambda fr: shares(fr.figures, 1.0, curve)[0])
    peak = busiest.figures["peak_switch_forwards_per_s"]
    cap = shares(busiest.figures, 1.0, curve)[2]  # at the busiest fabric's link rate
    budget = HEADROOM * cap
    q = float(spec["measurement"]["xoff_real_bytes"])
    floor = FRAMES_PER_QUEUE * frame / sigma
    wall = sum(
        SETUP_S_PER_FABRIC + len(fr.repeats) * (SETUP_S_PER_REPEAT + fr.figures["expected_emulated_duration_s"])
        for fr in exp.fabrics.values()
    )
    notes = []
    if not measured:
        notes.append(
            f"capacity not measured on this machine: assumed {UNMEASURED_CAPACITY:,.0f} forwards per "
            "core-second (run `zlab doctor --capacity`)"
        )
    ports = int(busiest.figures.get("switch_ports") or 0)
    if curve.port_factor(ports) < 1.0:
        ref = curve.switch_ports or capacity_probe_switch_ports()
        notes.append(
            f"capacity scaled by the switch ports ovs-vswitchd polls on every wake-up: measured on {ref}, "
            f"this fabric has {ports:,} ({cap:,.0f} forwards/core-s instead of {cap * ports / ref:,.0f})"
        )
    grow = rate_limit_factor(exp)
    if grow < 0.99:
        notes.append(
            f"the peak exceeds {100 * HEADROOM:.0f} % of what ovs-vswitchd or the agent can handle: expect "
            f"the fidelity guard to find the run CPU-bound; lower rate_scale to <= {rho * grow:.3g}"
        )
    if q < floor:
        notes.append(
            f"queues not representable: XOFF {q:,.0f} real bytes < {FRAMES_PER_QUEUE} frames = {floor:,.0f} "
            f"real bytes at size_scale {sigma:g}; queue byte figures are qualitative. "
            f"size_scale >= {FRAMES_PER_QUEUE * frame / q:.3g} represents it"
        )
    note = referee_note(sigma)
    if note:
        notes.append(note)
    return Choice(
        preset,
        rho,
        sigma,
        sigma / rho,
        spec["workload"]["requests"],
        spec["repeats"],
        cap,
        measured,
        peak,
        budget,
        frame,
        floor,
        q,
        q >= floor,
        wall,
        notes,
    )


def referee_note(sigma: float) -> str | None:
    """What the ns-3 referee measured at real scale (sigma = 1) against a scaled emulation, at the
    shipped size scale nearest this one: which figures survived the scaling there."""
    if not EVIDENCE.exists():
        return None
    entries = json.loads(EVIDENCE.read_text())["entries"]
    if not entries:
        return None
    e = min(entries, key=lambda x: abs(math.log(x["size_scale"] / sigma)))
    fabs = e["fabrics"].values()
    kv = max(max(f["kv_p50_gap"], f["kv_p99_gap"]) for f in fabs)
    delay = max(fabs, key=lambda f: f["max_queue_delay_real_s"]["emu"])["max_queue_delay_real_s"]
    where = (
        "at this size scale"
        if abs(math.log(e["size_scale"] / sigma)) < 0.1
        else f"at size_scale {e['size_scale']:.3g}, the nearest refereed"
    )
    return (
        f"ns-3 at real rates and sizes vs the emulation {where} (zlab referee, run {e['run']}): KV completion "
        f"p50/p99 within {100 * kv:.0f} %; but the largest queueing delay was {1e6 * delay['emu']:,.0f} µs "
        f"emulated vs {1e6 * delay['ns3']:,.1f} µs real: queue depths and XOFF crossings do not survive the "
        f"scaling (the transport's window is 64 packets at any scale, and a scaled packet stands for "
        f"1/size_scale real bytes), so read them as qualitative"
    )


def queue_faithful(
    exp, budget_s: float = 600.0, spec_path: str | None = None, overrides_given: list[str] | None = None
) -> Choice:
    """Smallest dilation that represents the XOFF with k frames and keeps the peak within what
    ovs-vswitchd and the agent can handle; then requests (never below 10) and repeats (never below
    3) are cut until the resolved experiment's expected wall time fits the budget."""
    from . import spec as especs
    from .resolve import resolve

    now = assess(exp)
    sigma = FRAMES_PER_QUEUE * now.frame_bytes / now.queue_real_bytes
    rho = now.rate_scale * rate_limit_factor(exp)
    requests, repeats = now.requests, exp.spec["repeats"]
    for _ in range(40):
        base = (overrides_given or []) + [
            f"emulation.rate_scale={rho:.6g}",
            f"workload.size_scale={sigma:.6g}",
            f"workload.requests={requests}",
            f"repeats={repeats}",
        ]
        trial = assess(resolve(especs.load(spec_path, base)), "queue-faithful")
        if trial.expected_wall_s <= budget_s or (requests <= 10 and repeats <= 3):
            break
        if requests > 10:
            requests = max(10, int(requests * 0.85))
        else:
            repeats -= 1
    if trial.expected_wall_s > budget_s:
        trial.notes.append(
            f"even {requests} requests x {repeats} repeats need ~{trial.expected_wall_s:.0f} s, over "
            f"the {budget_s:.0f} s budget"
        )
    return trial


def overrides(choice: Choice) -> list[str]:
    """The spec overrides that apply a choice."""
    return [
        f"emulation.rate_scale={choice.rate_scale:.6g}",
        f"workload.size_scale={choice.size_scale:.6g}",
        f"workload.requests={choice.requests}",
        f"repeats={choice.repeats}",
    ]


def describe(c: Choice) -> list[str]:
    cap = f"{c.capacity_forwards_per_core_s:,.0f} forwards/core-s ({'measured' if c.capacity_measured else 'ASSUMED'})"
    return [
        f"scaling planner ({c.preset}): rate_scale {c.rate_scale:.3g}, size_scale {c.size_scale:.3g}, dilation "
        f"{c.dilation:,.1f}; {c.requests} requests x {c.repeats} repeats; expected wall ~{c.expected_wall_s / 60:.1f} min",
        f"  peak vs capacity            {c.peak_forwards_per_s:,.0f} forwards/s vs {100 * HEADROOM:.0f} % of {cap}",
        f"  smallest real queue         {c.smallest_representable_real_queue_bytes:,.0f} real bytes "
        f"({FRAMES_PER_QUEUE} frames of {c.frame_bytes} B); the run's XOFF {c.queue_real_bytes:,.0f} B is "
        + ("representable" if c.queue_representable else "NOT representable"),
        *[f"  note: {n}" for n in c.notes],
    ]


def draws_for_precision(exp, precision: float, most: int = 50) -> tuple[int, list[str]]:
    """`zlab run --precision P`: the number of draws (repeats) whose exact 95 % interval for the share of
    draws with an ECMP collision has a half-width of at most P, at the routing model's probability of a
    collision for each fabric's schedule (measure/draws.py); the largest over the fabrics. Why the share:
    where draws are bimodal (ROFT's default), the share of each mode is what a draw does."""
    from ..emulation.config import scaled_rate_bps
    from ..measure import draws

    if not 0 < precision < 0.5:
        raise UserInputError(f"--precision takes a half-width of the collision share in (0, 0.5), got {precision:g}")
    need, lines = 2, []
    for label, fr in exp.fabrics.items():
        rep = fr.repeats[0]
        ports = {p.name: p for p in fr.fabric.ports}
        msgs = [
            {
                "src_port": m.src_port,
                "dst_port": m.dst_port,
                "size_bytes": m.size_bytes,
                "t_due_ns": int(rep.plan.transfers[m.transfer].t_post_s * 1e9),
            }
            for m in rep.messages
        ]
        rate = {s: scaled_rate_bps(ports[s].rate_bps, fr.emulation) for s in {m["src_port"] for m in msgs}}
        p = draws.collision_probability(fr.fabric, msgs, rate)
        n = draws.draws_for_precision(p, precision, most=most)
        lo, hi = draws.clopper_pearson(round(n * p), n)
        if (hi - lo) / 2 > precision:
            raise UserInputError(
                f"--precision {precision:g}: {label} needs more than {most} draws (the most a run takes; "
                f"model's collision probability {100 * p:.1f} %)"
            )
        lines.append(
            f"{label}: model's collision probability {100 * p:.1f} %; {n} draws give a 95 % interval of "
            f"±{50 * (hi - lo):.1f} points on the share of draws with a collision"
        )
        need = max(need, n)
    return need, lines
