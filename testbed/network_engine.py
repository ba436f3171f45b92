"""The one interface every network engine offers to whatever drives transfers through it.

Why: the serving model (closed loop), the replay and the capacity search must run unchanged on the
flow-level engine, the packet engine and the live emulation. Each engine moves bytes between GPU
ports over the routes the fabric's tables give; the driver only starts transfers and learns when
they finish. Times are integers in nanoseconds of the engine's own clock (real time for the flow
and packet engines; emulated time for the emulation, divided by its dilation where it is reported).
"""

from __future__ import annotations

from typing import Protocol


class NetworkEngine(Protocol):
    """A discrete-event view of a network: start transfers, advance time, collect completions."""

    name: str  # "flow", "ns3", "emulation", "fixed-rate": named in every report's setup line

    def start(self, t_ns: int, flow_id: int, src: str, dst: str, size_bytes: int, sport: int | None = None) -> None:
        """Start moving size_bytes from GPU port src to GPU port dst at t_ns (>= the engine's
        clock). sport is the UDP source port (RoCEv2 entropy) that picks the path in ECMP tables;
        None lets the engine pick it as the transport would."""
        ...

    def next_event_ns(self) -> int | None:
        """The earliest time a running transfer completes if nothing new starts; None when idle."""
        ...

    def advance(self, t_ns: int) -> list[tuple[int, int]]:
        """Move the engine's clock to t_ns; return (flow_id, t_done_ns) for every transfer that
        completed at or before t_ns, in completion order."""
        ...


class OpaqueNetworkEngine(NetworkEngine, Protocol):
    """An engine that cannot know its next completion without running (the packet engine, the
    live emulation): next_event_ns() returns None when idle, and otherwise only a horizon by
    which the driver must ask again. The driver moves it with run_until, which stops at the first
    completion, so a closed loop reacts at the instant a transfer finishes, not a step later."""

    def run_until(self, t_ns: int) -> int:
        """Run to t_ns or to the first instant a transfer completes, whichever is earlier; return
        the time reached. advance(that time) then returns the completions."""
        ...
