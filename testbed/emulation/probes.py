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
        return subprocess.run(["nsenter", "-t", str(self.host_pid(gpu_name)), "-n", "--", *argv],
                              capture_output=True, text=True, **kw)

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


def reachability(live: LiveRun, timeout_s: float = 3.0, max_parallel: int = 64) -> dict:
    """Ping every GPU port pair, all hosts at once, each host's pings in parallel batches."""
    fab = live.fabric
    by_host: dict[str, list[tuple[str, str]]] = {}
    for sp, da in all_pairs(fab):
        src = fab.ports[sp]
        by_host.setdefault(fab.nodes[src.node].name, []).append((src.ip, fab.ports[da].ip))
    script = ("n=0; while read s d; do (ping -n -q -c 1 -W {t} -I $s $d >/dev/null 2>&1 && echo OK $s $d "
              "|| echo FAIL $s $d) & n=$((n+1)); if [ $n -ge {p} ]; then wait; n=0; fi; done; wait").format(
        t=int(max(1, timeout_s)), p=max_parallel)
    t0 = time.perf_counter()
    procs_ = {}
    for host, pairs in by_host.items():
        p = live.popen_in_host(host, ["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        p.stdin.write("".join(f"{s} {d}\n" for s, d in pairs))
        p.stdin.close()
        procs_[host] = p
    ok, failed = 0, []
    for host, p in procs_.items():
        for line in p.stdout:
            word, s, d = line.split()
            if word == "OK":
                ok += 1
            else:
                failed.append(f"{fab.port_by_ip[s].name} -> {fab.port_by_ip[d].name}")
        p.wait()
    return {"pairs": ok + len(failed), "reachable": ok, "failed": sorted(failed), "seconds": time.perf_counter() - t0}


def dump_flows(switch: str) -> dict[tuple, int]:
    """{(priority, match, actions): n_packets} straight from the switch (ovs-ofctl), not via the app."""
    out = {}
    for line in run(["ovs-ofctl", "-O", "OpenFlow13", "--no-names", "dump-flows", switch]).splitlines():
        m = _FLOW.search(line)
        if m and not m.group(4).startswith("CONTROLLER"):  # LLDP punts tick every second
            out[(int(m.group(2)), (m.group(3) or "").lstrip(","), m.group(4))] = int(m.group(1))
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


UDP_SENDER = ("import socket,sys;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
              "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
              "s.bind((sys.argv[1],int(sys.argv[3])));"
              "[s.sendto(b'zlab-probe',(sys.argv[2],int(sys.argv[5]))) for _ in range(int(sys.argv[4]))]")


def send_udp(live: LiveRun, src_port_name: str, dst_ip: str, sport: int, count: int, dport: int = 4791) -> None:
    fab = live.fabric
    src = next(p for p in fab.ports if p.name == src_port_name)
    res = live.in_host(fab.nodes[src.node].name,
                       [sys.executable, "-c", UDP_SENDER, src.ip, dst_ip, str(sport), str(count), str(dport)],
                       timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"UDP probe from {src_port_name} failed: {res.stderr.strip()}")


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


def prove_path(live: LiveRun, src_port: str, dst: str, sport: int = 49152, count: int = 20) -> PathProof:
    """Send `count` UDP probes and read which switch entries counted them all."""
    fab = live.fabric
    model = route(fab, src_port, dst, sport=sport)
    switches = [sw.name for sw in fab.switches]
    before = settled_flows(switches)  # earlier traffic may still be reaching the counters
    send_udp(live, src_port, model.dst_ip, sport, count)
    after = settled_flows(switches)
    observed = []
    for sw in switches:
        for key, n in after[sw].items():
            if n - before[sw].get(key, 0) >= count and key[2].startswith("output:"):
                observed.append((sw, int(key[2].split(":")[1].split(",")[0])))
    hops = [(h.switch, h.out_port) for h in model.hops]
    observed.sort(key=lambda x: hops.index(x) if x in hops else len(hops))
    return PathProof(src_port, model.dst_port, sport, hops, observed)
