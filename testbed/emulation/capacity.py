"""How many frames per second this machine's datapath forwards: the C of the scaling planner.

Why measured, not assumed: the smallest dilation a queue-faithful run needs is inversely
proportional to it (docs/experiments.md "Scaling planner"), and it differs by datapath and machine. The default
fabric (ZCube(4,2): every GPU-to-GPU frame crosses two switches) is brought up with fast links,
the agent pushes 4 KB RoCE frames on several QPs at once, and the switch forwards achieved are
divided by the CPU seconds ovs-vswitchd spent: forwards per core-second. The agent's frame
operations (sent and received) per CPU second of its own are recorded too: it plays every NIC.
"""

from __future__ import annotations

import datetime as dt
import os
import time

from traffic.agent import Agent

from ..fabric import build_fabric
from ..lab import state
from .agents import port_spec
from .config import CAPACITY_SPEC, EmulationConfig
from .probes import LiveRun
from .up import LiveFabric

# The default experiment's fabric size (8 bridges, 48 ports): ovs-vswitchd's cost per frame grows with the
# ports it polls — measured, a ZCube(2,2) probe (4 bridges) claimed ~1.4x what a ZCube(4,2) replay got.
SPEC = CAPACITY_SPEC
PAIRS = [(f"g{i}-p0", f"g{i + 5}-p1") for i in range(8)]  # cons -> rail, 2 hops, every A-B link used once


def _cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


# Per-link rates of the capacity curve, Mb/s. ovs-vswitchd's cost per frame depends on the link rate
# (measured on ZCube(4,2), 8 QPs: 17,125 forwards per core-second at 33 Mb/s links, 50,297 at 300 Mb/s):
# slow links hand it one frame per wake-up, fast ones batches. A scaled run's links are slow.
CURVE_RATES_MBPS = (4.0, 16.0, 33.0, 100.0, 300.0)


def measure_curve(results_dir: str = "results", rates=CURVE_RATES_MBPS, log=print) -> dict:
    """The probe at every rate of the curve; the record's flat figures are the curve's minimum
    (conservative for readers that do not interpolate)."""
    points = []
    for i, rate in enumerate(rates):
        log(f"[zlab] capacity probe {i + 1}/{len(rates)}: {len(PAIRS)} QPs at {rate:g} Mb/s links")
        rec = measure(results_dir, rate_mbps=rate, log=lambda *_: None, run_id=f"capacity-{os.getpid()}-{i}")
        points.append(
            {
                "link_rate_mbps": rate,
                **{
                    k: rec[k]
                    for k in (
                        "forwards_per_core_s",
                        "forwards_per_s",
                        "agent_frames_per_core_s",
                        "ovs_cpu_fraction",
                        "agent_cpu_fraction",
                        "retransmits",
                        "wall_s",
                    )
                },
            }
        )
    top = dict(rec)
    top.update(
        forwards_per_core_s=min(p["forwards_per_core_s"] for p in points),
        agent_frames_per_core_s=min(p["agent_frames_per_core_s"] for p in points),
        curve=points,
        method=rec["method"] + f"; per-link rates {', '.join(f'{r:g}' for r in rates)} Mb/s",
    )
    for k in ("forwards_per_s", "ovs_cpu_fraction", "agent_cpu_fraction", "retransmits", "wall_s", "offered_mbps"):
        top.pop(k, None)
    return top


def measure(
    results_dir: str = "results", seconds: float = 3.0, rate_mbps: float = 300.0, log=print, run_id: str | None = None
) -> dict:
    """Bring up ZCube(4,2), blast 8 cons->rail pairs at rate_mbps, return the capacity record."""
    cfg = EmulationConfig(rate_scale=rate_mbps * 1e6 / 200e9, mtu_bytes=9000)
    vswitchd = int(open("/var/run/openvswitch/ovs-vswitchd.pid").read().strip())
    with LiveFabric(
        SPEC,
        cfg,
        results_dir=results_dir,
        run_id=run_id or f"capacity-{os.getpid()}",
        log=log,
        stats_interval_s=30.0,
        lldp_interval_s=30.0,
    ) as lf:
        live = LiveRun(lf.dir)
        agent = Agent()
        size = int(rate_mbps * 1e6 / 8 * seconds)
        for sp, dp in PAIRS:
            agent.add_port(port_spec(live, sp))
            agent.add_port(port_spec(live, dp))
            conn = agent.connect(sp, dp, 49152 + len(agent.conns), 4096)
            agent.post(conn, size)
        cpu0, t0 = _cpu_s(vswitchd), time.monotonic()
        agent.run(deadline_ns=time.monotonic_ns() + int(4 * seconds * 1e9))
        wall, ovs_cpu = time.monotonic() - t0, _cpu_s(vswitchd) - cpu0
        agent_ops = sum(p.stats.tx_frames + p.stats.rx_frames for p in agent.ports.values())
        # frames that arrived (data at the rail ports, ACKs back at the cons ports): each crossed two
        # switches; frames a saturated datapath dropped are not forwards
        frames = sum(p.stats.rx_frames for p in agent.ports.values())
        retransmits = sum(c.req.c.retransmits for c in agent.conns)
        agent.close()
    forwards = 2 * frames
    record = {
        "forwards_per_core_s": forwards / max(ovs_cpu, 1e-9),
        "forwards_per_s": forwards / wall,
        "agent_frames_per_core_s": agent_ops / max(agent.cpu_s, 1e-9),
        "agent_cpu_fraction": agent.cpu_s / wall,
        "ovs_cpu_fraction": ovs_cpu / wall,
        "frame_bytes": 4096 + 74,
        "wall_s": wall,
        "offered_mbps": rate_mbps * len(PAIRS),
        "retransmits": retransmits,
        "datapath": lf.em.datapath if lf.em else state.datapath(),
        "measured": dt.datetime.now().isoformat(timespec="seconds"),
        "method": f"{SPEC}, {len(PAIRS)} QPs of 4 KB frames, 2 switch forwards per frame",
        # the planner scales the figure by the ports a larger fabric makes ovs-vswitchd poll
        "switch_ports": build_fabric(SPEC).n_switch_ports,
    }
    return record
