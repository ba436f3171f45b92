"""Which drops explain which loss: each queue pair's retransmissions, NAKs and timeouts must be
explained by frames dropped on that queue pair's own path, and in a failure run only the frames
lost on the failed elements are excused — and counted.

Why per path: one queue drop anywhere in the fabric used to explain any number of
retransmissions anywhere else, so an emulator loss nobody located hid behind an honest
congestion drop. A QP's path here is the model's, walked with its actual UDP source port: the
data direction and the acknowledgement direction, under the healthy tables and (failure runs)
under every degraded state's tables and from the ports it migrated to. Its ports are both ends
of every cable on those paths (GPU and switch side).

Failure runs (raw/rep<k>/injections.jsonl present): drop counters on the interfaces of the
failed cables (a failed switch: all of its cables) are the experiment's loss, not the
emulator's; so are the frames the gray-failure rules dropped (nftables' own counters, in the
injector's records) and OVS datapath drops (not per port; in a failure run they follow the
ports' state changes). All of them are counted as excused. A QP whose path crosses a failed
cable is explained by it. Every other loss rule applies as in any run.
"""

from __future__ import annotations

import numpy as np

from ..fabric import failures as fl
from ..fabric.paths import walk
from ..records import read_json, read_jsonl

# drop locations keyed by interface name (losses.py); the others (ovs_datapath) are not per port
PER_PORT = ("ovs_port_counters", "ovs_sockets", "switch_ports", "host_ports", "host_qdiscs")


# OVS datapath drops of frames on their way to the controller (the userspace action of output:CONTROLLER):
# the controller's link probes and discovery frames, not replay traffic. Measured in the failure e2e runs:
# thousands per run with link probes on (10 per second per cable direction), none without. OVS 3.1's
# process_upcall returns EAGAIN after queueing a packet-in, so dp_execute_userspace_action counts every
# delivered packet-in here. datapath_drop_upcall_error is NOT such a frame (a failed flow-miss upcall:
# no handler yet, or a frame on a port OVS no longer maps; it can be replay traffic, and it is never the
# same frame as a userspace-action count), so it stays unexcused (docs/fidelity.md).
TO_CONTROLLER = {"datapath_drop_userspace_action_error": "frames to the controller (link probes)"}


def loss_events(q: dict) -> int:
    r = q["requester"]
    return int(r["retransmits"] + r["naks"] + r["timeouts"])


def port_drops(drops: dict, queue_drops: dict, agent_ports: dict) -> dict[str, int]:
    """Frames dropped per interface name: the located counters, the switch egress queues and the
    agent's packet sockets."""
    out: dict[str, int] = {}
    for loc in PER_PORT:
        for name, n in drops.get(loc, {}).items():
            out[name] = out.get(name, 0) + int(n)
    for name, n in queue_drops.items():
        out[name] = out.get(name, 0) + int(n)
    for name, p in agent_ports.items():
        out[name] = out.get(name, 0) + int(p.get("socket_drops", 0))
    return {k: v for k, v in out.items() if v}


def _failure_tables(fab, doc: dict) -> list:
    tabs = []
    for st in doc.get("states", []):
        if not st.get("down_links"):
            continue
        f = fl.Failures(frozenset(st["cables"]), frozenset(fab.node_by_name[n].id for n in st["failed_switches"]))
        tabs.append(fl.degrade(fab, f, doc["policy"]).tables)
    return tabs


def _link_ports(fab, links) -> set[str]:
    return {fab.ports[int(p)].name for lk in links for p in fab.link_ends[int(lk)]}


def qp_paths(fab, qps: list[dict], tables: list) -> tuple[list[set[int]], list[bool]]:
    """Per QP: the cables of its paths (both directions, every table set given, None = healthy,
    home and current ports), and whether any of them differs from its healthy path."""
    ids = {p.name: p.id for p in fab.ports}
    ends = [(q["home"][0], q["home"][1]) for q in qps] + [(q["src"], q["dst"]) for q in qps]
    src = np.array([ids[a] for a, _ in ends] + [ids[b] for _, b in ends])
    dst = np.array([ids[b] for _, b in ends] + [ids[a] for a, _ in ends])
    sport = np.array([q["sport"] for q in qps] * 4)
    n = len(qps)
    cables: list[set[int]] = [set() for _ in qps]
    healthy: list[set[int]] = [set() for _ in qps]
    for k, t in enumerate([None, *tables]):
        w = walk(fab, src, dst, sport, tables=t)
        for f in range(src.size):
            links = {int(d) // 2 for d in w.dlinks[f] if d >= 0}
            cables[f % n] |= links
            if k == 0 and f in (f % n, f % n + 2 * n):  # home ports, healthy tables: the QP's own healthy path
                healthy[f % n] |= links
    return cables, [c != h for c, h in zip(cables, healthy)]


def account(fd, queue_drops: dict) -> dict:
    """The repeat's loss accounting (fd: FabricData with drops recorded). Returns
    excused: {what: frames} (failure runs), outside: {location: frames} not excused and not in a
    switch egress queue, unexplained: one line per QP whose loss nothing on its path explains,
    touched_ports: interfaces on a path a failure changed (the link-bytes rule skips them)."""
    fab, qps = fd.fabric, fd.counters.get("qps", [])
    drops = fd.drops
    inj_path = fd.raw / "injections.jsonl"
    failed: set[int] = set()
    tables: list = []
    excused: dict[str, int] = {}
    if inj_path.exists():
        doc = read_json(fd.dir / "failures.json")
        tables = _failure_tables(fab, doc)
        failed = {int(x) for st in doc.get("states", []) for x in st.get("down_links", [])}
        gray = 0
        for r in read_jsonl(inj_path):
            for v in list((r.get("dropped") or {}).values()) + list((r.get("gray_dropped") or {}).values()):
                gray += int(v or 0)
        if gray:
            excused["gray failure rules (nftables)"] = gray
    failed_ports = _link_ports(fab, failed)
    outside: dict[str, int] = {}
    for loc, items in drops.items():
        for name, n in items.items():
            if not n:
                continue
            if loc == "ovs_datapath" and name in TO_CONTROLLER:
                excused[TO_CONTROLLER[name]] = excused.get(TO_CONTROLLER[name], 0) + int(n)
            elif failed and (name in failed_ports or loc == "ovs_datapath"):
                key = "ovs datapath" if loc == "ovs_datapath" else "failed cables' interfaces"
                excused[key] = excused.get(key, 0) + int(n)
            else:
                outside[loc] = outside.get(loc, 0) + int(n)
    sock = sum(int(p.get("socket_drops", 0)) for p in fd.counters.get("ports", {}).values())
    if sock:
        outside["agent_sockets"] = sock
    by_port = port_drops(drops, queue_drops, fd.counters.get("ports", {}))
    lossy = [i for i, q in enumerate(qps) if loss_events(q)]
    cables, moved = qp_paths(fab, qps, tables) if qps else ([], [])
    unexplained = []
    for i in lossy:
        q = qps[i]
        ports = _link_ports(fab, cables[i])
        if cables[i] & failed or any(by_port.get(p) for p in ports):
            continue
        unexplained.append(
            f"QP {q['src']}->{q['dst']} sport {q['sport']}: {loss_events(q)} retransmissions, NAKs or timeouts"
        )
    touched = set(failed_ports)
    for i, q in enumerate(qps):
        if failed and (moved[i] or cables[i] & failed or q.get("migrations_ns")):
            touched |= _link_ports(fab, cables[i])
    return {"excused": excused, "outside": outside, "unexplained": unexplained, "touched_ports": sorted(touched)}
