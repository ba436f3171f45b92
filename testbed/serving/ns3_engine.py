"""The "ns3" network engine: zlab's ns-3 program (testbed/referee/zlab_referee.cc) at real scale,
in lockstep with the serving model.

Why a co-simulation and not a replay: in the closed loop, when a KV transfer finishes decides
when the next one starts, so the schedule cannot be written in advance. The program runs in its
serve mode: it builds the fabric and the switches' tables exactly as a referee run does (the
same scenario lines), then takes transfers and "run until t or the first completion" on stdin
and answers with the time reached and the completions. Each transfer is one message on a QP of
its own (the serving model's assumption; flow sharing between requests happens on the links);
the transport is the referee's RoCE-like sender unchanged (window, go-back-N, coalesced ACKs,
no congestion control: `zlab run --engine ns3`'s defaults). A completion is the requester's last
ACK, as in a replay, so a transfer's time is its bytes on the wire (frame headers included) at
the line rate plus a round trip, not payload / rate as the flow engine counts it.
The child is killed when the engine is collected, at interpreter exit, and (PR_SET_PDEATHSIG)
when this process dies, so no ns-3 process outlives its driver.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import tempfile
import weakref
from pathlib import Path

import numpy as np

from traffic import roce

from ..emulation.runfolder import flows_document
from ..errors import RuntimeFailure
from ..fabric import ids
from ..fabric.model import Fabric
from ..flowsim.schedule import ROCE_SPORT_COUNT, ROCE_SPORT_FIRST
from ..referee import binary, scenario

# a real switch's egress queue, in packets of the path MTU (1000 x 4 KB = 4 MB, the emulation's
# default limit read as real packets); deep enough that one QP per transfer rarely drops
QUEUE_PKTS = 1000
PATH_MTU = 4096


def fabric_text(fab: Fabric, queue_pkts: int = QUEUE_PKTS) -> str:
    """The scenario lines of the fabric alone (params, nodes, ports, links, entries): what
    referee/scenario.build writes for a run folder, built from the fabric and its tables."""
    params = {
        "payload_per_packet": roce.payload_per_packet(PATH_MTU),
        **scenario.FRAME,
        **scenario.TRANSPORT,
        "hop_delay_ns": 0,
    }
    lines = ["# zlab serving engine ns3", f"# fabric {fab.spec}"]
    lines += [f"param {k} {int(v)}" for k, v in params.items()]
    lines += [f"node {n.id} {n.name} {n.role}" for n in fab.nodes]
    linked = fab.port_link
    for p in fab.ports:
        r = fab.links[int(linked[p.id])].rate_bps if linked[p.id] >= 0 else p.rate_bps
        ip = ids.ip_to_int(p.ip) if p.ip else 0
        lines.append(f"port {p.id} {p.node} {p.number} {p.name} {ip} {int(r)} {int(queue_pkts)}")
    lines += scenario.link_and_entry_lines(fab, flows_document(fab))
    return "\n".join(lines) + "\n"


def available() -> tuple[bool, str]:
    """Whether the ns-3 program can be run (built, or buildable from its source)."""
    return binary.status()


def _die_with_parent() -> None:  # runs in the child before exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill(proc: subprocess.Popen | None, paths: list[Path]) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    for p in paths:
        with contextlib.suppress(OSError):
            p.unlink()


class Ns3Engine:
    """OpaqueNetworkEngine (testbed/network_engine.py) over the ns-3 program's serve mode."""

    name = "ns3"

    def __init__(
        self,
        fab: Fabric,
        seed: int = 0,
        queue_pkts: int = QUEUE_PKTS,
        horizon_ns: int = 1_000_000_000,
        stall_ns: int = 60_000_000_000,
    ):
        self.fab = fab
        self._port_id = {p.name: p.id for p in fab.ports}
        self._queue_pkts = int(queue_pkts)
        self._horizon_ns = int(horizon_ns)
        self._stall_ns = int(stall_ns)  # a transfer older than this in simulated time is a failure
        self._rng = np.random.default_rng(seed)
        self._clock_ns = 0
        self._running: dict[int, int] = {}  # flow id -> start time
        self._done: list[tuple[int, int]] = []  # (flow id, t_done_ns), reported, not yet advanced past
        self._proc: subprocess.Popen | None = None
        self._paths: list[Path] = []
        self._finalizer = None
        self.commands = 0  # run commands sent (each a round trip to the child)

    # --- child process -------------------------------------------------------------------------
    def _child(self) -> subprocess.Popen:
        """The ns-3 program, started at the first transfer (an engine built only to be checked
        starts nothing)."""
        if self._proc is not None:
            return self._proc
        ok, what = binary.status()
        if not ok:
            raise RuntimeFailure(f"network engine ns3 needs the compiled ns-3 program: {what}")
        exe = binary.build(log=lambda *_: None)
        fd, name = tempfile.mkstemp(prefix="zlab-ns3-serve-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(fabric_text(self.fab, self._queue_pkts))
        err = tempfile.NamedTemporaryFile(prefix="zlab-ns3-serve-", suffix=".err", delete=False)
        self._paths = [Path(name), Path(err.name)]
        self._proc = subprocess.Popen(
            [str(exe), "--serve", name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            bufsize=1 << 16,
            preexec_fn=_die_with_parent,
        )
        err.close()
        self._finalizer = weakref.finalize(self, _kill, self._proc, self._paths)
        return self._proc

    def close(self) -> None:
        """Stop the child now (it is also stopped when the engine is collected)."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _dead(self, what: str) -> RuntimeFailure:
        proc = self._proc
        code = proc.poll() if proc is not None else None
        tail = ""
        with contextlib.suppress(OSError, IndexError):
            tail = self._paths[1].read_text().strip()[-600:]
        self.close()
        return RuntimeFailure(f"network engine ns3: the ns-3 program {what} (exit code {code}): {tail or 'no message'}")

    def _send(self, line: str) -> None:
        proc = self._child()
        try:
            proc.stdin.write(line + "\n")
        except (BrokenPipeError, ValueError):
            raise self._dead("stopped taking commands") from None

    # --- NetworkEngine -------------------------------------------------------------------------
    def start(self, t_ns: int, flow_id: int, src: str, dst: str, size_bytes: int, sport: int | None = None) -> None:
        if t_ns < self._clock_ns:
            raise ValueError(f"flow {flow_id} starts at {t_ns} ns, before the engine's clock {self._clock_ns} ns")
        for port in (src, dst):
            if port not in self._port_id:
                raise ValueError(f"flow {flow_id}: unknown GPU port {port!r}")
        if flow_id in self._running:
            raise ValueError(f"flow {flow_id} is already running")
        if sport is None:  # as a RoCE NIC draws it: uniform over the RoCEv2 source-port range
            sport = ROCE_SPORT_FIRST + int(self._rng.integers(ROCE_SPORT_COUNT))
        self._send(
            f"start {int(flow_id)} {self._port_id[src]} {self._port_id[dst]} {int(size_bytes)} {int(sport)} {int(t_ns)}"
        )
        self._running[flow_id] = int(t_ns)

    def next_event_ns(self) -> int | None:
        if self._done:
            return self._done[0][1]
        return self._clock_ns + self._horizon_ns if self._running else None

    def run_until(self, t_ns: int) -> int:
        t_ns = int(t_ns)
        if self._done:  # completions already reported and not yet collected
            return min(self._done[0][1], max(t_ns, self._clock_ns))
        if t_ns < self._clock_ns:
            raise ValueError(f"run_until({t_ns}) is before the engine's clock {self._clock_ns} ns")
        if not self._running:
            self._clock_ns = t_ns
            return t_ns
        self._send(f"run {t_ns}")
        proc = self._proc
        try:
            proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise self._dead("stopped taking commands") from None
        self.commands += 1
        head = proc.stdout.readline().split()
        if len(head) != 3 or head[0] != "at":
            raise self._dead(f"answered {' '.join(head) or 'nothing'} to run {t_ns}")
        t_reached, k = int(head[1]), int(head[2])
        for _ in range(k):
            row = proc.stdout.readline().split()
            if len(row) != 3 or row[0] != "done":
                raise self._dead(f"sent a malformed completion {' '.join(row) or '(none)'}")
            fid, t_done = int(row[1]), int(row[2])
            if self._running.pop(fid, None) is None:
                raise self._dead(f"reported flow {fid}, which is not running")
            self._done.append((fid, t_done))
        self._clock_ns = t_reached
        if not k and self._running:
            fid, t0 = min(self._running.items(), key=lambda kv: kv[1])
            if t_reached - t0 > self._stall_ns:
                self.close()
                raise RuntimeFailure(
                    f"network engine ns3: flow {fid} started at {t0} ns has not completed after "
                    f"{self._stall_ns / 1e9:g} s simulated (unroutable, or lost for good)"
                )
        return t_reached

    def advance(self, t_ns: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        while True:  # a plain NetworkEngine too: runs through every completion up to t_ns
            out += [d for d in self._done if d[1] <= t_ns]
            self._done = [d for d in self._done if d[1] > t_ns]
            if self._done or not self._running or self._clock_ns >= t_ns:
                break
            self.run_until(t_ns)
        self._clock_ns = max(self._clock_ns, t_ns)
        return out
