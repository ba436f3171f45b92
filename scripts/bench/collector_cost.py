#!/usr/bin/env python3
"""Collector cost benchmark (not a test; needs root, not OVS): CPU of one queue sample at N ports.

Why: the queue collector (testbed/measure/collector.py) samples every switch egress queue every
10 ms with one RTM_GETQDISC dump; at 1,024 ports its CPU pushed the machine past the fidelity
guard's CPU limit. This reproduces the cost without OVS: a network namespace of its own holding
N veth pairs, one end of each shaped exactly as zlab shapes a switch port (htb root 1:, class
1:1, pfifo leaf 10:, and the ECN marker's clsact unless --no-clsact), and times, per sample:

  old   QdiscReader().dump((b"pfifo", b"tbf")) and the collector's per-port lookups
  new   LeafSampler(...).sample()
  json  writing the sample's JSON line (JsonLines, compact, as the collector does)

--peers-apart puts each veth's peer in a second namespace, as zlab's host NICs are: the dump
then holds 3 qdiscs per port instead of 4 (no noqueue peer).

CPU per sample is the thread's CPU time (median over samples); the user/system split is the
mean of getrusage deltas (tick-sampled: only its mean over many samples means anything). The
implementations run interleaved, one call each per round, rounds paced at --period-ms, and
must agree on every counter first. The whole run (build, time, remove) holds an exclusive
flock on --lock, which other CPU-sensitive measurements on this machine share: do not wrap it
in flock(1) as well. The namespaces (zlabbench-coll-<pid>[-peers]) and the temporary
directory are removed on any exit; --max-s bounds the run.

    sudo .venv/bin/python scripts/bench/collector_cost.py [--ports 1024] [--samples 300] [--json]
    sudo .venv/bin/python scripts/bench/collector_cost.py --ports 4 --rate 8kbit --limit 5 --traffic 8 --capture tests/data/qdisc/dump_4ports.bin
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import fcntl
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from testbed.measure.collector import LEAF_HANDLE, LEAF_KINDS, machine_cpu  # noqa: E402
from testbed.qdisc_netlink import _NLH, _TCM, NLM_F_DUMP, NLM_F_REQUEST, RTM_GETQDISC, LeafSampler, QdiscReader  # noqa: E402
from testbed.records import JsonLines  # noqa: E402

CLONE_NEWNET = 0x40000000


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the usage too)
        print(f"collector_cost: {message}", file=sys.stderr)
        sys.exit(2)


def sh(*cmd, stdin=None) -> str:
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed ({p.returncode}): {p.stderr.strip()[:300]}")
    return p.stdout


def setns(fd: int) -> None:
    """Move this thread into the network namespace of `fd` (os.setns needs Python 3.12)."""
    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET):
        raise OSError(ctypes.get_errno(), "setns")


class Bench:
    """The namespace and its N shaped ports; close() removes what this run created, only that."""

    def __init__(self):
        self.ns = f"zlabbench-coll-{os.getpid()}"
        self.peer_ns = self.ns + "-peers"
        self.created = self.peer_created = False

    def setup(self, ports: int, clsact: bool, rate: str, limit: int, peers_apart: bool) -> None:
        sh("ip", "netns", "add", self.ns)
        self.created = True
        peer_ns = self.ns
        if peers_apart:  # as in zlab: a switch port's peer is a host's NIC, in the host's namespace
            sh("ip", "netns", "add", self.peer_ns)
            self.peer_created = True
            peer_ns = self.peer_ns
        where = f" netns {peer_ns}" if peers_apart else ""
        links = [f"link add c{i} type veth peer name p{i}{where}" for i in range(ports)]
        links += [f"link set c{i} up" for i in range(ports)]
        sh("ip", "-n", self.ns, "-batch", "-", stdin="\n".join(links) + "\n")
        sh("ip", "-n", peer_ns, "-batch", "-", stdin="".join(f"link set p{i} up\n" for i in range(ports)))
        tc = []
        for i in range(ports):  # testbed/emulation/config.py tc_commands(), ecn.py attach_many()
            tc += [
                f"qdisc replace dev c{i} root handle 1: htb default 1",
                f"class replace dev c{i} parent 1: classid 1:1 htb rate {rate} ceil {rate} burst 1600 cburst 1600 quantum 1538",
                f"qdisc replace dev c{i} parent 1:1 handle 10: pfifo limit {limit}",
            ]
            if clsact:
                tc.append(f"qdisc add dev c{i} clsact")
        sh("tc", "-n", self.ns, "-batch", "-", stdin="\n".join(tc) + "\n")
        links = json.loads(sh("ip", "-n", self.ns, "-j", "link", "show"))
        by_name = {x["ifname"]: x["ifindex"] for x in links}
        self.ifindex = [by_name[f"c{i}"] for i in range(ports)]
        self.qdiscs = len(json.loads(sh("tc", "-n", self.ns, "-j", "qdisc", "show")))

    def enter(self) -> int:
        """Enter the namespace (this thread); returns an fd of the original one to come back."""
        back = os.open("/proc/self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            setns(fd)
        finally:
            os.close(fd)
        return back

    def close(self) -> None:
        gone = False
        if self.created:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=120)
            self.created, gone = False, True
        if self.peer_created:
            subprocess.run(["ip", "netns", "del", self.peer_ns], capture_output=True, timeout=120)
            self.peer_created, gone = False, True
        if gone:
            wait_idle()


def wait_idle(max_s: float = 30.0) -> None:
    """The kernel dismantles a deleted namespace's veths in a workqueue after `ip netns del`
    returns (seconds of CPU for thousands); wait for the machine to go quiet, so that work
    happens inside our lock hold. (Deleting the links one by one first took 22 s.)"""
    t_end = time.monotonic() + max_s
    busy0, _, cores = machine_cpu()
    while time.monotonic() < t_end:
        time.sleep(0.5)
        busy1, _, _ = machine_cpu()
        if busy1 - busy0 < 0.5 * 0.25:  # under a quarter of one core over the last half second
            return
        busy0 = busy1


def send_frames(dev: str, count: int, size: int = 1000) -> None:
    """Queue `count` broadcast frames on `dev` (an AF_PACKET send passes the egress qdisc)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((dev, 0))
    frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x88\xb5" + bytes(size - 14)
    for _ in range(count):
        try:
            s.send(frame)
        except OSError as e:  # ENOBUFS: the qdisc dropped it, which is what a full pfifo does
            if e.errno != errno.ENOBUFS:
                raise
    s.close()


def capture(path: str) -> int:
    """Save the raw bytes of one RTM_GETQDISC dump (all chunks, concatenated) for an offline test."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.bind((0, 0))
    s.send(_NLH.pack(_NLH.size + _TCM.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + _TCM.pack(0, 0, 0, 0, 0))
    out = b""
    while True:
        chunk = s.recv(1 << 16)
        out += chunk
        if _NLH.unpack_from(chunk, len(chunk) - 20 if len(chunk) >= 20 else 0)[1] == 3 or not chunk:  # NLMSG_DONE
            break
    s.close()
    Path(path).write_bytes(out)
    return len(out)


def timed(fns: dict, samples: int, period_s: float) -> dict:
    """Call every fn once per round, `samples` rounds paced at period_s; per fn: CPU and wall
    per call, user/system split. Interleaved, so that every implementation sees the same
    machine (this VM's speed drifts by tens of percent over a minute)."""
    cpu = {k: [] for k in fns}
    wall = {k: [] for k in fns}
    user = dict.fromkeys(fns, 0.0)
    system = dict.fromkeys(fns, 0.0)
    t_next = time.monotonic()
    for _ in range(samples):
        now = time.monotonic()
        if now < t_next:
            time.sleep(t_next - now)
        for k, fn in fns.items():
            r0 = resource.getrusage(resource.RUSAGE_THREAD)
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            fn()
            cpu[k].append(time.thread_time_ns() - c0)
            wall[k].append(time.perf_counter_ns() - w0)
            r1 = resource.getrusage(resource.RUSAGE_THREAD)
            user[k] += r1.ru_utime - r0.ru_utime
            system[k] += r1.ru_stime - r0.ru_stime
        t_next += period_s
    out = {}
    for k in fns:
        q = statistics.quantiles(cpu[k], n=10)
        out[k] = {
            "cpu_ms_median": statistics.median(cpu[k]) / 1e6,
            "cpu_ms_p10": q[0] / 1e6,
            "cpu_ms_p90": q[-1] / 1e6,
            "wall_ms_median": statistics.median(wall[k]) / 1e6,
            "user_ms_mean": user[k] * 1e3 / samples,
            "system_ms_mean": system[k] * 1e3 / samples,
        }
    return out


@contextlib.contextmanager
def heavy_lock(path: str, wait_s: float = 300.0):
    """Hold an exclusive flock on `path` (shared with other CPU-sensitive measurements on this
    machine) while building, timing and removing the namespace; an empty path takes none.
    Polls rather than blocks, so a caller that already holds it (flock(1) around this script:
    a second open file description) gets an error instead of a deadlock."""
    if not path:
        yield
        return
    with open(path, "a") as lk:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{path} stayed locked for {wait_s:.0f} s (already held by our caller?)"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(lk, fcntl.LOCK_UN)


def run(args) -> dict:
    t0 = time.monotonic()
    with heavy_lock(args.lock):
        t1 = time.monotonic()
        try:
            return _run(args)
        finally:
            print(
                f"collector_cost: waited {t1 - t0:.1f} s for the lock, held it {time.monotonic() - t1:.1f} s",
                file=sys.stderr,
            )


def _run(args) -> dict:
    bench = Bench()
    try:
        t = time.monotonic()
        bench.setup(args.ports, not args.no_clsact, args.rate, args.limit, args.peers_apart)
        print(f"collector_cost: setup {time.monotonic() - t:.1f} s", file=sys.stderr)
        back = bench.enter()
        try:
            if args.traffic:
                for i in range(args.ports):
                    send_frames(f"c{i}", args.traffic + i)
            if args.capture:
                return {"captured_bytes": capture(args.capture), "ifindex": " ".join(map(str, bench.ifindex))}
            old = QdiscReader()
            new = LeafSampler(bench.ifindex, LEAF_HANDLE, LEAF_KINDS)
            for r in (old, new):
                r.sock.settimeout(5)  # a reply that never comes is an error, not a hang
        finally:
            setns(back)
            os.close(back)
        keys = [(i, LEAF_HANDLE) for i in bench.ifindex]

        def old_sample():
            stats = old.dump(LEAF_KINDS)
            vals = [stats.get(k) for k in keys]
            if any(v is None for v in vals):
                raise RuntimeError("old reader lost a queue")
            return {
                "b": [v[4] for v in vals],
                "q": [v[3] for v in vals],
                "d": [v[5] for v in vals],
                "x": [v[1] for v in vals],
            }

        def new_sample():
            x, q, b, d = new.sample()
            if None in b:
                raise RuntimeError("new sampler lost a queue")
            return {"b": b, "q": q, "d": d, "x": x}

        a, b = old_sample(), new_sample()
        if a != b:
            raise RuntimeError("old and new disagree on the sampled counters")
        out = {"ports": args.ports, "qdiscs_in_dump": bench.qdiscs, "samples": args.samples}
        with tempfile.TemporaryDirectory(prefix="zlabbench-coll-") as tmp:
            jl = JsonLines(os.path.join(tmp, "queues.jsonl"), compact=True)
            rec = {"t_ns": time.monotonic_ns(), "dump_ns": 1234567, **a}
            period = args.period_ms / 1e3
            every = {"old": old_sample, "new": new_sample, "json": lambda: jl.write(rec)}
            out.update(timed({k: every[k] for k in args.impl.split(",")}, args.samples, period))
            out["json_line_bytes"] = len(json.dumps(rec, sort_keys=True, separators=(",", ":"))) + 1
            jl.close()
        old.close()
        new.close()
        return out
    finally:
        t = time.monotonic()
        bench.close()
        print(f"collector_cost: teardown {time.monotonic() - t:.1f} s", file=sys.stderr)


def main(argv=None) -> int:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", type=int, default=1024, help="shaped ports (veth pairs), 1..4096")
    ap.add_argument("--samples", type=int, default=300, help="samples per implementation")
    ap.add_argument("--period-ms", type=float, default=10.0, help="pacing between samples (collector: 10)")
    ap.add_argument("--impl", default="old,new,json", help="comma list of old, new, json")
    ap.add_argument("--no-clsact", action="store_true", help="leave out the ECN marker's clsact qdisc")
    ap.add_argument(
        "--peers-apart",
        action="store_true",
        help="veth peers in a second namespace (zlab's layout: no noqueue peers in the dump)",
    )
    ap.add_argument("--rate", default="1gbit", help="htb rate of every port")
    ap.add_argument("--limit", type=int, default=1000, help="pfifo limit (packets)")
    ap.add_argument("--traffic", type=int, default=0, help="queue N+i frames on port i before sampling")
    ap.add_argument("--capture", metavar="PATH", help="only save one dump's raw netlink bytes to PATH")
    ap.add_argument("--lock", default="/tmp/zlab-heavy.lock", help="flock held for the whole run; '' for none")
    ap.add_argument("--max-s", type=int, default=150, help="stop (and clean up) after this many seconds")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    if not 1 <= args.ports <= 4096:
        ap.error(f"--ports must be 1..4096, not {args.ports}")
    if args.samples < 10:
        ap.error(f"--samples must be at least 10, not {args.samples}")
    if args.period_ms < 0 or args.traffic < 0 or args.limit < 1:
        ap.error("--period-ms and --traffic must be >= 0 and --limit >= 1")
    bad = set(args.impl.split(",")) - {"old", "new", "json"}
    if bad:
        ap.error(f"unknown --impl {sorted(bad)}: choose from old, new, json")
    if os.geteuid():
        ap.error("needs root (it creates a network namespace)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the finally: cleanup
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("collector_cost: over --max-s, stopped (cleaned up)"))
    signal.alarm(args.max_s)
    try:
        out = run(args)
    except (RuntimeError, TimeoutError, OSError) as e:
        print(f"collector_cost: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            if isinstance(v, dict):
                print(f"{k:5} " + "  ".join(f"{kk}={vv:.3f}" for kk, vv in v.items()))
            else:
                print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
