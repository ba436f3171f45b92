"""The network engines the serving model can drive, by name, each built fresh for one simulation.

Why several: "fixed-rate" is what every public P/D simulator assumes (bytes / a fixed bandwidth, no
contention), the baseline; "flow" is testbed/flowsim, max-min fair shares over the tables' exact
routes, where transfers contend for the fabric; "ns3" is zlab's ns-3 program at real scale in
lockstep with the model (ns3_engine.py): packets, queues, the RoCE-like transport;
"emulation" (emulated.py) is the live fabric in
real time: it needs root and a fabric brought up, so the capacity command builds it, not this.
"""

from __future__ import annotations

from ..flowsim.engine import FlowEngine
from . import ns3_engine
from .fixed_rate import FixedRateEngine

ENGINES = ("fixed-rate", "flow", "ns3", "emulation")
LIVE = ("emulation",)  # engines that need a live fabric (root): built by emulated.LiveFabrics


def make_engine(name: str, sc):
    """A fresh engine for scenario `sc` (setup.Scenario)."""
    if name == "fixed-rate":
        return FixedRateEngine(sc.port_rates_bps())
    if name == "flow":
        return FlowEngine(sc.fabric)
    if name == "ns3":  # LookupError: the caller refuses in one line (exit 2) before anything runs
        ok, what = ns3_engine.available()
        if not ok:
            raise LookupError(f"needs the compiled ns-3 program: {what}")
        return ns3_engine.Ns3Engine(sc.fabric)
    if name in LIVE:
        raise ValueError(f"the {name} engine runs on a live fabric: build it with emulated.LiveFabrics")
    raise ValueError(f"unknown network engine {name!r}; engines: {', '.join(ENGINES)}")
