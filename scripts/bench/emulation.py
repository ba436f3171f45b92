#!/usr/bin/env python3
"""Benchmark fabric bring-up (not a test; needs root and a provisioned lab).

For each fabric: zlab's build time, time until every table is installed, time until every
GPU port pair is reachable, flow entries per switch, teardown time — and plain Mininet
building the same topology (same switches, hosts and links; userspace OVS, no controller,
no shaping, no host configuration) as the baseline, with the ratio.

    sudo .venv/bin/python scripts/bench/emulation.py [--json] [SPEC ...]
"""

import argparse
import json
import statistics
import tempfile
import time

DEFAULT = (
    "zcube:n=4",
    "zcube:n=8",
    "roft:gpus=16,gpus_per_server=4,segments=2",
    "roft:gpus=64,gpus_per_server=8,segments=2",
)


def zlab_bringup(spec: str) -> dict:
    from testbed.emulation.config import EmulationConfig
    from testbed.emulation.up import LiveFabric

    with tempfile.TemporaryDirectory() as d:
        live = LiveFabric(spec, EmulationConfig(), results_dir=d, log=lambda *_: None)
        with live:
            flows = json.loads((live.dir / "flows.json").read_text())["switches"]
            per_switch = [len(v["entries"]) + 2 for v in flows.values()]
            reach = live.reach
        t = live.timings_s
    return {
        "build_s": t["build_total"],
        "tables_s": t["tables_installed"],
        "reachable_s": t["reachability"],
        "ready_s": t["build_total"] + t["tables_installed"] + t["reachability"],
        "teardown_s": t["teardown"],
        "pairs": reach["pairs"],
        "reachable": reach["reachable"],
        "entries_per_switch": {"min": min(per_switch), "median": statistics.median(per_switch), "max": max(per_switch)},
    }


def plain_mininet(spec: str) -> dict:
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
            failMode="standalone",
            datapath="user" if datapath() == "netdev" else "kernel",
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
    try:
        net.build()
        net.start()
        up = time.perf_counter() - t0
    finally:
        t1 = time.perf_counter()
        net.stop()
    return {"ready_s": up, "teardown_s": time.perf_counter() - t1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("specs", nargs="*", default=list(DEFAULT))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for spec in args.specs:
        z = zlab_bringup(spec)
        p = plain_mininet(spec)
        rows.append({"spec": spec, "zlab": z, "plain_mininet": p, "ready_ratio": z["ready_s"] / p["ready_s"]})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'fabric':<44} {'build':>6} {'tables':>7} {'reach':>6} {'ready':>6} {'down':>5} {'entries/sw':>12}"
        f" {'pairs':>9} | {'plain up':>8} {'down':>5} {'ratio':>6}"
    )
    for r in rows:
        z, p = r["zlab"], r["plain_mininet"]
        e = z["entries_per_switch"]
        print(
            f"{r['spec']:<44} {z['build_s']:>6.1f} {z['tables_s']:>7.1f} {z['reachable_s']:>6.1f} {z['ready_s']:>6.1f}"
            f" {z['teardown_s']:>5.1f} {e['min']:>4}-{e['max']:<7} {z['reachable']:>4}/{z['pairs']:<4} |"
            f" {p['ready_s']:>8.1f} {p['teardown_s']:>5.1f} {r['ready_ratio']:>5.1f}x"
        )
    print("\nseconds; ready = build + tables installed + all pairs reachable; ratio = zlab ready / plain Mininet up")


if __name__ == "__main__":
    main()
