"""Agents on a live fabric: NIC port specs (addresses, scaled rates, host namespaces) from the
run folder — the resolved fabric and emulation settings, never re-derived."""

from __future__ import annotations

import json
import random
import time

import numpy as np

from traffic import roce
from traffic.agent import Agent, PortSpec

from ..fabric.paths import dst_address, split_fractions
from ..records import JsonLines
from .probes import LiveRun


def run_config(live: LiveRun) -> dict:
    return json.loads((live.dir / "run.json").read_text())["config"]["emulation"]


def port_spec(live: LiveRun, port_name: str) -> PortSpec:
    fab = live.fabric
    cfg = run_config(live)
    port = next((p for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu] if p.name == port_name), None)
    if port is None:
        raise KeyError(f"{port_name!r} is not a GPU port of {fab.spec}")
    gpu = fab.nodes[port.node].name
    return PortSpec(port.name, gpu, port.mac, port.ip, port.rate_bps * cfg["rate_scale"], live.host_pid(gpu))


def transfer_ports(live: LiveRun, src_gpu: str, dst_gpu: str, split: str | None = None) -> list[tuple[str, str, float]]:
    """(source port, destination port, share of bytes) per subflow, by the port-split policy
    and the address rule (ZCube: cons -> rail, rail -> cons)."""
    fab = live.fabric
    s, d = fab.node_by_name[src_gpu].id, fab.node_by_name[dst_gpu].id
    out = []
    for role, share in split_fractions(fab, split):
        sp = fab.gpu_port_by_role(s, role)
        da = int(dst_address(fab, np.array([s]), role, np.array([d]))[0])
        out.append((sp.name, fab.ports[da].name, share))
    return out


def send_message(
    live: LiveRun,
    src: str,
    dst: str,
    size_bytes: int,
    split: str | None = None,
    path_mtu: int | None = None,
    sport: int | None = None,
    records_path=None,
    timeout_s: float = 120.0,
    rc_opts: dict | None = None,
) -> tuple[list[dict], dict]:
    """One transfer from GPU (or GPU port) `src` to GPU `dst`; returns its completion records
    (one per subflow/QP) and the agent's counters."""
    fab = live.fabric
    cfg = run_config(live)
    path_mtu = path_mtu or roce.default_path_mtu(cfg["mtu_bytes"])
    if src in fab.node_by_name:
        subflows = transfer_ports(live, src, dst, split)
    else:
        gpu = next(p for p in fab.ports if p.name == src).node
        role = fab.ports[[p.name for p in fab.ports].index(src)].role
        da = int(dst_address(fab, np.array([gpu]), role, np.array([fab.node_by_name[dst].id]))[0])
        subflows = [(src, fab.ports[da].name, 1.0)]
    records = JsonLines(records_path)
    agent = Agent(records.write, rc_opts=rc_opts)
    try:
        rng = random.Random(sport)
        sizes = _split_sizes(size_bytes, [share for _, _, share in subflows])
        for (sp, dp, _), nbytes in zip(subflows, sizes):
            agent.add_port(port_spec(live, sp))
            agent.add_port(port_spec(live, dp))
            conn = agent.connect(sp, dp, sport if sport is not None else rng.randrange(49152, 65536), path_mtu)
            agent.post(conn, nbytes, meta={"transfer_bytes": size_bytes})
        ok = agent.run(deadline_ns=time.monotonic_ns() + int(timeout_s * 1e9))
        if not ok:
            raise TimeoutError(
                f"transfer {src} -> {dst} did not complete in {timeout_s} s ({agent.pending()} message(s) pending)"
            )
        return agent.done, agent.counters()
    finally:
        agent.close()
        records.close()


def _split_sizes(total: int, shares: list[float]) -> list[int]:
    sizes = [int(total * s) for s in shares]
    sizes[0] += total - sum(sizes)
    return sizes
