"""The scaling planner: rate scale, size scale and dilation from what the machine can forward
and the smallest real queue quantity the run must represent.

Why (../README "Scaling planner"; the arithmetic is the design note's):
  * one emulated frame of F bytes stands for F / size_scale real bytes, so a real queue
    quantity Q (an XOFF, an ECN threshold) is representable only if Q x size_scale >= k x F;
  * every loaded port may send at line rate, so the peak switch-forward rate the workload can
    drive grows with rate_scale and must stay below headroom x C, C being the forwards per
    core-second the datapath achieved on this machine (`zlab doctor --capacity`);
  * dilation = size_scale / rate_scale: emulated seconds per real second, hence wall time.
The figures of a resolved experiment are linear in rate_scale (packet rates) at a fixed frame
size, so the planner needs no second resolution to predict them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..lab import state

HEADROOM = 0.7  # of one core for ovs-vswitchd: bursts and the agents need the rest
FRAMES_PER_QUEUE = 4  # k: a queue quantity smaller than this many frames is not representable
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


def capacity() -> tuple[float, bool]:
    rec = state.capacity()
    if rec and rec.get("forwards_per_core_s"):
        return float(rec["forwards_per_core_s"]), True
    return UNMEASURED_CAPACITY, False


def assess(exp, preset: str = "as given") -> Choice:
    """The trade-off of a resolved experiment as it stands."""
    spec = exp.spec
    first = next(iter(exp.fabrics.values()))
    rho, sigma = first.plan.scaling.rate_scale, first.plan.scaling.size_scale
    frame = first.emulation.burst_bytes
    cap, measured = capacity()
    peak = max(fr.figures["peak_switch_forwards_per_s"] for fr in exp.fabrics.values())
    budget = HEADROOM * cap
    q = float(spec["measurement"]["xoff_real_bytes"])
    floor = FRAMES_PER_QUEUE * frame / sigma
    wall = sum(SETUP_S_PER_FABRIC + len(fr.repeats) * (SETUP_S_PER_REPEAT + fr.figures["expected_emulated_duration_s"])
               for fr in exp.fabrics.values())
    notes = []
    if not measured:
        notes.append(f"capacity not measured on this machine: assumed {UNMEASURED_CAPACITY:,.0f} forwards per "
                     "core-second (run `zlab doctor --capacity`)")
    if peak > budget:
        notes.append(f"peak {peak:,.0f} switch forwards/s exceeds {100 * HEADROOM:.0f} % of the capacity "
                     f"({budget:,.0f}/s): expect the fidelity guard to find the run CPU-bound; lower rate_scale to "
                     f"<= {rho * budget / peak:.3g}")
    if q < floor:
        notes.append(f"queues not representable: XOFF {q:,.0f} real bytes < {FRAMES_PER_QUEUE} frames = {floor:,.0f} "
                     f"real bytes at size_scale {sigma:g}; queue byte figures are qualitative (queueing delay is not). "
                     f"size_scale >= {FRAMES_PER_QUEUE * frame / q:.3g} represents it")
    return Choice(preset, rho, sigma, sigma / rho, spec["workload"]["requests"], spec["repeats"], cap, measured, peak,
                  budget, frame,
                  floor, q, q >= floor, wall, notes)


def queue_faithful(exp, budget_s: float = 600.0) -> Choice:
    """Smallest dilation that represents the XOFF with k frames and keeps the peak within the
    headroom; requests cut (never below 10) until the expected wall time fits the budget."""
    now = assess(exp)
    sigma = FRAMES_PER_QUEUE * now.frame_bytes / now.queue_real_bytes
    rho = now.rate_scale * now.forwards_budget_per_s / now.peak_forwards_per_s
    d = sigma / rho
    reps = sum(len(fr.repeats) for fr in exp.fabrics.values())
    per_request_s = max(fr.figures["expected_real_duration_s"] for fr in exp.fabrics.values()) / max(now.requests, 1)
    fixed = sum(SETUP_S_PER_FABRIC + len(fr.repeats) * SETUP_S_PER_REPEAT for fr in exp.fabrics.values())
    requests, repeats = now.requests, exp.spec["repeats"]
    per_fabric = len(exp.fabrics)

    def wall_of(req, rep):
        return per_fabric * (SETUP_S_PER_FABRIC + rep * (SETUP_S_PER_REPEAT + per_request_s * req * d))

    while requests > 10 and wall_of(requests, repeats) > budget_s:
        requests = max(10, int(requests * 0.8))
    while repeats > 3 and wall_of(requests, repeats) > budget_s:  # never fewer than 3 draws
        repeats -= 1
    wall = wall_of(requests, repeats)
    notes = [n for n in now.notes if n.startswith("capacity not measured")]
    if wall > budget_s:
        notes.append(f"even {requests} requests need ~{wall:.0f} s, over the {budget_s:.0f} s budget")
    return Choice("queue-faithful", rho, sigma, d, requests, repeats, now.capacity_forwards_per_core_s,
                  now.capacity_measured,
                  now.forwards_budget_per_s, now.forwards_budget_per_s, now.frame_bytes,
                  FRAMES_PER_QUEUE * now.frame_bytes / sigma, now.queue_real_bytes, True, wall, notes)


def overrides(choice: Choice) -> list[str]:
    """The spec overrides that apply a choice."""
    return [f"emulation.rate_scale={choice.rate_scale:.6g}", f"workload.size_scale={choice.size_scale:.6g}",
            f"workload.requests={choice.requests}", f"repeats={choice.repeats}"]


def describe(c: Choice) -> list[str]:
    cap = f"{c.capacity_forwards_per_core_s:,.0f} forwards/core-s ({'measured' if c.capacity_measured else 'ASSUMED'})"
    return [f"scaling planner ({c.preset}): rate_scale {c.rate_scale:.3g}, size_scale {c.size_scale:.3g}, dilation "
            f"{c.dilation:,.1f}; {c.requests} requests x {c.repeats} repeats; expected wall ~{c.expected_wall_s / 60:.1f} min",
            f"  peak vs capacity            {c.peak_forwards_per_s:,.0f} forwards/s vs {100 * HEADROOM:.0f} % of {cap}",
            f"  smallest real queue         {c.smallest_representable_real_queue_bytes:,.0f} real bytes "
            f"({FRAMES_PER_QUEUE} frames of {c.frame_bytes} B); the run's XOFF {c.queue_real_bytes:,.0f} B is "
            + ("representable" if c.queue_representable else "NOT representable"),
            *[f"  note: {n}" for n in c.notes]]
