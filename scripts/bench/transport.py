#!/usr/bin/env python3
"""Benchmark the RDMA-like transport (not a test; root, provisioned lab).

1. Loopback: one agent, a veth pair between two namespaces (no OVS), shaped at 1 Gb/s —
   how many packets/s and Mb/s one agent core drives (each packet built, sent, received,
   ICRC-checked and acknowledged by the same process).
2. Fabric: ZCube(4,2) with jumbo MTU: one path, iperf3 on the same path, the 50/50 split,
   then every prefill GPU sending to a decode GPU at once (16 QPs on 16 ports) — agent CPU
   per Mb/s and ovs-vswitchd CPU, side by side.

    sudo .venv/bin/python scripts/bench/transport.py [--json]
"""

import argparse
import json
import os
import subprocess
import tempfile
import time


def sh(cmd):
    subprocess.run(cmd, shell=True, check=True, capture_output=True)


def loopback(rate_bps=1e9, size=200_000_000) -> dict:
    from traffic.agent import Agent, PortSpec

    tag = f"zb{os.getpid() % 10000}"
    a_ns, b_ns = f"{tag}a", f"{tag}b"
    sh(
        f"ip netns add {a_ns}; ip netns add {b_ns}; ip link add {tag}a0 type veth peer name {tag}b0; "
        f"ip link set {tag}a0 netns {a_ns}; ip link set {tag}b0 netns {b_ns}"
    )
    holders = []
    try:
        for ns, dev in ((a_ns, f"{tag}a0"), (b_ns, f"{tag}b0")):
            sh(f"ip netns exec {ns} ip link set {dev} mtu 9000 up")
            sh(
                f"ip netns exec {ns} nft add table inet zlab && ip netns exec {ns} nft add chain inet zlab input "
                f"'{{ type filter hook input priority 0; }}' && ip netns exec {ns} nft add rule inet zlab input udp dport 4791 drop"
            )
            sh(
                f"ip netns exec {ns} tc qdisc replace dev {dev} root handle 1: htb default 1 && ip netns exec {ns} "
                f"tc class replace dev {dev} parent 1: classid 1:1 htb rate {int(rate_bps)}bit burst 90000 quantum 9014"
            )
            holders.append(subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "120"]))
        time.sleep(0.3)
        agent = Agent()
        agent.add_port(PortSpec(f"{tag}a0", "A", "02:00:00:00:00:01", "10.99.0.1", rate_bps, holders[0].pid))
        agent.add_port(PortSpec(f"{tag}b0", "B", "02:00:00:00:00:02", "10.99.0.2", rate_bps, holders[1].pid))
        conn = agent.connect(f"{tag}a0", f"{tag}b0", 50000)
        agent.post(conn, size)
        t0 = time.monotonic()
        agent.run(deadline_ns=time.monotonic_ns() + 120_000_000_000)
        wall = time.monotonic() - t0
        rec = agent.done[0]
        agent.close()
        pkts = rec["packets"]
        return {
            "offered_mbps": rate_bps / 1e6,
            "wall_s": wall,
            "agent_cpu_s": agent.cpu_s,
            "pps": pkts / wall,
            "goodput_mbps": size * 8 / wall / 1e6,
            "pps_per_core": pkts / agent.cpu_s,
            "mbps_per_core": size * 8 / agent.cpu_s / 1e6,
        }
    finally:
        for h in holders:
            h.kill()
        sh(f"ip netns del {a_ns}; ip netns del {b_ns}")


def vswitchd_cpu_s() -> float:
    pid = int(open("/var/run/openvswitch/ovs-vswitchd.pid").read())
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def fabric() -> dict:
    from testbed.emulation import probes
    from testbed.emulation.agents import port_spec, send_message, transfer_ports
    from testbed.emulation.calibrate import iperf3_udp
    from testbed.emulation.config import EmulationConfig
    from testbed.emulation.up import LiveFabric
    from traffic.agent import Agent

    out = {}
    with tempfile.TemporaryDirectory() as d:
        with LiveFabric(
            "zcube:n=4,gpus_per_server=4", EmulationConfig(mtu_bytes=9000), results_dir=d, log=lambda *_: None
        ) as f:
            live = probes.LiveRun(f.dir)
            recs, _ = send_message(live, "g0-p0", "g5", 4_000_000)
            r = recs[0]
            out["one_port_goodput_mbps"] = r["size_bytes"] * 8 / ((r["t_complete_ns"] - r["t_first_tx_ns"]) / 1e9) / 1e6
            out["iperf3_udp_goodput_mbps"] = iperf3_udp(live, "g0-p0", "g5-p1", 20e6, 3)["goodput_bps"] / 1e6
            recs, _ = send_message(live, "g1", "g6", 8_000_000)
            t0, t1 = min(x["t_first_tx_ns"] for x in recs), max(x["t_complete_ns"] for x in recs)
            out["split_goodput_mbps"] = 8_000_000 * 8 / ((t1 - t0) / 1e9) / 1e6
            # all 8 prefill GPUs (servers 0-1) -> decode GPUs (servers 2-3), both ports each
            agent = Agent()
            size = 4_000_000
            for g in range(8):
                for sp, dp, share in transfer_ports(live, f"g{g}", f"g{g + 8}"):
                    agent.add_port(port_spec(live, sp))
                    agent.add_port(port_spec(live, dp))
                    agent.post(agent.connect(sp, dp, 49152 + g), int(size * share))
            ovs0, t0 = vswitchd_cpu_s(), time.monotonic()
            agent.run(deadline_ns=time.monotonic_ns() + 120_000_000_000)
            wall = time.monotonic() - t0
            ovs = vswitchd_cpu_s() - ovs0
            pkts = sum(x["packets"] for x in agent.done)
            mbits = 8 * size * 8 / 1e6
            out["all_ports"] = {
                "qps": len(agent.conns),
                "wall_s": wall,
                "aggregate_goodput_mbps": mbits / wall,
                "pps": pkts / wall,
                "agent_cpu_fraction": agent.cpu_s / wall,
                "ovs_cpu_fraction": ovs / wall,
                "agent_cpu_ms_per_mbit": 1e3 * agent.cpu_s / mbits,
                "retransmits": sum(x["qp_retransmits"] for x in agent.done),
            }
            agent.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = {"loopback": loopback(), "fabric": fabric()}
    if args.json:
        print(json.dumps(res, indent=2))
        return
    lb, fb = res["loopback"], res["fabric"]
    print(
        f"loopback (veth, no OVS), offered {lb['offered_mbps']:.0f} Mb/s: {lb['goodput_mbps']:.0f} Mb/s, "
        f"{lb['pps']:.0f} packets/s; per agent core {lb['pps_per_core']:.0f} packets/s = {lb['mbps_per_core']:.0f} Mb/s"
    )
    print(
        f"fabric ZCube(4,2), 20 Mb/s ports: one port {fb['one_port_goodput_mbps']:.2f} Mb/s "
        f"(iperf3 UDP {fb['iperf3_udp_goodput_mbps']:.2f}); 50/50 split {fb['split_goodput_mbps']:.2f} Mb/s of 40"
    )
    a = fb["all_ports"]
    print(
        f"fabric, {a['qps']} QPs at once: {a['aggregate_goodput_mbps']:.1f} Mb/s, {a['pps']:.0f} packets/s, "
        f"agent {100 * a['agent_cpu_fraction']:.0f} % of a core ({a['agent_cpu_ms_per_mbit']:.2f} ms CPU per Mbit), "
        f"ovs-vswitchd {100 * a['ovs_cpu_fraction']:.0f} % of a core, retransmits {a['retransmits']}"
    )


if __name__ == "__main__":
    main()
