#!/usr/bin/env python3
"""Datapath benchmark (not a test; needs root and OVS): frames per second forwarded through a
chain of 2 or 3 OVS bridges, 1 KB and 4 KB frames, per datapath option, with htb shaping and
queue sampling on, CPU per daemon — and whether each option still honours the shaper.

Why: how faithfully zlab can emulate is bounded by the frames per core-second the datapath
forwards (docs/experiments.md "Scaling planner"); an option that forwards faster but lets frames bypass the
egress qdisc would make queues and rates fiction, so the shaping check is part of the result.

Options: `system` (today's ports: the userspace datapath receives and sends through AF_PACKET),
`afxdp-nonpmd` (OVS AF_XDP ports, generic XDP, served by the main thread), `afxdp` (AF_XDP with a
PMD thread pinned to one core), `kernel` (datapath_type=system; only where the openvswitch module
exists). Everything it creates is named zdp<pid>* and removed in `finally`.

    sudo .venv/bin/python scripts/bench/datapath.py [--json] [--options system,afxdp-nonpmd]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from testbed.measure.collector import LEAF_HANDLE, cpu_seconds, machine_cpu  # noqa: E402
from testbed.qdisc_netlink import QdiscReader  # noqa: E402

OPTIONS = ("system", "afxdp-nonpmd", "afxdp", "kernel")
ETH_IP_UDP = 14 + 20 + 8


def sh(*cmd, check=True, timeout=60, **kw) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[:300]}")
    return p.stdout


def vswitchd_pid() -> int:
    return int(Path("/var/run/openvswitch/ovs-vswitchd.pid").read_text().strip())


def machine_busy_s() -> tuple[float, float]:
    """(busy CPU seconds without steal, stolen seconds) of the whole machine (the collector's reader)."""
    busy, steal, _ = machine_cpu()
    return busy - steal, steal


def kernel_datapath_available() -> bool:
    return Path("/sys/module/openvswitch").exists()


class Chain:
    """Host A -- S1 -- ... -- Sk -- host B, one veth per cable, static forwarding, htb on every
    switch egress port. Registry of what it made; remove() deletes exactly that."""

    def __init__(self, hops: int, option: str, mtu: int, rate_mbps: float, queue_pkts: int = 1000):
        self.tag = f"zdp{os.getpid() % 100000}"
        self.hops, self.option, self.mtu, self.rate_mbps, self.queue_pkts = hops, option, mtu, rate_mbps, queue_pkts
        self.netns, self.bridges, self.veths = [], [], []
        self.switch_ports: list[str] = []
        self.saved_pmd_mask = None

    def build(self) -> None:
        t = self.tag
        for h in ("a", "b"):
            sh("ip", "netns", "add", f"{t}{h}")
            self.netns.append(f"{t}{h}")
        dp = "system" if self.option == "kernel" else "netdev"
        if self.option == "afxdp":
            self.saved_pmd_mask = (
                sh("ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", "other_config:pmd-cpu-mask").strip() or None
            )
            sh("ovs-vsctl", "set", "Open_vSwitch", ".", "other_config:pmd-cpu-mask=0x2")
        for i in range(self.hops):
            br = f"{t}s{i}"
            sh(
                "ovs-vsctl",
                "add-br",
                br,
                "--",
                "set",
                "bridge",
                br,
                f"datapath_type={dp}",
                "fail_mode=secure",
                "protocols=OpenFlow13",
            )
            self.bridges.append(br)
        # cables: a-s0, s0-s1, ..., s(k-1)-b; switch ends are <br>p1 (towards a) and <br>p2 (towards b)
        ends = [(f"{t}ha", "a")] + [(f"{t}s{i}", None) for i in range(self.hops)] + [(f"{t}hb", "b")]
        for (left, lh), (right, rh) in zip(ends, ends[1:]):
            l_if = f"{left}e" if lh else f"{left}p2"
            r_if = f"{right}e" if rh else f"{right}p1"
            sh(
                "ip",
                "link",
                "add",
                l_if,
                "mtu",
                str(self.mtu),
                "type",
                "veth",
                "peer",
                "name",
                r_if,
                "mtu",
                str(self.mtu),
            )
            self.veths.append(l_if)
            for ifname, host in ((l_if, lh), (r_if, rh)):
                sh("ethtool", "-K", ifname, "tx", "off")
                if host:
                    sh("ip", "link", "set", ifname, "netns", f"{t}{host}")
                    ns = ["ip", "netns", "exec", f"{t}{host}"]
                    addr = "10.99.0.1" if host == "a" else "10.99.0.2"
                    sh(*ns, "ip", "addr", "add", f"{addr}/24", "dev", ifname)
                    sh(*ns, "ip", "link", "set", ifname, "up")
                    sh(*ns, "ip", "link", "set", "lo", "up")
                else:
                    sh("ip", "link", "set", ifname, "up")
                    self.switch_ports.append(ifname)
        for br in self.bridges:
            for num, port in ((1, f"{br}p1"), (2, f"{br}p2")):
                extra = []
                if self.option in ("afxdp", "afxdp-nonpmd"):
                    extra = ["--", "set", "Interface", port, f"type={self.option}", "options:xdp-mode=generic"]
                sh("ovs-vsctl", "add-port", br, port, "--", "set", "Interface", port, f"ofport_request={num}", *extra)
            sh("ovs-ofctl", "-O", "OpenFlow13", "add-flow", br, "in_port=1,actions=output:2")
            sh("ovs-ofctl", "-O", "OpenFlow13", "add-flow", br, "in_port=2,actions=output:1")
        for port in self.switch_ports:  # after add-port: OVS may reset qdiscs when it adds ports
            self.shape(port, self.rate_mbps)
        for h, peer in (("a", "10.99.0.2"), ("b", "10.99.0.1")):
            mac = sh(
                "ip",
                "netns",
                "exec",
                f"{t}{'b' if h == 'a' else 'a'}",
                "cat",
                f"/sys/class/net/{t}h{'b' if h == 'a' else 'a'}e/address",
            ).strip()
            sh(
                "ip",
                "netns",
                "exec",
                f"{t}{h}",
                "ip",
                "neigh",
                "replace",
                peer,
                "lladdr",
                mac,
                "dev",
                f"{t}h{h}e",
                "nud",
                "permanent",
            )

    def shape(self, port: str, rate_mbps: float) -> None:
        burst = self.mtu + 100
        sh("tc", "qdisc", "del", "dev", port, "root", check=False)  # re-shaping: start from the default qdisc
        sh("tc", "qdisc", "add", "dev", port, "root", "handle", "1:", "htb", "default", "1")
        sh(
            "tc",
            "class",
            "replace",
            "dev",
            port,
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            f"{rate_mbps}mbit",
            "ceil",
            f"{rate_mbps}mbit",
            "burst",
            str(burst),
            "cburst",
            str(burst),
        )
        sh(
            "tc",
            "qdisc",
            "replace",
            "dev",
            port,
            "parent",
            "1:1",
            "handle",
            "10:",
            "pfifo",
            "limit",
            str(self.queue_pkts),
        )

    @property
    def forward_ports(self) -> list[str]:
        """The switch egress ports carrying a -> b (each bridge's p2)."""
        return [f"{br}p2" for br in self.bridges]

    def ifindex(self, port: str) -> int:
        return int(Path(f"/sys/class/net/{port}/ifindex").read_text())

    def remove(self) -> None:
        for br in self.bridges:
            sh("ovs-vsctl", "--if-exists", "del-br", br, check=False)
        for v in self.veths:
            sh("ip", "link", "del", v, check=False)
        for ns in self.netns:
            sh("ip", "netns", "del", ns, check=False)
        if self.option == "afxdp":
            if self.saved_pmd_mask:
                sh(
                    "ovs-vsctl",
                    "set",
                    "Open_vSwitch",
                    ".",
                    f"other_config:pmd-cpu-mask={self.saved_pmd_mask}",
                    check=False,
                )
            else:
                sh("ovs-vsctl", "remove", "Open_vSwitch", ".", "other_config", "pmd-cpu-mask", check=False)


def blast(chain: Chain, frame_bytes: int, offered_mbps: float, seconds: float) -> dict:
    """iperf3 UDP from host a to host b at offered_mbps; ovs-vswitchd and machine CPU over the
    same interval; the egress queues sampled every 10 ms."""
    t = chain.tag
    server = subprocess.Popen(
        ["ip", "netns", "exec", f"{t}b", "iperf3", "-s", "-1", "-p", "5299"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    peak_backlog, stop = [0], threading.Event()
    reader = QdiscReader()  # one netlink dump per sample, as zlab's collector does
    keys = [(chain.ifindex(p), LEAF_HANDLE) for p in chain.forward_ports]

    def pfifo() -> dict:
        stats = reader.dump(b"pfifo")
        return {k: stats[k] for k in keys}

    def sample():
        while not stop.is_set():
            peak_backlog[0] = max([peak_backlog[0]] + [v[3] for v in pfifo().values()])
            stop.wait(0.01)

    before = pfifo()
    pid = vswitchd_pid()
    o0, (m0, s0), w0 = cpu_seconds(pid), machine_busy_s(), time.monotonic()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out = sh(
            "ip",
            "netns",
            "exec",
            f"{t}a",
            "iperf3",
            "-c",
            "10.99.0.2",
            "-p",
            "5299",
            "-u",
            "-b",
            f"{offered_mbps}M",
            "-l",
            str(frame_bytes - ETH_IP_UDP),
            "-t",
            str(seconds),
            "-J",
            timeout=seconds + 30,
        )
    finally:
        stop.set()
        sampler.join()
        server.wait(timeout=10)
    wall = time.monotonic() - w0
    ovs_cpu = cpu_seconds(pid) - o0
    m1, s1 = machine_busy_s()
    after = pfifo()
    reader.close()
    res = json.loads(out)
    end = res["end"]["sum"]
    # iperf3 counts datagrams received; each crossed every switch once
    received = end["packets"] - end["lost_packets"]
    dur = end["seconds"]
    qpkts = {k: after[k][2] - before[k][2] for k in keys}  # frames that went through each egress qdisc
    forwards = received * chain.hops
    return {
        "frame_bytes": frame_bytes,
        "offered_mbps": offered_mbps,
        "received_fps": received / dur,
        "received_mbps": received * frame_bytes * 8 / dur / 1e6,
        "loss_fraction": end["lost_packets"] / max(end["packets"], 1),
        "ovs_cpu_fraction": ovs_cpu / wall,
        "machine_cpu_fraction": (m1 - m0) / wall / os.cpu_count(),
        "steal_fraction": (s1 - s0) / wall / os.cpu_count(),
        "forwards_per_ovs_core_s": forwards / max(ovs_cpu, 1e-9),
        "forwards_per_machine_core_s": forwards / max(m1 - m0, 1e-9),
        "egress_qdisc_packets_min": min(qpkts.values()) if qpkts else 0,
        "received_packets": received,
        "peak_queue_pkts": peak_backlog[0],
    }


def run_option(option: str, hops: int, frames: list[int], rate_mbps: float, seconds: float, log) -> list[dict]:
    rows = []
    if option == "kernel" and not kernel_datapath_available():
        return [
            {
                "option": option,
                "hops": hops,
                "available": False,
                "why": "no openvswitch kernel module on this machine (/sys/module/openvswitch absent)",
            }
        ]
    for frame in frames:
        chain = Chain(hops, option, 9000, rate_mbps)
        try:
            chain.build()
            log(f"  {option}, {hops} switches, {frame}-byte frames ...")
            r = blast(chain, frame, rate_mbps, seconds)
            # shaping check: the same chain shaped to 50 Mb/s at its middle switch, offered 3x that
            mid = chain.forward_ports[len(chain.forward_ports) // 2]
            chain.shape(mid, 50.0)
            s = blast(chain, frame, 150.0, min(seconds, 3.0))
            r.update(
                option=option,
                hops=hops,
                available=True,
                rate_mbps=rate_mbps,
                shaped_mbps=50.0,
                shaped_received_mbps=s["received_mbps"],
                shaping_honoured=s["received_mbps"] <= 50.0 * 1.05 and s["peak_queue_pkts"] > 0,
                shaped_peak_queue_pkts=s["peak_queue_pkts"],
                qdisc_saw_every_frame=r["egress_qdisc_packets_min"] >= 0.99 * r["received_packets"],
            )
        except Exception as exc:  # one option failing must not hide the others
            r = {"option": option, "hops": hops, "frame_bytes": frame, "available": False, "why": str(exc)[:300]}
        finally:
            chain.remove()
        rows.append(r)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--options", default=",".join(OPTIONS), help=f"comma-separated, of {', '.join(OPTIONS)}")
    ap.add_argument("--hops", default="2,3", help="switches on the path (default 2,3)")
    ap.add_argument("--frames", default="1024,4096", help="frame sizes in bytes (default 1024,4096)")
    ap.add_argument(
        "--rate-mbps",
        type=float,
        default=1000.0,
        help="link rate of every shaped switch port and the offered load (default 1000)",
    )
    ap.add_argument("--seconds", type=float, default=4.0, help="per measurement (default 4)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("datapath.py needs root (netns, veth, OVS)", file=sys.stderr)
        return 2
    if not shutil.which("iperf3"):
        print("iperf3 is missing: run scripts/provision.sh", file=sys.stderr)
        return 2
    options = [o.strip() for o in args.options.split(",") if o.strip()]
    bad = [o for o in options if o not in OPTIONS]
    if bad:
        print(f"unknown option(s) {bad}; valid: {', '.join(OPTIONS)}", file=sys.stderr)
        return 2
    try:
        hops = [int(h) for h in args.hops.split(",")]
        frames = [int(f) for f in args.frames.split(",")]
    except ValueError:
        print("--hops and --frames take comma-separated integers", file=sys.stderr)
        return 2
    if any(f < 128 or f > 8900 for f in frames) or any(h < 1 or h > 8 for h in hops):
        print("frames must be 128..8900 bytes and hops 1..8", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    log = (lambda *_: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    rows = []
    for option in options:
        for h in hops:
            rows += run_option(option, h, frames, args.rate_mbps, args.seconds, log)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    base = {
        (r["hops"], r["frame_bytes"]): r["forwards_per_ovs_core_s"]
        for r in rows
        if r.get("available") and r["option"] == "system"
    }
    print(
        "| option | switches | frame B | received frames/s | loss | ovs-vswitchd core | machine cores | "
        "forwards per ovs core-s | vs system | shaping honoured (50 Mb/s shaper, 150 offered) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r.get("available"):
            print(
                f"| {r['option']} | {r['hops']} | {r.get('frame_bytes', '—')} | not available: {r['why']} | | | | | | |"
            )
            continue
        ratio = (
            r["forwards_per_ovs_core_s"] / base[(r["hops"], r["frame_bytes"])]
            if (r["hops"], r["frame_bytes"]) in base
            else float("nan")
        )
        # an idle ovs-vswitchd forwarded nothing itself (the frames took the XDP fast path around it):
        # a per-core rate over ~0 CPU means nothing, so say so instead of printing it
        idle = r["ovs_cpu_fraction"] < 0.05
        rate = "— (ovs idle: frames did not cross it)" if idle else f"{r['forwards_per_ovs_core_s']:,.0f}"
        print(
            f"| {r['option']} | {r['hops']} | {r['frame_bytes']} | {r['received_fps']:,.0f} | "
            f"{100 * r['loss_fraction']:.1f} % | {r['ovs_cpu_fraction']:.2f} | "
            f"{2 * r['machine_cpu_fraction']:.2f} | {rate} | {'—' if idle else f'{ratio:.2f}×'} | "
            f"{'yes' if r['shaping_honoured'] else 'NO'} ({r['shaped_received_mbps']:.0f} Mb/s received, "
            f"peak queue {r['shaped_peak_queue_pkts']} pkts) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
