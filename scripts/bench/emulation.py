#!/usr/bin/env python3
"""Benchmark fabric bring-up (not a test; needs root and a provisioned lab).

For each fabric: zlab's build time, time until every table is installed, time until every
GPU port pair is reachable, flow entries per switch, teardown time, peak memory (the drop of
MemAvailable from before the bring-up, sampled every 0.5 s, and ovs-vswitchd's peak RSS) and
ovs-vswitchd's CPU while the fabric stands idle — and plain Mininet building the same topology
(same switches, hosts and links; userspace OVS, no controller, so its switches in Mininet's default
secure fail mode; no shaping, no host configuration) as the baseline, with the ratio.

    sudo .venv/bin/python scripts/bench/emulation.py [--json] [--costs FILE] [SPEC ...]
    sudo .venv/bin/python scripts/bench/emulation.py --sizes --costs testbed/emulation/size_costs.json

--sizes runs 256 and 1,024 GPUs of both fabrics. --costs merges each fabric's measurement into
the per-size cost record `zlab doctor --capacity`, `zlab up --dry-run` and `zlab run --dry-run` predict
from (testbed/emulation/sizing.py); a fabric that failed to come up is recorded with its error.
"""

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

DEFAULT = (
    "zcube:n=4",
    "zcube:n=8",
    "roft:gpus=16,gpus_per_server=4,segments=2",
    "roft:gpus=64,gpus_per_server=8,segments=2",
)
SIZES = (
    "zcube:n=16",
    "roft:gpus=256,gpus_per_server=8,segments=2",
    "zcube:n=32",
    "roft:gpus=1024,gpus_per_server=8,radix=64,tiers=2",
)
OVS_PIDFILE = "/var/run/openvswitch/ovs-vswitchd.pid"


def mem_available() -> int:
    """MemAvailable, bytes."""
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def ovs_pid() -> int:
    return int(open(OVS_PIDFILE).read().strip())


def rss(pid: int) -> int:
    """Resident set size, bytes (0 when the process is gone)."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


class MemoryPeak:
    """Samples MemAvailable and ovs-vswitchd's RSS every interval_s on a thread, from start to stop."""

    def __init__(self, interval_s: float = 0.5):
        self.interval_s = interval_s
        self.baseline = mem_available()
        self.low = self.baseline
        self.ovs_rss_peak = 0
        self.ovs_rss_baseline = rss(ovs_pid())
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        pid = ovs_pid()
        while not self._stop.is_set():
            self.low = min(self.low, mem_available())
            self.ovs_rss_peak = max(self.ovs_rss_peak, rss(pid))
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def result(self) -> dict:
        return {
            "peak_memory_bytes": self.baseline - self.low,
            "mem_available_before_bytes": self.baseline,
            "ovs_rss_peak_bytes": self.ovs_rss_peak,
            "ovs_rss_before_bytes": self.ovs_rss_baseline,
        }


def idle_cpu(idle_s: float) -> float:
    """ovs-vswitchd's CPU, in cores, over idle_s seconds with the fabric up and no traffic."""
    if idle_s <= 0:
        return float("nan")
    pid = ovs_pid()
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(idle_s)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


def zlab_bringup(spec: str, idle_s: float = 0.0) -> dict:
    from testbed.emulation.config import EmulationConfig
    from testbed.emulation.up import LiveFabric

    with tempfile.TemporaryDirectory() as d, MemoryPeak() as mem:
        live = LiveFabric(spec, EmulationConfig(), results_dir=d, log=lambda *_: None)
        with live:
            flows = json.loads((live.dir / "flows.json").read_text())["switches"]
            per_switch = [len(v["entries"]) + 2 for v in flows.values()]
            reach = live.reach
            ovs_idle = idle_cpu(idle_s)
        t = live.timings_s
    return {
        **mem.result(),
        "ovs_idle_cores": ovs_idle,
        "phases_s": {k: t[k] for k in ("mininet_build", "configure", "start") if k in t},
        "build_s": t["build_total"],
        "tables_s": t["tables_installed"],
        "reachable_s": t["reachability"],
        "ready_s": t["build_total"] + t["tables_installed"] + t["reachability"],
        "teardown_s": t["teardown"],
        "pairs": reach["pairs"],
        "reachable": reach["reachable"],
        "proof": {
            "method": reach.get("proof"),
            "probes_sent": reach.get("probes_sent"),
            "prepare_s": reach.get("prepare_seconds"),
            "rounds": reach["rounds"],
            "cover": reach.get("cover"),
        },
        "entries_per_switch": {"min": min(per_switch), "median": statistics.median(per_switch), "max": max(per_switch)},
    }


def plain_mininet(spec: str, idle_s: float = 0.0) -> dict:
    from mininet.link import Link
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch

    from testbed.fabric import build_fabric
    from testbed.lab.state import datapath

    setLogLevel("warning")
    fab = build_fabric(spec)
    t0 = time.perf_counter()
    net = Mininet(topo=None, build=False, controller=None, link=Link, autoSetMacs=False)
    for g in fab.gpus:
        net.addHost(g.name, ip=None)
    for sw in fab.switches:
        net.addSwitch(
            sw.name,
            cls=OVSSwitch,
            dpid=f"{sw.dpid:016x}",
            # Mininet's default: with no controller a switch forwards nothing. Standalone (learning)
            # switches flood every broadcast around ZCube's loops: at 256 GPUs ovs-vswitchd idled at a
            # whole core, at 1,024 GPUs the 23rd of 64 bridges' start waited 25 min and never finished
            failMode="secure",
            datapath="user" if datapath() == "netdev" else "kernel",
            batch=True,  # what Mininet does when built from a Topo; a 64-port switch's start overflows its pty
        )
    for l in fab.links:
        pa, pb = fab.ports[l.a], fab.ports[l.b]
        net.addLink(
            net.get(fab.nodes[pa.node].name),
            net.get(fab.nodes[pb.node].name),
            port1=pa.number,
            port2=pb.number,
            intfName1=pa.name,
            intfName2=pb.name,
        )
    with MemoryPeak() as mem:
        try:
            net.build()
            net.start()
            up = time.perf_counter() - t0
            ovs_idle = idle_cpu(idle_s)
        finally:
            t1 = time.perf_counter()
            net.stop()
    return {"ready_s": up, "teardown_s": time.perf_counter() - t1, "ovs_idle_cores": ovs_idle, **mem.result()}


def size_of(spec: str) -> dict:
    from testbed.fabric import build_fabric

    fab = build_fabric(spec)
    return {
        "gpus": fab.n_gpus,
        "switches": len(fab.switches),
        "links": len(fab.links),
        "switch_ports": sum(1 for p in fab.ports if fab.nodes[p.node].role == "switch"),
    }


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return f"{platform.node() or 'host'}: {cpu}, {os.cpu_count()} cores, {mem_total() / 2**30:.1f} GiB"


def mem_total() -> int:
    return next(int(ln.split()[1]) * 1024 for ln in open("/proc/meminfo") if ln.startswith("MemTotal:"))


def git_sha() -> str | None:
    """HEAD when the bench started, "-dirty" when the code it runs differs from it."""
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        # the cost record this bench writes is not code: without the exclusion its own rows read "-dirty"
        [
            "git",
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "testbed",
            "controllers",
            "traffic",
            "scripts",
            ":(exclude)testbed/emulation/size_costs.json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (r.stdout.strip() + ("-dirty" if dirty else "")) or None


STARTED_AT_SHA = git_sha()


BENCH_STARTED = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_costs(path: Path, rows: list[dict], command: str) -> None:
    """Merge rows into the cost record: one entry per spec, the newest measurement wins, and the
    one it replaces goes to the front of its `earlier` list (a measurement another bench run made;
    this run's own first write, before its baseline, is simply updated), so nothing measured is lost."""
    rec = json.loads(path.read_text()) if path.exists() else {"source": "scripts/bench/emulation.py", "points": []}
    by_spec = {p["spec"]: p for p in rec["points"]}
    stamp = {
        "command": command,
        "started": BENCH_STARTED,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_sha": STARTED_AT_SHA,
        "machine": machine(),
        "mem_total_bytes": mem_total(),
        "cores": os.cpu_count(),
    }
    for r in rows:
        prev = by_spec.get(r["spec"])
        earlier = []
        if prev is not None:
            earlier = prev.pop("earlier", [])
            if prev.get("started") != BENCH_STARTED:
                earlier = [prev, *earlier]
        by_spec[r["spec"]] = {**r, **stamp, **({"earlier": earlier} if earlier else {})}
    rec["points"] = sorted(by_spec.values(), key=lambda p: (p["links"], p["spec"]))
    path.write_text(json.dumps(rec, indent=1) + "\n")


def show_costs(path: Path) -> None:
    """The cost record as a markdown table (docs/emulation.md "What fits this machine")."""
    rec = json.loads(path.read_text())
    print(
        "| fabric | GPUs | switches | links | build s | tables s | reachability s | ready s | teardown s "
        "| peak memory GiB | ovs-vswitchd RSS growth GiB | ovs-vswitchd idle cores | plain Mininet up s | ready / plain |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in rec["points"]:
        z, pm = p["zlab"], p.get("plain_mininet", {})
        head = f"| `{p['spec']}` | {p['gpus']:,} | {p['switches']} | {p['links']:,} |"
        plain = (
            f" {pm['ready_s']:.1f} | {p['ready_ratio']:.2f}× |" if "ready_s" in pm and "ready_s" in z else " — | — |"
        )

        def cell(key, f="{:.1f}", scale=1.0, z=z):
            return f.format(z[key] / scale) if key in z else "—"

        growth = (
            f"{(z['ovs_rss_peak_bytes'] - z['ovs_rss_before_bytes']) / 2**30:.2f}" if "ovs_rss_peak_bytes" in z else "—"
        )
        if "error" in z:
            reach = f"**not proven**: {z['error']}"
        else:
            pairs = "" if z["reachable"] == z["pairs"] else f" ({z['reachable']:,}/{z['pairs']:,} pairs)"
            reach = f"{z['reachable_s']:.1f}{pairs}"
        print(
            f"{head} {cell('build_s')} | {cell('tables_s')} | {reach} | {cell('ready_s')} | {cell('teardown_s')} |"
            f" {cell('peak_memory_bytes', '{:.2f}', 2**30)} | {growth} | {cell('ovs_idle_cores', '{:.2f}')} |{plain}"
        )
    dates = sorted({(p["date"][:10], (p["git_sha"] or "?")[:7]) for p in rec["points"]})
    machines = sorted({p["machine"] for p in rec["points"]})
    print(
        f"\n*From `{path.relative_to(REPO) if path.is_relative_to(REPO) else path}`: measured "
        + ", ".join(f"{d} (git `{g}`)" for d, g in dates)
        + f" on {'; '.join(machines)}, by "
        + " and ".join(sorted({f"`{p['command']}`" for p in rec["points"]}))
        + "."
        " Peak memory: the largest drop of MemAvailable from before the bring-up to any moment of bring-up, hold"
        " and teardown (other jobs move it by tens of MB); ovs-vswitchd RSS growth: its peak RSS minus its RSS before"
        " (it keeps memory it once used); ovs-vswitchd idle: its cores over 5 s with the fabric up, no traffic"
        " but the controller's statistics.*"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--sizes", action="store_true", help="256 and 1,024 GPUs of both fabrics: " + ", ".join(SIZES))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--idle-s", type=float, default=5.0, help="how long ovs-vswitchd's idle CPU is measured, s")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain-Mininet baseline")
    ap.add_argument("--costs", type=Path, help="merge the measurements into this cost record (JSON)")
    ap.add_argument("--show-costs", type=Path, metavar="FILE", help="print a cost record as a table; measure nothing")
    args = ap.parse_args()
    if args.show_costs:
        show_costs(args.show_costs.resolve())
        return
    specs = args.specs or list(SIZES if args.sizes else DEFAULT)
    rows = []
    command = "flock /tmp/zlab-heavy.lock .venv/bin/python " + " ".join(sys.argv)
    for spec in specs:
        row = {"spec": spec, **size_of(spec)}
        try:
            row["zlab"] = zlab_bringup(spec, args.idle_s)
        except Exception as exc:  # a size that does not fit: record what failed, go on
            row["zlab"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        if args.costs:  # before the baseline: a baseline that hangs loses nothing of zlab's measurement
            write_costs(args.costs, [row], command)
        if not args.no_plain:
            try:
                row["plain_mininet"] = plain_mininet(spec, args.idle_s)
            except Exception as exc:
                row["plain_mininet"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            if "ready_s" in row["zlab"] and "ready_s" in row["plain_mininet"]:
                row["ready_ratio"] = row["zlab"]["ready_s"] / row["plain_mininet"]["ready_s"]
        rows.append(row)
        if args.costs:  # after every fabric: a later one that hangs loses nothing
            write_costs(args.costs, [row], command)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'fabric':<44} {'build':>6} {'tables':>7} {'reach':>6} {'ready':>6} {'down':>5} {'entries/sw':>12}"
        f" {'pairs':>9} {'mem GiB':>7} {'ovs idle':>8} | {'plain up':>8} {'down':>5} {'mem GiB':>7} {'ratio':>6}"
    )
    for r in rows:
        z, p = r["zlab"], r.get("plain_mininet", {})
        if "error" in z:
            print(f"{r['spec']:<44} failed: {z['error']}")
            continue
        e = z["entries_per_switch"]
        plain = (
            f" {p['ready_s']:>8.1f} {p['teardown_s']:>5.1f} {p['peak_memory_bytes'] / 2**30:>7.2f}"
            f" {r['ready_ratio']:>5.1f}x"
            if "ready_s" in p
            else f" {p.get('error', 'not run')}"
        )
        print(
            f"{r['spec']:<44} {z['build_s']:>6.1f} {z['tables_s']:>7.1f} {z['reachable_s']:>6.1f} {z['ready_s']:>6.1f}"
            f" {z['teardown_s']:>5.1f} {e['min']:>4}-{e['max']:<7} {z['reachable']:>4}/{z['pairs']:<4}"
            f" {z['peak_memory_bytes'] / 2**30:>7.2f} {z['ovs_idle_cores']:>8.2f} |{plain}"
        )
    print(
        "\nseconds; ready = build + tables installed + all pairs reachable; ratio = zlab ready / plain Mininet up;"
        "\nmem = peak drop of MemAvailable during bring-up, hold and teardown; ovs idle = ovs-vswitchd cores, fabric up"
    )


if __name__ == "__main__":
    main()
