"""The network engines the serving model can drive, by name, each built fresh for one simulation.

Why lazily: "flow" is testbed/flowsim (another piece of work, contract A in testbed/network_engine.py);
importing it only when asked keeps `zlab capacity --network fixed-rate` working without it.
"""

from __future__ import annotations

import importlib

from .fixed_rate import FixedRateEngine

ENGINES = ("fixed-rate", "flow")


def make_engine(name: str, sc):
    """A fresh engine for scenario `sc` (setup.Scenario); LookupError when "flow" is not there yet."""
    if name == "fixed-rate":
        return FixedRateEngine(sc.port_rates_bps())
    if name == "flow":
        flowsim = importlib.import_module("testbed.flowsim")
        factory = getattr(flowsim, "FlowEngine", None)
        if factory is None:
            raise LookupError(
                "the flow engine is not available (testbed.flowsim has no FlowEngine yet); use fixed-rate"
            )
        return factory(sc.fabric)
    raise ValueError(f"unknown network engine {name!r}; engines: {', '.join(ENGINES)}")
