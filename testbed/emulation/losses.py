"""Every place a frame can die in the emulated fabric, counted before and after a replay.

Why: go-back-N retransmitted in ROFT replays while every sampled switch queue reported zero
drops — frames were lost where nothing looked. A real lossy fabric under test drops only in
switch egress queues (sampled by the collector); any drop anywhere else is the emulator's, and
a retransmission no counter explains is an emulator loss nobody located. Locations:

* ovs_port_counters — OVS's own per-port rx/tx dropped and errors (`ovs-vsctl list Interface`)
* ovs_sockets       — drops on ovs-vswitchd's packet socket of each port (`ss -0 -m`: a receive
                      buffer it did not drain in time)
* ovs_datapath      — datapath drop coverage counters and lost upcalls (`ovs-appctl`)
* switch_ports      — kernel counters of the switch-side veths (sysfs rx/tx_dropped)
* host_ports        — kernel counters of the GPU-side veths, in each host's namespace
* host_qdiscs       — the hosts' egress shapers (tc drops)
* agent_sockets     — the agent's packet sockets (PACKET_STATISTICS; recorded by the agent)
"""

from __future__ import annotations

import json
import re

from ..lab.sh import run
from .probes import LiveRun

LOCATIONS = ("ovs_port_counters", "ovs_sockets", "ovs_datapath", "switch_ports", "host_ports", "host_qdiscs",
             "agent_sockets")
_SS = re.compile(r"\*:(\S+)\s.*?pid=(\d+).*?skmem:\(.*?d(\d+)\)")
_COVERAGE = re.compile(r"^(datapath_drop_\S+|dpif_netdev\S*drop\S*)\s.*total: (\d+)", re.M)
_LOST = re.compile(r"lost:(\d+)")


def _switch_ports(fab):
    return [p.name for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0]


def snapshot(live: LiveRun, vswitchd_pid: int) -> dict[str, dict[str, int]]:
    """Cumulative drop counters per location and item (port, counter)."""
    fab = live.fabric
    ports = set(_switch_ports(fab))
    out: dict[str, dict[str, int]] = {loc: {} for loc in LOCATIONS if loc != "agent_sockets"}
    text = run(["ovs-vsctl", "--format=json", "--", "--columns=name,statistics", "list", "Interface"])
    for name, stats in json.loads(text)["data"]:
        if name in ports:
            st = dict(stats[1])
            out["ovs_port_counters"][name] = sum(st.get(k, 0) for k in ("rx_dropped", "tx_dropped", "rx_errors",
                                                                       "tx_errors"))
    for m in _SS.finditer(run(["ss", "-0", "-m", "-n", "-p"])):
        if m.group(1) in ports and int(m.group(2)) == vswitchd_pid:
            out["ovs_sockets"][m.group(1)] = out["ovs_sockets"].get(m.group(1), 0) + int(m.group(3))
    out["ovs_datapath"] = {k: int(v) for k, v in _COVERAGE.findall(run(["ovs-appctl", "coverage/show"]))}
    lost = _LOST.search(run(["ovs-appctl", "dpctl/show"]))
    out["ovs_datapath"]["upcalls_lost"] = int(lost.group(1)) if lost else 0
    for name in ports:
        total = 0
        for k in ("rx_dropped", "tx_dropped"):
            with open(f"/sys/class/net/{name}/statistics/{k}") as fh:
                total += int(fh.read())
        out["switch_ports"][name] = total
    for gpu in fab.gpus:
        link = json.loads(live.in_host(gpu.name, ["ip", "-s", "-j", "link", "show"]).stdout or "[]")
        for dev in link:
            if dev.get("ifname", "").startswith(gpu.name + "-"):
                st = dev.get("stats64", dev.get("stats", {}))
                out["host_ports"][dev["ifname"]] = st.get("rx", {}).get("dropped", 0) + st.get("tx", {}).get("dropped", 0)
        qd = json.loads(live.in_host(gpu.name, ["tc", "-s", "-j", "qdisc", "show"]).stdout or "[]")
        for q in qd:
            if q.get("dev", "").startswith(gpu.name + "-"):
                key = q["dev"]
                out["host_qdiscs"][key] = out["host_qdiscs"].get(key, 0) + int(q.get("drops", 0))
    return out


def delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """Drops during the replay, per location and item (only the non-zero ones)."""
    out = {}
    for loc, items in after.items():
        d = {k: v - before.get(loc, {}).get(k, 0) for k, v in items.items()}
        out[loc] = {k: v for k, v in d.items() if v}
    return out
