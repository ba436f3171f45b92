"""Probes into a live fabric from outside the Mininet process: reachability and path proof.

Hosts are entered by their recorded shell pid (nsenter -t PID -n), so `zlab up` in one
terminal and `zlab verify-paths` in another work on the same run; tests use the same code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..fabric.model import Fabric
from ..fabric.paths import dst_address, route
from ..lab import procs
from ..lab.sh import run

_FLOW = re.compile(r"n_packets=(\d+).*?priority=(\d+)(,\S*)?\s+actions=(\S+)")


class LiveRun:
    """A running fabric, found through its run folder."""

    def __init__(self, run_dir):
        self.dir = Path(run_dir)
        self.fabric = Fabric.load(self.dir / "fabric.json")
        hosts_file = self.dir / "hosts.json"
        if not hosts_file.exists():
            raise RuntimeError(f"{run_dir}: no hosts.json — is this a zlab up / zlab run folder?")
        self.hosts = json.loads(hosts_file.read_text())

    def host_pid(self, gpu_name: str) -> int:
        h = self.hosts[gpu_name]
        if not procs.alive(h["pid"], h.get("started")):
            raise RuntimeError(f"host {gpu_name} (pid {h['pid']}) is not running: is the fabric still up?")
        return h["pid"]

    def in_host(self, gpu_name: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["nsenter", "-t", str(self.host_pid(gpu_name)), "-n", "--", *argv], capture_output=True, text=True, **kw
        )

    def popen_in_host(self, gpu_name: str, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(["nsenter", "-t", str(self.host_pid(gpu_name)), "-n", "--", *argv], **kw)


def all_pairs(fab: Fabric) -> list[tuple[int, int]]:
    """(source GPU port id, destination address) for every GPU port pair the address rule uses."""
    import numpy as np

    out = []
    g = np.arange(fab.n_gpus)
    for k in range(fab.ports_per_gpu):
        role = fab.gpu_port(0, k).role
        for src in range(fab.n_gpus):
            others = g[g != src]
            for a in dst_address(fab, np.full(others.size, src), role, others).tolist():
                out.append((src * fab.ports_per_gpu + k, a))
    return out


PROBE_UDP_PORT = 4793  # not RoCE's 4791: probes must never look like transfers


def reachability(live: LiveRun, timeout_s: float = 3.0, rounds: int = 3) -> dict:
    """Prove every GPU port pair the address rule uses, in one shot: one process opens a UDP socket
    on every GPU port inside its host's namespace (a socket keeps the namespace it was made in),
    every port sends one probe from its own address to every address the address rule gives it,
    through the host's routing table as transfers go (a missing route fails at the sender, a
    route through the wrong port at a switch without the entry), and the receivers record which
    (source, destination) arrived at the addressed port. Missing pairs are re-sent up to `rounds` times before they count as failed, so a
    probe lost to a queue is not mistaken for a missing route."""
    import select
    import socket

    from traffic.port import in_netns

    fab = live.fabric
    t0 = time.perf_counter()
    gp = fab.n_gpus * fab.ports_per_gpu
    socks: dict[int, socket.socket] = {}
    try:
        for p in fab.ports[:gp]:
            with in_netns(live.host_pid(fab.nodes[p.node].name)):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            s.bind((p.ip, PROBE_UDP_PORT))
            s.setblocking(False)
            socks[p.id] = s
        by_fd = {s.fileno(): pid for pid, s in socks.items()}
        pending = set(all_pairs(fab))
        total = len(pending)
        send_errors: dict[tuple[int, int], str] = {}
        poller = select.epoll()
        for fd in by_fd:
            poller.register(fd, select.EPOLLIN)
        for _ in range(max(1, rounds)):
            for sp, da in sorted(pending):
                try:
                    socks[sp].sendto(f"{sp} {da}".encode(), (fab.ports[da].ip, PROBE_UDP_PORT))
                except OSError as exc:  # no route through this port, or a full socket buffer
                    send_errors[(sp, da)] = exc.strerror or str(exc)
            deadline = time.monotonic() + timeout_s / max(1, rounds)
            while pending and time.monotonic() < deadline:
                for fd, _ in poller.poll(0.05):
                    while True:
                        try:
                            data = socks[by_fd[fd]].recv(64)
                        except BlockingIOError:
                            break
                        try:
                            sp, da = (int(x) for x in data.split())
                        except ValueError:
                            continue
                        if da == by_fd[fd]:  # arrived at the port it was addressed to
                            pending.discard((sp, da))
                            send_errors.pop((sp, da), None)
            if not pending:
                break
        poller.close()
    finally:
        for s in socks.values():
            s.close()
    failed = sorted(
        f"{fab.ports[sp].name} -> {fab.ports[da].name}"
        + (f" ({send_errors[(sp, da)]})" if (sp, da) in send_errors else "")
        for sp, da in pending
    )
    return {
        "pairs": total,
        "reachable": total - len(pending),
        "failed": failed,
        "seconds": time.perf_counter() - t0,
        "method": "one UDP probe per GPU port pair, all at once, from the source port's address",
    }


def dump_flows(switch: str) -> dict[tuple, int]:
    """{(priority, match, actions): n_packets} straight from the switch (ovs-ofctl), not via the app."""
    out = {}
    for line in run(["ovs-ofctl", "-O", "OpenFlow13", "--no-names", "dump-flows", switch]).splitlines():
        m = _FLOW.search(line)
        if m and not m.group(4).startswith("CONTROLLER"):  # LLDP punts tick every second
            out[(int(m.group(2)), (m.group(3) or "").lstrip(","), m.group(4))] = int(m.group(1))
    return out


_BUCKET = re.compile(r"bucket(\d+):packet_count=(\d+)")


def dump_group_buckets(switch: str) -> dict[tuple[int, int], int]:
    """{(group id, bucket index): packets} — which bucket of a fast-failover group forwarded."""
    out = {}
    for line in run(["ovs-ofctl", "-O", "OpenFlow13", "dump-group-stats", switch]).splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if m:
            for b, n in _BUCKET.findall(line):
                out[(int(m.group(1)), int(b))] = int(n)
    return out


def settled_flows(switches: list[str], timeout_s: float = 6.0) -> dict[str, dict]:
    """OVS pushes datapath counters to OpenFlow entries lazily (revalidators, ~0.5-1 s):
    poll until two snapshots 0.6 s apart agree."""
    deadline = time.monotonic() + timeout_s
    prev = {sw: dump_flows(sw) for sw in switches}
    while True:
        time.sleep(0.6)
        cur = {sw: dump_flows(sw) for sw in switches}
        if cur == prev or time.monotonic() > deadline:
            return cur
        prev = cur


UDP_SENDER = (
    "import socket,sys;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
    "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
    "s.bind((sys.argv[1],int(sys.argv[3])));"
    "[s.sendto(b'zlab-probe',(sys.argv[2],int(sys.argv[5]))) for _ in range(int(sys.argv[4]))]"
)


def send_udp(live: LiveRun, src_port_name: str, dst_ip: str, sport: int, count: int, dport: int = 4791) -> None:
    fab = live.fabric
    src = next(p for p in fab.ports if p.name == src_port_name)
    res = live.in_host(
        fab.nodes[src.node].name,
        [sys.executable, "-c", UDP_SENDER, src.ip, dst_ip, str(sport), str(count), str(dport)],
        timeout=30,
    )
    if res.returncode != 0:
        raise RuntimeError(f"UDP probe from {src_port_name} failed: {res.stderr.strip()}")


def _counted(switches, before, groups_before, count) -> list[tuple[str, int]]:
    """(switch, out port) of every entry that counted at least `count` more packets than before."""
    after = settled_flows(switches)
    observed = []
    for sw in switches:
        for key, n in after[sw].items():
            if n - before[sw].get(key, 0) < count:
                continue
            if key[2].startswith("output:"):
                observed.append((sw, int(key[2].split(":")[1].split(",")[0])))
            elif key[2].startswith("group:"):  # a fast-failover group: the bucket that counted says the port
                gid = int(key[2].split(":")[1].split(",")[0])
                now = dump_group_buckets(sw)
                for b, port in ((0, gid >> 16), (1, gid & 0xFFFF)):
                    if now.get((gid, b), 0) - groups_before[sw].get((gid, b), 0) >= count:
                        observed.append((sw, port))
    return observed


@dataclass
class PathProof:
    src: str
    dst: str
    sport: int
    model: list[tuple[str, int]]  # (switch, out port) per hop, from the routing model
    observed: list[tuple[str, int]]  # (switch, out port) whose entry counted every probe

    @property
    def ok(self) -> bool:
        return sorted(self.model) == sorted(self.observed)


def prove_path(live: LiveRun, src_port: str, dst: str, sport: int = 49152, count: int = 20, tables=None) -> PathProof:
    """Send `count` UDP probes and read which switch entries counted them all. tables: the
    model's tables to compare with (default the healthy ones; a failed fabric's degraded ones)."""
    fab = live.fabric
    model = route(fab, src_port, dst, sport=sport, tables=tables)
    switches = [sw.name for sw in fab.switches]
    before = settled_flows(switches)  # earlier traffic may still be reaching the counters
    groups_before = {sw: dump_group_buckets(sw) for sw in switches}
    send_udp(live, src_port, model.dst_ip, sport, count)
    hops = [(h.switch, h.out_port) for h in model.hops]
    for _attempt in range(3):  # OVS pushes datapath counters to entries lazily, not all switches at once
        observed = _counted(switches, before, groups_before, count)
        if sorted(observed) == sorted(hops):
            break
        time.sleep(1.0)
    observed.sort(key=lambda x: hops.index(x) if x in hops else len(hops))
    return PathProof(src_port, model.dst_port, sport, hops, observed)
