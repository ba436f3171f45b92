"""Queue and CPU collector: its own process, sampling every switch egress queue.

Raw, append-only JSON lines: raw/queues.jsonl (a header naming the ports, then one line per
sample with backlog bytes, queue packets, drops and sent bytes of every port's pfifo leaf)
and raw/cpu.jsonl (CPU seconds of ovs-vswitchd, the agent and this collector, and the busy
seconds of the whole machine over all its cores). Late samples are counted, not hidden: a
stall counts every sampling period it missed.

    python -m testbed.measure.collector PORTS_JSON OUT_DIR --period-ms 10 --pid ovs=N --pid agent=M
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from ..qdisc_netlink import LeafSampler
from ..records import JsonLines

LEAF_HANDLE = 0x00100000  # tc handle "10:" (hex major 0x10): the leaf under htb class 1:1
LEAF_KINDS = (b"pfifo", b"tbf")  # tbf: the lossless mode's gate (testbed/emulation/tbf_netlink.py)


def cpu_seconds(pid: int) -> float | None:
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float, int]:
    """(busy seconds summed over all cores, of which stolen by the hypervisor, cores), /proc/stat."""
    with open("/proc/stat") as fh:
        head = fh.readline().split()
        cores = sum(1 for line in fh if line.startswith("cpu"))
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in head[1:9])
    tck = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq + steal) / tck, steal / tck, cores


def cpu_record(pids: dict) -> dict:
    """CPU counters with the time they were read at. Why the time is read here, not passed in: the
    loop's time is taken before the queue dump, which on a saturated machine can take a large part
    of the 250 ms period, so rates over records stamped with it overstated the busiest interval
    (a 1,024-GPU replay reported the machine at 154 % of its cores)."""
    now = time.monotonic_ns()
    busy, steal, cores = machine_cpu()
    return {
        "t_ns": now,
        "machine_busy_s": busy,
        "machine_steal_s": steal,
        "cores": cores,
        **{f"{k}_cpu_s": cpu_seconds(p) for k, p in pids.items()},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ports_json", help="JSON list of switch port interface names to sample")
    ap.add_argument("out_dir")
    ap.add_argument("--period-ms", type=float, default=10.0)
    ap.add_argument("--cpu-period-ms", type=float, default=250.0)
    ap.add_argument("--pid", action="append", default=[], metavar="NAME=PID")
    args = ap.parse_args(argv)
    ports = json.loads(open(args.ports_json).read())
    ifindex = [int(open(f"/sys/class/net/{p}/ifindex").read()) for p in ports]
    pids = {k: int(v) for k, v in (x.split("=", 1) for x in args.pid)}
    pids["collector"] = os.getpid()
    os.makedirs(args.out_dir, exist_ok=True)
    qf = JsonLines(os.path.join(args.out_dir, "queues.jsonl"), compact=True)
    cf = JsonLines(os.path.join(args.out_dir, "cpu.jsonl"), compact=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    sampler = LeafSampler(ifindex, LEAF_HANDLE, LEAF_KINDS)  # 2.1-2.3x less CPU than QdiscReader.dump at 1,024 ports
    period = int(args.period_ms * 1e6)
    qf.write(
        {
            "type": "header",
            "ports": ports,
            "ifindex": ifindex,
            "period_ms": args.period_ms,
            "leaf_handle": "10:",
            "clock": "CLOCK_MONOTONIC",
        }
    )
    t_next = time.monotonic_ns()
    t_cpu = 0
    late = samples = 0
    while not stop:
        now = time.monotonic_ns()
        if now < t_next:
            time.sleep((t_next - now) / 1e9)
            now = time.monotonic_ns()
        if now - t_next > period:
            late += (now - t_next) // period  # every period the stall swallowed, counted once
            t_next = now
        sent, qlen, backlog, drops = sampler.sample()
        dump_ns = time.monotonic_ns() - now  # the counters were read somewhere in [now, now + dump_ns]
        if None in backlog:
            missing = [ports[i] for i, v in enumerate(backlog) if v is None]
            print(f"collector: queues vanished: {missing[:4]}", file=sys.stderr)
            break
        qf.write({"t_ns": now, "dump_ns": dump_ns, "b": backlog, "q": qlen, "d": drops, "x": sent})
        samples += 1
        if now >= t_cpu:
            cf.write(cpu_record(pids))
            t_cpu = now + int(args.cpu_period_ms * 1e6)
        t_next += period
    sampler.close()
    qf.write({"type": "footer", "samples": samples, "late": late})
    qf.close()
    cf.write(cpu_record(pids))
    cf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
