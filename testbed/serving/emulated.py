"""The live emulated fabric as a serving-model network engine: closed loop, in real time.

Why: the flow engine's max-min shares are a model; the emulation moves real frames through OVS
with zlab's RoCE-like transport (go-back-N, pacing, timeouts), so its KV times carry what the
model leaves out. The serving model keeps its own clock (real-cluster ns); this engine maps real
time t to wall time t0 + t x dilation, posts each transfer at that instant with its bytes scaled
by size_scale, runs the agent until the next modelled event or the first completion, and reports
completions back in real ns ((wall - t0) / dilation).

Fidelity: the model's own compute must keep up with the wall clock. Every start is checked
against the wall time it stands for; the worst lag is recorded, and a simulation whose lag
exceeds max_lag_wall_ns is flagged void (its KV left late, so its times are not the fabric's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack

# wall time between building the engine and real t = 0: the set-up (agent sockets, QPs) is done
# by then, so the first transfer is not released late
LEAD_WALL_NS = 200_000_000
# the driver asks again at least this often (real ns) while transfers run: run_until's horizon
HORIZON_NS = 1_000_000
# worst wall-clock lag of a start behind the instant it stands for, above which a simulation is
# void. Measured on a 2-core VM with OVS busy: 2 to 5 ms (the agent's 1 ms poll tick, a first
# packet's pacing, the scheduler). 10 ms of wall is 0.5 ms of real time at dilation 20: a few
# percent of the shortest KV transfer in the capacity scenarios (tens of real ms).
MAX_LAG_WALL_NS = 10_000_000


class EmulationEngine:
    """OpaqueNetworkEngine over an agent (traffic/agent.Agent or a fake with post/run/done).

    connect(src, dst, sport) returns the agent's QP for a port pair (made once per pair)."""

    name = "emulation"

    def __init__(
        self,
        agent,
        connect: Callable[[str, str, int], object],
        dilation: float,
        size_scale: float,
        clock: Callable[[], int] = time.monotonic_ns,
        max_lag_wall_ns: int = MAX_LAG_WALL_NS,
        lead_wall_ns: int = LEAD_WALL_NS,
        timeout_wall_ns: int | None = None,
    ):
        self.agent, self._connect, self.dilation, self.size_scale = agent, connect, dilation, size_scale
        self.clock = clock
        self.max_lag_wall_ns = max_lag_wall_ns
        self.timeout_wall_ns = timeout_wall_ns
        self.t0_wall = clock() + lead_wall_ns
        self.now = 0
        self.conns: dict[tuple[str, str, int], object] = {}
        self.running: set[int] = set()
        self.done: list[tuple[int, int]] = []  # (flow_id, t_done real ns), completion order, not yet reported
        self._seen = 0  # agent.done records already read
        self.worst_lag_wall_ns = 0
        self.starts = 0

    # --- time mapping ------------------------------------------------------------------------
    def wall(self, t_ns: int) -> int:
        return self.t0_wall + round(t_ns * self.dilation)

    def real(self, wall_ns: int) -> int:
        return round((wall_ns - self.t0_wall) / self.dilation)

    # --- the contract ------------------------------------------------------------------------
    def start(self, t_ns: int, flow_id: int, src: str, dst: str, size_bytes: int, sport: int | None = None) -> None:
        sport = 49152 if sport is None else sport
        key = (src, dst, sport)
        if key not in self.conns:
            self.conns[key] = self._connect(src, dst, sport)
        due = self.wall(t_ns)
        self.worst_lag_wall_ns = max(self.worst_lag_wall_ns, self.clock() - due)
        self.agent.post(self.conns[key], max(1, round(size_bytes * self.size_scale)), at_ns=due, meta={"flow": flow_id})
        self.running.add(flow_id)
        self.starts += 1

    def next_event_ns(self) -> int | None:
        if self.done:
            return self.done[0][1]
        return self.now + HORIZON_NS if self.running else None

    def _read(self) -> None:
        for rec in self.agent.done[self._seen :]:
            fid = rec["flow"]
            self.running.discard(fid)
            self.done.append((fid, max(self.now, self.real(rec["t_complete_ns"]))))
        self._seen = len(self.agent.done)

    def run_until(self, t_ns: int) -> int:
        self._read()
        if not self.done and self.running:
            self.agent.run(deadline_ns=self.wall(t_ns), stop_on_completion=True)
            self._read()
            if not self.done and self.timeout_wall_ns is not None and self.clock() > self.timeout_wall_ns:
                raise RuntimeError(f"emulation: {len(self.running)} KV transfers still running at the timeout")
        return min(t_ns, self.done[0][1]) if self.done else t_ns

    def advance(self, t_ns: int) -> list[tuple[int, int]]:
        self._read()
        out = [d for d in self.done if d[1] <= t_ns]
        self.done = [d for d in self.done if d[1] > t_ns]
        self.now = max(self.now, t_ns)
        return out

    def fidelity(self) -> dict:
        """What a capacity point records about the run: void when the model fell behind the wall."""
        return {
            "worst_lag_wall_ms": self.worst_lag_wall_ns / 1e6,
            "max_lag_wall_ms": self.max_lag_wall_ns / 1e6,
            "void": self.worst_lag_wall_ns > self.max_lag_wall_ns,
            "transfers": self.starts,
        }

    def close(self) -> None:
        close = getattr(self.agent, "close", None)
        if close is not None:
            close()


class LiveFabrics:
    """The live fabrics a capacity search drives: one up at a time (2 cores, one ovs-vswitchd),
    brought up when a scenario first needs it and kept for every point and repeat on it; the
    previous one is torn down first. Everything is registered by LiveFabric and removed on exit."""

    def __init__(self, spec: dict, results_dir: str, log=print):
        self.spec, self.results_dir, self.log = spec, results_dir, log
        self.label: str | None = None
        self.stack: ExitStack | None = None
        self.live = None
        self.lf = None

    def __enter__(self) -> LiveFabrics:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.stack is not None:
            stack, self.stack, self.label = self.stack, None, None
            stack.close()

    def _up(self, sc) -> None:
        from traffic import roce

        from ..emulation.config import EmulationConfig
        from ..emulation.probes import LiveRun
        from ..emulation.up import LiveFabric

        self.close()
        em, d = self.spec["emulation"], self.spec["deployment"]
        cfg = EmulationConfig(
            rate_scale=em["rate_scale"],
            mtu_bytes=em["mtu_bytes"],
            queue_limit_pkts=em["queue_limit_pkts"],
            burst_bytes=roce.link_mtu_needed(d["path_mtu"]) + roce.ETH_HDR,
        )
        cfg.validate(sc.fabric)
        stack = ExitStack()
        self.lf = stack.enter_context(
            LiveFabric(
                sc.fabric,
                cfg,
                results_dir=self.results_dir,
                run_id=f"emulation-{sc.label}",
                log=self.log,
                controller=self.spec["controller"],
                kind="capacity",
                suppress_sigterm=False,
            )
        )
        self.live = LiveRun(self.lf.dir)
        self.stack, self.label = stack, sc.label

    def engine(self, sc) -> EmulationEngine:
        """A fresh engine (its own agent and QPs) on scenario sc's live fabric."""
        from traffic.agent import Agent

        from ..emulation.agents import port_spec

        if self.label != sc.label:
            self._up(sc)
        live, mtu = self.live, self.spec["deployment"]["path_mtu"]
        agent = Agent(socket_buffer_bytes=self.spec["emulation"]["agent_socket_buffer_bytes"])
        # every serving GPU's ports open before t0: opening a socket in a host's namespace takes
        # tens of ms, which inside the loop would release the KV late (measured: 189 ms lag)
        fab = sc.fabric
        gpus = {g for inst in sc.instances for g in inst.gpus}
        for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]:
            if p.node in gpus:
                agent.add_port(port_spec(live, p.name))

        def connect(src: str, dst: str, sport: int):
            agent.add_port(port_spec(live, src))
            agent.add_port(port_spec(live, dst))
            return agent.connect(src, dst, sport, mtu)

        em, w = self.spec["emulation"], self.spec["workload"]
        return EmulationEngine(agent, connect, w["size_scale"] / em["rate_scale"], w["size_scale"])
