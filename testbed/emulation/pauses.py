"""PFC-like lossless mode on the live fabric: pauses of the upstream transmitters, decided from the
switches' egress backlogs.

Why this shape (docs/congestion.md "Lossless mode in the emulation"): no kernel primitive here holds
frames on another device, so a userspace loop does what a switch's MMU does in hardware. Every
period it reads every switch egress backlog and bytes sent (one netlink dump) and every switch
ingress port's bytes received (sysfs). The packet engine's dynamic XOFF (testbed/congestion/mmu.py,
in emulated bytes) is applied to the bytes each ingress port holds, estimated from the egress
backlogs (PauseLogic), and an ingress over it shuts the gate of the transmitter at its far end
(tbf_netlink: a neighbour switch's egress port, or a GPU's NIC port in its host namespace) until it
falls `resume_offset` below XOFF. Which ingress ports feed which egress ports comes from the
replay's own routes (feeders).

Every PAUSE and RESUME is written as the packet engine writes pfc.csv (t_ns, port: the switch
ingress facing the paused transmitter, peer_port: the transmitter, event, cause_port: the egress
port holding most of that ingress's bytes), so testbed/measure/congestion.py reads both engines' records; each line
also carries the sample that saw the crossing and when the kernel acknowledged the gate: the
control loop's reaction time.

    python -m testbed.emulation.pauses CONFIG_JSON OUT_DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ..congestion import params as ccparams
from ..congestion.mmu import headroom_bytes, xoff_bytes
from ..fabric.paths import walk
from ..fabric.tables import port_peer
from ..qdisc_netlink import QdiscReader
from . import tbf_netlink

MIN_PERIOD_US, MAX_PERIOD_US = 1_000, 10_000  # the loop's sampling period (wall), bounds
PAUSED_RATE_BYTES_PER_S = 1_000  # a 4 KB frame costs 4 s at this rate: a shut gate passes nothing
OPEN_RATE_FACTOR = 2  # an open gate is twice the port's rate: the htb class above it sets the pace
CSV_HEADER = "t_ns,port,peer_port,event,cause_port,t_prev_sample_ns,t_sample_ns,t_applied_ns\n"


def period_us(cfg: dict, dilation: float) -> int:
    """The loop's sampling period, wall microseconds: a quarter of the time real PFC's headroom
    covers (factor x link delay, real) in emulated time, within [1 ms, 10 ms]. Why bounded: each
    sample is a netlink dump of every qdisc; at 0.5 ms the loop alone made a 16-GPU run CPU-bound
    (95 % of both cores, 36-48 % of periods missed, measured); beyond 10 ms it adds nothing.
    Where a quarter of the budget is under 1 ms the run goes ahead and the pause reaction rule
    judges it."""
    c = ccparams.validate(cfg)
    budget_wall_us = c["pfc_headroom_factor"] * c["link_delay_ns"] * dilation / 1e3
    return int(min(MAX_PERIOD_US, max(MIN_PERIOD_US, budget_wall_us / 4)))


def feeders(
    fab, flows: list[tuple[str, str, int]], tables: list | None = None, backups: list[tuple[str, str]] | None = None
) -> dict[str, list[tuple[str, str]]]:
    """{switch egress port: [(switch ingress port, the transmitter at its far end)]} for every hop
    of these flows (source port, destination port, UDP source port) and of their acknowledgements
    (the reverse direction, same source port), through each set of tables given (None: the healthy
    ones; a failure run adds the degraded tables of every failure state its schedule reaches).
    backups: (primary, backup) egress ports of fast-failover groups; a backup port is fed by
    whatever fed its primary (the frames a dead port's group sends there instead)."""
    ids = {p.name: p.id for p in fab.ports}
    src = [ids[s] for s, d, _ in flows] + [ids[d] for s, d, _ in flows]
    dst = [ids[d] for s, d, _ in flows] + [ids[s] for s, d, _ in flows]
    sport = [sp for _, _, sp in flows] * 2
    out: dict[str, set] = {}
    if src:
        peer = port_peer(fab)
        for t in tables or [None]:
            w = walk(fab, np.array(src), np.array(dst), np.array(sport), tables=t)
            for f in range(len(src)):
                ingress = int(peer[src[f]])
                for h in range(max(0, int(w.n_hops[f]))):
                    egress = int(w.out_ports[f, h])
                    out.setdefault(fab.ports[egress].name, set()).add(
                        (fab.ports[ingress].name, fab.ports[int(peer[ingress])].name)
                    )
                    ingress = int(peer[egress])
    for primary, backup in backups or []:
        if primary in out:
            out.setdefault(backup, set()).update(out[primary])
    return {e: sorted(v) for e, v in sorted(out.items())}


def failure_routes(fab, failplan_doc: dict | None) -> tuple[list, list[tuple[str, str]]]:
    """The tables and fast-failover backups a failure schedule can put traffic on (feeders' extra
    arguments): the healthy tables, each failure state's degraded ones, each protected entry's
    (primary, backup) egress ports."""
    if not failplan_doc:
        return [None], []
    from .failplan import degraded_tables

    tables = [None] + [degraded_tables(fab, failplan_doc, st) for st in failplan_doc["states"]]
    backups = set()
    by_number = {(fab.nodes[p.node].name, p.number): p.name for p in fab.ports}
    for sw, v in (failplan_doc.get("fast_failover") or {}).get("switches", {}).items():
        for e in v["entries"]:
            if e.get("ff_backup") is not None:
                backups.add((by_number[(sw, e["out_port"])], by_number[(sw, e["ff_backup"])]))
    return tables, sorted(backups)


@dataclass
class SwitchBuffer:
    """One switch's thresholds in emulated bytes."""

    ports: list[str]  # its egress ports that are sampled
    buffer_bytes: int
    need_bytes: int  # sum of headroom and reserve over its ports
    reserve_bytes: int
    resume_offset_bytes: int
    alpha_inv: int

    def xoff(self, backlog: dict[str, int]) -> int:
        shared = sum(max(0, backlog.get(p, 0) - self.reserve_bytes) for p in self.ports)
        return xoff_bytes(self.buffer_bytes, self.need_bytes, 0, shared, self.alpha_inv)


def switch_buffers(fab, cfg: dict, size_scale: float) -> dict[str, SwitchBuffer]:
    """Every switch's buffer, headroom and reserve (the packet engine's, x size scale sigma)."""
    c = ccparams.validate(cfg)
    out = {}
    for node in fab.nodes:
        if node.role != "switch":
            continue
        ports = [p for p in fab.ports if p.node == node.id and fab.port_link[p.id] >= 0]
        need = sum(
            headroom_bytes(p.rate_bps, c["link_delay_ns"], c["pfc_headroom_factor"]) + c["pfc_reserve_bytes"]
            for p in ports
        )
        out[node.name] = SwitchBuffer(
            [p.name for p in ports],
            round(c["pfc_buffer_bytes"] * size_scale),
            round(need * size_scale),
            round(c["pfc_reserve_bytes"] * size_scale),
            round(c["pfc_resume_offset_bytes"] * size_scale),
            c["pfc_alpha_inv"],
        )
    return out


@dataclass
class Change:
    ingress: str  # the switch port that "sends" the PAUSE
    transmitter: str  # the port whose gate shuts or opens
    pause: bool
    cause: str  # the egress port whose backlog decided it


@dataclass
class PauseLogic:
    """The MMU decisions, pure. `step` takes one sample (every switch egress port's backlog and
    cumulative bytes sent, every switch ingress port's cumulative bytes received) and returns the
    gates to change.

    Why an attribution: real PFC counts the bytes each ingress port holds; the emulation sees only
    egress backlogs. Each egress queue is split among the ingress ports that feed it (a fluid FIFO):
    what arrived at it during the period (its backlog's growth plus what it sent) is shared among its
    feeders by the bytes each received in that period, and the queue's bytes are then scaled to its
    real backlog (it served its feeders in proportion to what they held). An ingress holds the sum
    over the egress ports it feeds, and is paused and resumed by the packet engine's rule on it."""

    buffers: dict[str, SwitchBuffer]
    feeds: dict[str, list[tuple[str, str]]]
    held: dict[tuple[str, str], float] = field(default_factory=dict)  # (ingress, egress) -> bytes
    shut: dict[str, tuple[str, str]] = field(default_factory=dict)  # ingress -> (transmitter, cause egress)
    last: dict | None = None  # the previous sample's counters

    def _attribute(self, backlog: dict[str, int], sent: dict[str, int], received: dict[str, int]) -> None:
        prev = self.last or {"backlog": {}, "sent": sent, "received": received}
        for e, feeders_e in self.feeds.items():
            q = backlog.get(e, 0)
            arrived = max(0, q - prev["backlog"].get(e, 0) + sent.get(e, 0) - prev["sent"].get(e, 0))
            got = {i: max(0, received.get(i, 0) - prev["received"].get(i, 0)) for i, _ in feeders_e}
            total = sum(got.values())
            for i, _ in feeders_e:
                key = (i, e)
                share = got[i] / total if total else 0.0
                self.held[key] = self.held.get(key, 0.0) + arrived * share
            have = sum(self.held.get((i, e), 0.0) for i, _ in feeders_e)
            for i, _ in feeders_e:
                key = (i, e)
                if have > 0:
                    self.held[key] *= q / have
                else:  # nothing attributed yet: an equal split of what is there
                    self.held[key] = q / len(feeders_e)
        self.last = {"backlog": dict(backlog), "sent": dict(sent), "received": dict(received)}

    def step(self, backlog: dict[str, int], sent: dict[str, int], received: dict[str, int]) -> list[Change]:
        self._attribute(backlog, sent, received)
        by_ingress: dict[str, dict[str, float]] = {}
        tx_of = {}
        for e, feeders_e in self.feeds.items():
            for i, tx in feeders_e:
                by_ingress.setdefault(i, {})[e] = self.held.get((i, e), 0.0)
                tx_of[i] = tx
        changes = []
        for sw in self.buffers.values():
            mine = [i for i in sw.ports if i in by_ingress]
            holds = {i: sum(by_ingress[i].values()) for i in mine}
            shared_total = sum(max(0.0, h - sw.reserve_bytes) for h in holds.values())
            xoff = xoff_bytes(sw.buffer_bytes, sw.need_bytes, 0, int(shared_total), sw.alpha_inv)
            for i in mine:
                shared = holds[i] - sw.reserve_bytes
                cause = max(by_ingress[i], key=by_ingress[i].get)
                if i not in self.shut and shared > xoff:
                    self.shut[i] = (tx_of[i], cause)
                    changes.append(Change(i, tx_of[i], True, cause))
                elif i in self.shut and (shared <= 0 or shared + sw.resume_offset_bytes <= xoff):
                    tx, was = self.shut.pop(i)
                    changes.append(Change(i, tx, False, was))
        return changes


def plan(
    fab,
    cfg: dict,
    size_scale: float,
    flows,
    gates: dict[str, dict],
    failplan_doc: dict | None = None,
    marker: dict | None = None,
) -> dict:
    """The pause loop's configuration (written to the repeat's folder, read by the process).
    marker: {"cfg_map": pinned path, "ports": {port: {"ifindex", "config": PortConfig fields}}}
    when the ECN marker runs: a shut switch port's phantom queue stops draining with it."""
    tables, backups = failure_routes(fab, failplan_doc)
    feeds = feeders(fab, flows, tables, backups)
    healthy = feeders(fab, flows) if len(tables) > 1 or backups else feeds
    return {
        "buffers": {k: vars(v) for k, v in switch_buffers(fab, cfg, size_scale).items()},
        "feeds": feeds,
        # egress ports only a failure's routes use: where a pause storm on a detour would start
        "detour_ports": sorted(e for e in feeds if e not in healthy),
        "gates": gates,
        "marker": marker,
    }


def gate_table(fab, live, cfg_emulation, cfg: dict, size_scale: float) -> dict[str, dict]:
    """Every transmitter's gate: {port: {netns_pid, ifindex, mac, open_rate, burst, limit}}; GPU
    ports live in their host's namespace."""
    from traffic.port import in_netns

    from .config import ETH_OVERHEAD_BYTES

    c = ccparams.validate(cfg)
    frame = cfg_emulation["mtu_bytes"] + ETH_OVERHEAD_BYTES
    limit = max(64 * frame, round(c["pfc_buffer_bytes"] * size_scale))
    out = {}
    for p in fab.ports:
        if fab.port_link[p.id] < 0:
            continue
        gpu = fab.nodes[p.node].role != "switch"
        pid = live.host_pid(fab.nodes[p.node].name) if gpu else None
        with in_netns(pid):
            ifindex = socket.if_nametoindex(p.name)
        out[p.name] = {
            "netns_pid": pid,
            "ifindex": ifindex,
            "mac": p.mac,
            "open_rate_bytes_per_s": max(1, round(p.rate_bps * cfg_emulation["rate_scale"] * OPEN_RATE_FACTOR / 8)),
            "burst_bytes": frame,
            "limit_bytes": limit,
        }
    return out


class Gates:
    """The netlink sockets (one per namespace) and kick sockets behind a gate table."""

    def __init__(self, table: dict[str, dict], marker: dict | None = None):
        from traffic.port import in_netns

        from . import ecn

        self.table = table
        self.marker = marker
        self.writer = ecn.ConfigWriter(marker["cfg_map"]) if marker else None
        self.nl: dict[int | None, tbf_netlink.TbfGate] = {}
        self.kick: dict[str, socket.socket] = {}
        self.kicks: dict[str, int] = {}  # kick frames sent per port
        self.kicks_link_down: dict[str, int] = {}  # reopened while its link was down: nothing to restart
        for name, g in table.items():
            pid = g["netns_pid"]
            if pid not in self.nl:
                self.nl[pid] = tbf_netlink.TbfGate(tbf_netlink.open_socket(pid))
            with in_netns(pid):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                s.bind((name, 0))
            self.kick[name] = s

    def install(self) -> None:
        for g in self.table.values():
            self.nl[g["netns_pid"]].install(
                g["ifindex"], g["open_rate_bytes_per_s"], g["burst_bytes"], g["limit_bytes"]
            )

    def set(self, name: str, shut: bool) -> None:
        g = self.table[name]
        rate = PAUSED_RATE_BYTES_PER_S if shut else g["open_rate_bytes_per_s"]
        self.nl[g["netns_pid"]].set(g["ifindex"], rate, g["burst_bytes"], g["limit_bytes"])
        m = self.marker["ports"].get(name) if self.marker else None
        if m is not None:  # the marker's phantom queue drains only while the port does
            from .ecn import PortConfig

            c = PortConfig(**m["config"])
            self.writer.set(m["ifindex"], dataclasses.replace(c, rate_bytes_per_s=0) if shut else c)
        if not shut:
            try:
                self.kick[name].send(tbf_netlink.kick_frame(g["mac"]))
            except OSError as exc:  # a failed or flapping cable: taking the link down flushed the queue
                if exc.errno not in (errno.ENETDOWN, errno.ENXIO):
                    raise
                self.kicks_link_down[name] = self.kicks_link_down.get(name, 0) + 1
                return
            self.kicks[name] = self.kicks.get(name, 0) + 1

    def close(self) -> None:
        for s in self.kick.values():
            s.close()
        for g in self.nl.values():
            g.sock.close()
        if self.writer is not None:
            self.writer.close()


def run_loop(config: dict, out_dir: str, period_ns: int, stop: list) -> dict:
    """Sample, decide, act until `stop` is non-empty; every shut gate is opened before returning.
    Returns the loop's own account (samples, late samples, changes)."""
    buffers = {k: SwitchBuffer(**v) for k, v in config["buffers"].items()}
    logic = PauseLogic(buffers, {k: [tuple(x) for x in v] for k, v in config["feeds"].items()})
    gates = Gates(config["gates"], config.get("marker"))
    ifindex = {p: config["gates"][p]["ifindex"] for sw in buffers.values() for p in sw.ports}
    ingress = sorted({i for v in logic.feeds.values() for i, _ in v})
    rx_fd = {i: os.open(f"/sys/class/net/{i}/statistics/rx_bytes", os.O_RDONLY) for i in ingress}
    reader = QdiscReader()
    csv = open(os.path.join(out_dir, "pfc.csv"), "w", buffering=1)
    csv.write(CSV_HEADER)
    samples = late = changes = 0
    prev = time.monotonic_ns()
    try:
        nxt = prev
        while not stop:
            t = time.monotonic_ns()
            stats = reader.dump()
            leaf = {
                p: stats[(i, tbf_netlink.LEAF_HANDLE)]
                for p, i in ifindex.items()
                if (i, tbf_netlink.LEAF_HANDLE) in stats
            }
            received = {i: int(os.pread(fd, 32, 0)) for i, fd in rx_fd.items()}
            samples += 1
            for ch in logic.step({p: x[4] for p, x in leaf.items()}, {p: x[1] for p, x in leaf.items()}, received):
                gates.set(ch.transmitter, ch.pause)
                applied = time.monotonic_ns()
                csv.write(f"{applied},{ch.ingress},{ch.transmitter},{int(ch.pause)},{ch.cause},{prev},{t},{applied}\n")
                changes += 1
            prev = t
            nxt += period_ns
            now = time.monotonic_ns()
            if now > nxt:
                late += (now - nxt) // period_ns + 1
                nxt = now
            else:
                time.sleep((nxt - now) / 1e9)
    finally:
        for ingress, (tx, cause) in list(logic.shut.items()):
            gates.set(tx, False)
            now = time.monotonic_ns()
            csv.write(f"{now},{ingress},{tx},0,{cause},{prev},{prev},{now}\n")
        csv.close()
        gates.close()
        reader.close()
        for fd in rx_fd.values():
            os.close(fd)
    return {
        "samples": samples,
        "late_periods": int(late),
        "changes": changes,
        "period_ns": period_ns,
        "kick_frames": gates.kicks,
        "reopened_link_down": gates.kicks_link_down,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config_json", help="the plan() of this repeat: buffers, feeds, gates")
    ap.add_argument("out_dir", help="the repeat's raw folder: pfc.csv and pauses.json are written here")
    ap.add_argument("--period-us", type=float, required=True, help="sampling period, wall microseconds")
    args = ap.parse_args(argv)
    config = json.loads(open(args.config_json).read())
    stop: list = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    account = run_loop(config, args.out_dir, int(args.period_us * 1000), stop)
    with open(os.path.join(args.out_dir, "pauses.json"), "w") as fh:
        json.dump(account, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
