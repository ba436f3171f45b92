"""Probes into a live fabric from outside the Mininet process: reachability and path proof.

Hosts are entered by their recorded shell pid (nsenter -t PID -n), so `zlab up` in one
terminal and `zlab verify-paths` in another work on the same run; tests use the same code.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..fabric.model import Fabric
from ..fabric.paths import dst_address, route, walk
from ..lab import procs, state
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


# Pacing of the all-pairs proof. The probe rate is set in switch forwards per second (a probe
# crossing k switches costs k), as a share of this machine's measured datapath capacity.
PROBE_HEADROOM = 0.5  # assumption: half of one ovs-vswitchd core, the other half for LLDP, stats, bursts
UNMEASURED_PROBE_CAPACITY = 15000.0  # forwards/s without a capacity record: the planner's unmeasured figure
PROBE_WINDOW = 4096  # at most this many probes in flight (sent, not yet arrived, younger than the round's wait)
DIAGNOSE_PROBES = 5  # probes per still-missing pair when the switches' counters are read
DIAGNOSE_ONE_BY_ONE = 16  # at most this many ambiguous pairs are re-probed alone


def probe_capacity() -> tuple[float, str]:
    """(switch forwards per second the proof may use, where that figure comes from). The capacity
    curve's fastest point: probes go back to back, so ovs-vswitchd handles them in batches as on
    fast links (assumption; docs/emulation.md "Reachability at scale" has the measured loss)."""
    rec = state.capacity() or {}
    pts = rec.get("curve") or []
    if pts:
        best = max(pts, key=lambda p: p["link_rate_mbps"])
        return float(best["forwards_per_core_s"]), f"capacity record, {best['link_rate_mbps']:g} Mb/s point"
    if rec.get("forwards_per_core_s"):
        return float(rec["forwards_per_core_s"]), "capacity record"
    return UNMEASURED_PROBE_CAPACITY, "unmeasured (zlab doctor --capacity)"


ALL_PAIRS_MAX = 200_000  # "auto" probes every pair up to this many (ZCube(16,2): 130,560), the cover above
PROOF_METHODS = ("auto", "pairs", "cover")


def reachability(
    live: LiveRun, timeout_s: float = 3.0, rounds: int = 6, forwards_per_s: float | None = None, method: str = "auto"
) -> dict:
    """Prove every GPU port pair the address rule uses. One process opens a UDP socket on every GPU
    port inside its host's namespace (a socket keeps the namespace it was made in); ports send
    probes from their own address, through the host's routing table as transfers go, and the
    receivers record which (source, destination) arrived at the addressed port.

    method "pairs": one probe per pair. "cover" (testbed/emulation/cover.py): one probe per
    (switch, destination) decision, the hosts' tables read and compared with the plan, and the
    switches' counters checked against the probes' model paths; any doubt (a probe missing, a
    table that differs, a switch that counted too few) sends a probe for every pair it could
    touch, so a cut pair is still named. "auto": pairs up to ALL_PAIRS_MAX pairs, the cover above.

    Why paced and retried: OVS's userspace datapath drops part of an unpaced burst (130,560 probes
    at 256 GPUs lost a few hundred to a few thousand), which is loss, not a routing fault. Probes
    are sent at PROBE_HEADROOM of the measured capacity (in switch forwards, from the model's path
    length); only the missing pairs are re-sent, at half the rate each round, until a round brings
    none of them in. A pair still missing then is checked against the switches' own counters:
    `unreachable` names it with where its probes stopped (the sender's routing table, or the first
    switch on the model's path whose entry did not forward them)."""
    import select
    import socket

    from traffic.port import in_netns

    from . import cover

    if method not in PROOF_METHODS:
        raise ValueError(f"reachability proof {method!r}: expected one of {', '.join(PROOF_METHODS)}")
    fab = live.fabric
    t0 = time.perf_counter()
    gp = fab.n_gpus * fab.ports_per_gpu
    pairs = all_pairs(fab)
    if method == "auto":
        method = "pairs" if len(pairs) <= ALL_PAIRS_MAX else "cover"
    sps = np.array([a for a, _ in pairs], dtype=np.int64)
    das = np.array([b for _, b in pairs], dtype=np.int64)
    w = walk(fab, sps, das, PROBE_UDP_PORT)
    hops_of = {pr: max(1, int(k)) for pr, k in zip(pairs, w.n_hops.tolist(), strict=True)}
    cap, cap_src = (forwards_per_s, "given") if forwards_per_s else probe_capacity()
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < gp + 256:  # one socket per GPU port (2,048 at 1,024 GPUs)
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (min(hard, gp + 256) if hard != resource.RLIM_INFINITY else gp + 256, hard)
        )
    socks: dict[int, socket.socket] = {}
    pending: set[tuple[int, int]] = set()
    total = len(pairs)
    send_errors: dict[tuple[int, int], str] = {}
    history = []
    cover_record = None
    try:
        for p in fab.ports[:gp]:
            with in_netns(live.host_pid(fab.nodes[p.node].name)):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.bind((p.ip, PROBE_UDP_PORT))
            s.setblocking(False)
            socks[p.id] = s
        by_fd = {s.fileno(): pid for pid, s in socks.items()}
        poller = select.epoll()
        for fd in by_fd:
            poller.register(fd, select.EPOLLIN)
        prepare_s = time.perf_counter() - t0  # pairs, the model's walk, a socket per GPU port

        inflight: dict[tuple[int, int], float] = {}  # pair -> when it was sent, oldest first

        def drain(wait_s: float) -> None:
            for fd, _ in poller.poll(wait_s):
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
                        inflight.pop((sp, da), None)

        def prove(todo_pairs, phase: str) -> None:
            """Send the pairs' probes in paced rounds until all arrive or a round brings none. Two
            limits: the rate (forwards per second), and a window of PROBE_WINDOW probes in flight,
            so that the arrivals clock the sending when the datapath is slower than its measured
            capacity (it polls every port per wake-up: at 1,024 GPUs, 4,096 of them).

            Why shuffled: ovs-vswitchd reads at most 32 frames from a port per pass over all its
            ports, and a pass took 1.6-2.6 s at 1,024 GPUs under the proof ("Unreasonably long ...
            poll interval" in its log). Sent in order, one source port's probes go back to back into
            one switch port and queue there; shuffled, the probes in flight are spread over the
            ports. It did not remove the loss at 1,024 GPUs: each round delivered 1,100-2,100 probes
            a second whatever it was sent at (socket buffers and the softnet backlog ruled out;
            where the frames go is not measured), so the rounds' halving rate still decides."""
            pending.update(todo_pairs)
            rate = PROBE_HEADROOM * cap  # forwards per second
            wait_s = timeout_s / 3  # how long a probe may take before it counts as lost
            for rnd in range(max(1, rounds)):
                todo = sorted(pending)
                random.Random(rnd).shuffle(todo)  # spread over ports: see the docstring
                t_round = time.monotonic()
                spent = 0.0  # forwards sent this round
                window_waits = 0  # sends held back by the window
                inflight.clear()
                for i, (sp, da) in enumerate(todo):
                    window_waits += len(inflight) >= PROBE_WINDOW
                    while len(inflight) >= PROBE_WINDOW:  # the datapath is behind: wait for arrivals
                        oldest, t_sent = next(iter(inflight.items()))
                        left_s = t_sent + wait_s - time.monotonic()
                        if left_s <= 0:
                            del inflight[oldest]  # lost, or a cut pair: the next round or the diagnosis
                        else:
                            drain(min(left_s, 0.05))
                    try:
                        socks[sp].sendto(f"{sp} {da}".encode(), (fab.ports[da].ip, PROBE_UDP_PORT))
                    except OSError as exc:  # no route through this port, or a full socket buffer
                        send_errors[(sp, da)] = exc.strerror or str(exc)
                    else:
                        send_errors.pop((sp, da), None)
                        inflight[(sp, da)] = time.monotonic()
                    spent += hops_of[(sp, da)]
                    if i % 64 == 63:  # pace, and keep the receive buffers empty while sending
                        drain(0)
                        while (ahead_s := spent / rate - (time.monotonic() - t_round)) > 0:
                            drain(ahead_s)  # returns early when a probe arrives
                send_s = time.monotonic() - t_round
                deadline = time.monotonic() + wait_s
                while pending and time.monotonic() < deadline:
                    drain(0.05)
                history.append(
                    {
                        "phase": phase,
                        "round": rnd + 1,
                        "sent": len(todo),
                        "missing": len(pending),
                        "forwards_per_s": rate,
                        "achieved_forwards_per_s": round(spent / send_s, 1) if send_s > 0 else None,
                        "window": PROBE_WINDOW,
                        "window_waits": window_waits,
                        "seconds": round(time.monotonic() - t_round, 2),
                    }
                )
                if not pending or (rnd > 0 and len(pending) == len(todo)):
                    break  # all in, or a whole round of them at a low rate brought none: not loss
                rate /= 2

        if method == "pairs":
            prove(pairs, "all pairs")
        else:
            cover_record, suspects = _prove_cover(live, cover, pairs, sps, das, w, prove, pending)
            if suspects:
                prove(suspects, "pairs in doubt")
        unreachable = diagnose(live, sorted(pending), send_errors, socks) if pending else []
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
        "unreachable": unreachable,
        "rounds": history,
        "probes_sent": sum(h["sent"] for h in history),
        "seconds": time.perf_counter() - t0,
        "prepare_seconds": round(prepare_s, 2),
        "capacity_forwards_per_s": cap,
        "capacity_source": cap_src,
        "proof": method,
        "cover": cover_record,
        "method": (
            f"one UDP probe per GPU port pair from the source port's address, paced at {PROBE_HEADROOM:g} of "
            f"the datapath's capacity with at most {PROBE_WINDOW} in flight; missing pairs re-sent at half the rate per round; pairs still missing "
            "located with the switches' flow counters against the model's path"
            if method == "pairs"
            else "the cover: one UDP probe per (switch, destination) decision on the model's paths, paced at "
            f"{PROBE_HEADROOM:g} of the datapath's capacity with at most {PROBE_WINDOW} in flight and re-sent while "
            "missing; every host's routing table "
            f"(and neighbour table, up to {cover.NEIGHBOURS_READ_MAX:,} entries in all) read and compared with the "
            "plan; every switch's entries must count at least the "
            "forwards of the probes that arrived through it; any pair a missing probe, a differing table or a "
            "short switch could touch probed itself; pairs still missing located with the switches' counters"
        ),
    }


COUNTER_READERS = 64  # ovs-ofctl processes at once (one per switch of ZCube(32,2))


def ip_packets(switches: list[str]) -> dict[str, int]:
    """{switch: packets its IPv4 entries counted}, one `ovs-ofctl dump-aggregate SW ip` each, all
    at once. Why not dump-flows: a 1,024-GPU ZCube's 64 dumps of about 1,058 entries, each
    costing ovs-vswitchd a sweep of its 4,096 ports, take far longer than one aggregate each;
    `ip` leaves out the LLDP punts (eth_type 0x88cc) and the table-miss entry (matches less).
    Why all at once: ovs-vswitchd answers the requests waiting on its sockets in one pass of its
    main loop, and a pass took 1-2 s at 1,024 GPUs under the proof; eight at a time, the 64
    reads took 17 s before the cover's probes and 76 s after them (up to three readings)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(sw):
        text = run(["ovs-ofctl", "-O", "OpenFlow13", "dump-aggregate", sw, "ip"])
        return sw, int(text.split("packet_count=")[1].split()[0])

    with ThreadPoolExecutor(max(1, min(len(switches), COUNTER_READERS))) as pool:
        return dict(pool.map(one, switches))


def _prove_cover(live: LiveRun, cover, pairs, sps, das, w, prove, pending) -> tuple[dict, list]:
    """The cover's three checks (testbed/emulation/cover.py); returns its record and the pairs in
    doubt, which the caller then probes one by one."""
    fab = live.fabric
    phases: dict[str, float] = {}
    t = time.perf_counter()

    def lap(name):
        nonlocal t
        now = time.perf_counter()
        phases[name] = round(now - t, 2)
        t = now

    read_neighbours = len(pairs) <= cover.NEIGHBOURS_READ_MAX  # one permanent entry per pair, on its source host
    tables = cover.host_table_mismatches(fab, live.host_pid, neighbours=read_neighbours)
    lap("host_tables")
    idx = cover.select(fab, sps, das, w.out_ports, w.n_hops)
    chosen = [pairs[i] for i in idx.tolist()]
    lap("select")
    switches = [sw.name for sw in fab.switches]
    before = ip_packets(switches)
    lap("counters_before")
    prove(chosen, "cover")
    lap("probes")
    arrived = np.array([i for i in idx.tolist() if pairs[i] not in pending], dtype=np.int64)
    expected = np.zeros(len(fab.nodes), dtype=np.int64)
    hop_sw = cover.hop_switches(fab, w.out_ports[arrived])
    np.add.at(expected, hop_sw[hop_sw >= 0], 1)
    counted: dict[str, int] = {}
    todo = switches
    for _attempt in range(3):  # OVS pushes datapath counters to entries lazily (SETTLE_S), not all at once
        time.sleep(SETTLE_S)
        counted.update({sw: n - before[sw] for sw, n in ip_packets(todo).items()})
        todo = [sw.name for sw in fab.switches if counted[sw.name] < expected[sw.id]]
        if not todo:
            break
    short = {
        sw: f"counted {counted[sw]} of the {int(expected[fab.node_by_name[sw].id])} forwards of the probes that arrived"
        for sw in todo
    }
    lap("counters_after")
    keys = cover.decision_keys(fab, das, w.out_ports)
    missed = np.array([i for i in idx.tolist() if pairs[i] in pending], dtype=np.int64)
    doubt = np.isin(sps // fab.ports_per_gpu, np.array(sorted(tables), dtype=np.int64))
    if missed.size:
        bad_keys = np.unique(keys[missed][keys[missed] >= 0])
        doubt |= np.isin(keys, bad_keys).any(axis=1)
        doubt[missed] = True
    if short:
        ids = np.array([fab.node_by_name[n].id for n in short], dtype=np.int64)
        doubt |= np.isin(cover.hop_switches(fab, w.out_ports), ids).any(axis=1)
    doubt[arrived] = False  # proven by their own probe
    record = {
        "probes": len(chosen),
        "decisions": int(np.unique(keys[keys >= 0]).size),
        "hosts_read": fab.n_gpus,
        "neighbours": (
            "read and compared with the plan"
            if read_neighbours
            else f"not re-read ({len(pairs):,} entries in the kernel's shared table; written at bring-up, "
            "every write checked)"
        ),
        "tables_differ": {fab.nodes[g].name: why for g, why in sorted(tables.items())},
        "switches_short": short,
        "cover_missing": int(missed.size),
        "pairs_in_doubt": int(doubt.sum()),
        "seconds": phases,
    }
    return record, [pairs[i] for i in np.nonzero(doubt)[0].tolist()]


def _port_deltas(switches, before, after) -> dict[tuple[str, int], int]:
    """{(switch, out port): packets its non-controller entries counted between two snapshots}."""
    out: dict[tuple[str, int], int] = {}
    for sw in switches:
        for key, n in after[sw].items():
            if key[2].startswith("output:"):
                port = int(key[2].split(":")[1].split(",")[0])
                out[(sw, port)] = out.get((sw, port), 0) + n - before[sw].get(key, 0)
    return out


def diagnose(live: LiveRun, missing: list[tuple[int, int]], send_errors: dict, socks: dict) -> list[dict]:
    """Where the probes of each still-missing pair stop. A pair the sender could not send (no
    route) stopped at its host. Otherwise DIAGNOSE_PROBES probes per pair are sent at once and
    each switch port's entries are read before and after (OVS's own counters, not the app's): a
    pair stopped at the first hop of its model path whose (switch, out port) counted none of the
    probes expected through it. Where a port counted some but not all, which pairs got through is
    ambiguous: those pairs are re-probed alone."""
    fab = live.fabric
    out: dict[tuple[int, int], dict] = {}
    paths = {}
    for sp, da in missing:
        name = f"{fab.ports[sp].name} -> {fab.ports[da].name}"
        if (sp, da) in send_errors:
            out[(sp, da)] = {
                "pair": name,
                "stopped_at": fab.nodes[fab.ports[sp].node].name,
                "reason": f"the sender's routing table: {send_errors[(sp, da)]}",
            }
            continue
        try:
            r = route(fab, fab.ports[sp].name, fab.ports[da].name, sport=PROBE_UDP_PORT)
            paths[(sp, da)] = [(h.switch, h.out_port) for h in r.hops]
        except LookupError as exc:
            out[(sp, da)] = {"pair": name, "stopped_at": None, "reason": f"the model has no path: {exc}"}

    def probe(group):
        switches = sorted({sw for pr in group for sw, _ in paths[pr]})
        before = settled_flows(switches)
        for sp, da in group:
            for _ in range(DIAGNOSE_PROBES):
                try:
                    socks[sp].sendto(b"diagnose", (fab.ports[da].ip, PROBE_UDP_PORT))
                except OSError:
                    pass
        delta = _port_deltas(switches, before, settled_flows(switches))
        expected: dict[tuple[str, int], int] = {}
        for pr in group:
            for hop in paths[pr]:
                expected[hop] = expected.get(hop, 0) + DIAGNOSE_PROBES
        ambiguous = []
        for pr in group:
            sp, da = pr
            name = f"{fab.ports[sp].name} -> {fab.ports[da].name}"
            for sw, port in paths[pr]:
                got = delta.get((sw, port), 0)
                if got >= expected[(sw, port)]:
                    continue
                if got == 0 or len(group) == 1:
                    out[pr] = {
                        "pair": name,
                        "stopped_at": sw,
                        "reason": f"{sw} forwarded {got} of {expected[(sw, port)]} probes to its port {port} "
                        "(the model's next hop)",
                    }
                else:
                    ambiguous.append(pr)
                break
            else:
                dst_host = fab.nodes[fab.ports[da].node].name
                out[pr] = {
                    "pair": name,
                    "stopped_at": dst_host,
                    "reason": "every switch on the model's path forwarded the probes; lost at the destination",
                }
        return ambiguous

    todo = [pr for pr in missing if pr in paths]
    if todo:
        for i, pr in enumerate(probe(todo)):
            if i < DIAGNOSE_ONE_BY_ONE:
                probe([pr])
            else:
                name = f"{fab.ports[pr[0]].name} -> {fab.ports[pr[1]].name}"
                out[pr] = {"pair": name, "stopped_at": None, "reason": "not located (too many ambiguous pairs)"}
    return [out[pr] for pr in missing]


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


def _dump_all(switches: list[str]) -> dict[str, dict]:
    return {sw: dump_flows(sw) for sw in switches}


def settled_flows(switches: list[str], timeout_s: float = 6.0) -> dict[str, dict]:
    """OVS pushes datapath counters to OpenFlow entries lazily (revalidators, ~0.5-1 s):
    poll until two snapshots 0.6 s apart agree."""
    deadline = time.monotonic() + timeout_s
    prev = _dump_all(switches)
    while True:
        time.sleep(0.6)
        cur = _dump_all(switches)
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


# OVS's revalidators push datapath counters to OpenFlow entries every 500 ms (other_config:max-revalidator)
SETTLE_S = 1.2


def _counted(switches, before, groups_before, count, after) -> list[tuple[str, int]]:
    """(switch, out port) of every entry that counted at least `count` more packets from dump
    `before` to dump `after`."""
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
                    if now.get((gid, b), 0) - groups_before.get(sw, {}).get((gid, b), 0) >= count:
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
    # One dump of every switch per reading, each after the revalidators' push: every dump costs
    # ovs-vswitchd a few main-loop wake-ups, each a sweep of all its ports (about 10 ms of its CPU
    # per switch at 1,024 ports), and waiting for two equal snapshots took 5 to 9 rounds of 32
    # switches (24-29 s of ovs-vswitchd at 0.6-0.7 of a core after a 256-GPU replay).
    time.sleep(SETTLE_S)  # earlier traffic may still be reaching the counters
    before = _dump_all(switches)
    with_groups = [sw for sw in switches if any(k[2].startswith("group:") for k in before[sw])]
    groups_before = {sw: dump_group_buckets(sw) for sw in with_groups}
    send_udp(live, src_port, model.dst_ip, sport, count)
    hops = [(h.switch, h.out_port) for h in model.hops]
    for _attempt in range(3):  # OVS pushes datapath counters to entries lazily, not all switches at once
        time.sleep(SETTLE_S)
        observed = _counted(switches, before, groups_before, count, _dump_all(switches))
        if sorted(observed) == sorted(hops):
            break
    observed.sort(key=lambda x: hops.index(x) if x in hops else len(hops))
    return PathProof(src_port, model.dst_port, sport, hops, observed)
