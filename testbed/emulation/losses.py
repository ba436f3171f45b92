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

from ..lab.sh import CommandError, run
from .probes import LiveRun

LOCATIONS = (
    "ovs_port_counters",
    "ovs_sockets",
    "ovs_datapath",
    "switch_ports",
    "host_ports",
    "host_qdiscs",
    "agent_sockets",
)
_SS = re.compile(r"\*:(\S+)\s.*?pid=(\d+).*?skmem:\(.*?d(\d+)\)")
_COVERAGE = re.compile(r"^(datapath_drop_\S+|dpif_netdev\S*drop\S*)\s.*total: (\d+)", re.M)
_LOST = re.compile(r"lost:(\d+)")


def _switch_ports(fab):
    return [p.name for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0]


class _Unreadable(Exception):
    pass


def _sysfs_dropped(name: str) -> int:
    total = 0
    for k in ("rx_dropped", "tx_dropped"):
        with open(f"/sys/class/net/{name}/statistics/{k}") as fh:
            total += int(fh.read())
    return total


def _host_json(live: LiveRun, gpu: str, argv: list[str]) -> list:
    r = live.in_host(gpu, argv)
    if r.returncode != 0:
        raise _Unreadable(f"{' '.join(argv)} in {gpu} failed ({r.returncode}): {(r.stderr or '').strip()[:120]}")
    return json.loads(r.stdout)


def snapshot(live: LiveRun, vswitchd_pid: int) -> dict:
    """Cumulative drop counters per location and item (port, counter), and under "unreadable"
    every read that failed or whose output was not in the expected format (a port missing from
    it included). Why not zero: a counter that was not read must void the repeat, not pass it."""
    fab = live.fabric
    ports = set(_switch_ports(fab))
    out: dict = {loc: {} for loc in LOCATIONS if loc != "agent_sockets"}
    unreadable: list[str] = []

    def read(what: str, fn) -> None:
        try:
            fn()
        except (CommandError, OSError, ValueError, KeyError, TypeError, IndexError, _Unreadable) as exc:
            unreadable.append(f"{what}: {exc}")

    def ovs_ports():
        text = run(["ovs-vsctl", "--format=json", "--", "--columns=name,statistics", "list", "Interface"])
        for name, stats in json.loads(text)["data"]:
            if name in ports:
                st = dict(stats[1])
                if not {"rx_dropped", "tx_dropped"} & set(st):
                    raise _Unreadable(f"{name} has no drop statistics")
                out["ovs_port_counters"][name] = sum(
                    st.get(k, 0) for k in ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors")
                )
        _all_there("ovs-vsctl list Interface", ports, out["ovs_port_counters"])

    def sockets():
        for m in _SS.finditer(run(["ss", "-0", "-m", "-n", "-p"])):
            if m.group(1) in ports and int(m.group(2)) == vswitchd_pid:
                out["ovs_sockets"][m.group(1)] = out["ovs_sockets"].get(m.group(1), 0) + int(m.group(3))
        _all_there(f"ss -0 -m (sockets of pid {vswitchd_pid})", ports, out["ovs_sockets"])

    def datapath():
        text = run(["ovs-appctl", "coverage/show"])
        if "Event coverage" not in text:
            raise _Unreadable("ovs-appctl coverage/show: unknown output format")
        out["ovs_datapath"].update({k: int(v) for k, v in _COVERAGE.findall(text)})
        lost = _LOST.search(run(["ovs-appctl", "dpctl/show"]))
        if lost is None:
            raise _Unreadable("ovs-appctl dpctl/show: no 'lost:' field (unknown output format)")
        out["ovs_datapath"]["upcalls_lost"] = int(lost.group(1))

    read("OVS port counters", ovs_ports)
    read("OVS packet sockets", sockets)
    read("OVS datapath", datapath)
    for name in sorted(ports):
        read(f"sysfs {name}", lambda name=name: out["switch_ports"].__setitem__(name, _sysfs_dropped(name)))
    for gpu in fab.gpus:
        mine = {p.name for p in fab.ports if p.node == gpu.id and fab.port_link[p.id] >= 0}

        def host_links(gpu=gpu, mine=mine):
            for dev in _host_json(live, gpu.name, ["ip", "-s", "-j", "link", "show"]):
                if dev.get("ifname") in mine:
                    st = dev.get("stats64", dev.get("stats"))
                    if st is None:
                        raise _Unreadable(f"ip -s -j link: no stats for {dev['ifname']}")
                    out["host_ports"][dev["ifname"]] = int(st["rx"]["dropped"]) + int(st["tx"]["dropped"])
            _all_there(f"ip -s -j link in {gpu.name}", mine, out["host_ports"])

        def host_qdiscs(gpu=gpu, mine=mine):
            seen = set()
            for q in _host_json(live, gpu.name, ["tc", "-s", "-j", "qdisc", "show"]):
                if q.get("dev") in mine:
                    out["host_qdiscs"][q["dev"]] = out["host_qdiscs"].get(q["dev"], 0) + int(q["drops"])
                    seen.add(q["dev"])
            _all_there(f"tc -s -j qdisc in {gpu.name}", mine, seen)

        read(f"host ports of {gpu.name}", host_links)
        read(f"host qdiscs of {gpu.name}", host_qdiscs)
    out["unreadable"] = unreadable
    return out


def _all_there(what: str, wanted, got) -> None:
    missing = sorted(set(wanted) - set(got))
    if missing:
        raise _Unreadable(f"{what}: {len(missing)} interfaces missing from the output ({missing[:3]})")


def delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """Drops during the replay, per location and item (only the non-zero ones)."""
    out = {}
    for loc, items in after.items():
        if loc == "unreadable":
            continue
        d = {k: v - before.get(loc, {}).get(k, 0) for k, v in items.items()}
        out[loc] = {k: v for k, v in d.items() if v}
    return out


def unreadable(before: dict, after: dict) -> list[str]:
    """The reads that failed in either snapshot (the analysis voids the repeat when any did)."""
    return [f"before: {x}" for x in before.get("unreadable", [])] + [f"after: {x}" for x in after.get("unreadable", [])]
