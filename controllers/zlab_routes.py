"""zlab's OpenFlow 1.3 app: install each switch's whole forwarding table when it connects.

Written on the Ryu app API; runs on os-ken 4.x (zlab controller) and loads under ryu-manager
where Ryu is installed. It reads the run folder (ZLAB_RUN_DIR): fabric.json for names and the
cabling blueprint, flows.json for the entries the routing model computed — it never derives
routes itself. Proactive only: the table-miss entry drops (and counts); LLDP is the only thing
sent to the controller, for the cabling check. Counters are polled into append-only JSONL.
"""

from __future__ import annotations

import json
import os
import struct
import time

try:  # os-ken, the maintained fork
    from os_ken.base import app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib import hub
    from os_ken.lib.packet import ethernet, lldp, packet
    from os_ken.ofproto import ofproto_v1_3

    BaseApp = app_manager.OSKenApp
except ImportError:  # Ryu
    from ryu.base import app_manager
    from ryu.controller import ofp_event
    from ryu.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from ryu.lib import hub
    from ryu.lib.packet import ethernet, lldp, packet
    from ryu.ofproto import ofproto_v1_3

    BaseApp = app_manager.RyuApp

from testbed.records import JsonLines

from .recovery import ProbeLoss, RecoveryPlan, backup_for, diff, group_id

ETH_IP, ETH_LLDP, IP_UDP = 0x0800, 0x88CC, 17
PRIORITY_LLDP = 65000
LLDP_DST = "01:80:c2:00:00:0e"
COOKIE = 0x5A4C  # "ZL": every entry this app installs
FIXED_ENTRIES = 2  # besides the table: the table-miss entry and the LLDP punt


def entry_match(parser, e: dict):
    fields = {"eth_type": ETH_IP, "ipv4_dst": (e["ipv4_dst"], e["ipv4_mask"])}
    if e["udp_src"] is not None:
        fields.update(ip_proto=IP_UDP, udp_src=tuple(e["udp_src"]))
    return parser.OFPMatch(**fields)


def entry_mods(dp, delete: list[dict], add: list[dict], backup=None) -> list:
    """FlowMods changing one switch's table in place: adds, then strict deletes — make before break,
    so a packet arriving mid-update always finds an old or a new route (deleting first dropped
    frames of queue pairs whose route did not change, where ROFT re-divides its ECMP buckets).
    An add with an existing match and priority overwrites its action; diff() never deletes a key it
    adds. backup(entry) -> port or None: a protected entry outputs through its fast-failover group
    instead (ff_groups)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    mods = []
    for e in add:
        b = backup(e) if backup is not None else None
        act = (
            parser.OFPActionGroup(group_id(e["out_port"], b))
            if b is not None
            else parser.OFPActionOutput(e["out_port"])
        )
        out = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [act])]
        mods.append(
            parser.OFPFlowMod(dp, cookie=COOKIE, priority=e["priority"], match=entry_match(parser, e), instructions=out)
        )
    return mods + [
        parser.OFPFlowMod(
            dp,
            cookie=COOKIE,
            cookie_mask=0xFFFFFFFFFFFFFFFF,
            command=ofp.OFPFC_DELETE_STRICT,
            priority=e["priority"],
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            match=entry_match(parser, e),
        )
        for e in delete
    ]


def ff_groups(dp, pairs) -> list:
    """One OpenFlow fast-failover group per (primary, backup) port pair: the first bucket whose
    watched port is live forwards, so the switch repairs by itself when the primary goes down."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    mods = [parser.OFPGroupMod(dp, ofp.OFPGC_DELETE, ofp.OFPGT_FF, ofp.OFPG_ALL, [])]
    for p, b in sorted(set(pairs)):
        buckets = [
            parser.OFPBucket(watch_port=port, watch_group=ofp.OFPG_ANY, actions=[parser.OFPActionOutput(port)])
            for port in (p, b)
        ]
        mods.append(parser.OFPGroupMod(dp, ofp.OFPGC_ADD, ofp.OFPGT_FF, group_id(p, b), buckets))
    return mods


def build_flow_mods(dp, entries: list[dict], backup=None) -> list:
    """OFPFlowMods for one switch: delete ours, table-miss drop, LLDP punt, then the table."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    mods = [
        parser.OFPFlowMod(
            dp,
            command=ofp.OFPFC_DELETE,
            table_id=ofp.OFPTT_ALL,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            match=parser.OFPMatch(),
        )
    ]
    mods.append(parser.OFPFlowMod(dp, cookie=COOKIE, priority=0, match=parser.OFPMatch(), instructions=[]))
    punt = [
        parser.OFPInstructionActions(
            ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        )
    ]
    mods.append(
        parser.OFPFlowMod(
            dp, cookie=COOKIE, priority=PRIORITY_LLDP, match=parser.OFPMatch(eth_type=ETH_LLDP), instructions=punt
        )
    )
    return mods + entry_mods(dp, [], entries, backup)


def lldp_frame(dpid: int, port_no: int, seq: int | None = None) -> bytes:
    """LLDP with chassis id 'dpid:<hex>' and port id = port number, as discovery expects; a link
    probe also carries its sequence number (system name 'seq:N') so its loss can be counted."""
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=LLDP_DST, src="02:5a:00:00:00:01", ethertype=ETH_LLDP))
    tlvs = (
        lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED, chassis_id=f"dpid:{dpid:016x}".encode()),
        lldp.PortID(subtype=lldp.PortID.SUB_PORT_COMPONENT, port_id=struct.pack("!I", port_no)),
        lldp.TTL(ttl=120),
    )
    if seq is not None:
        tlvs += (lldp.SystemName(system_name=f"seq:{seq}".encode()),)
    tlvs += (lldp.End(),)
    pkt.add_protocol(lldp.lldp(tlvs))
    pkt.serialize()
    return bytes(pkt.data)


def probe_seq(data: bytes) -> int | None:
    """A link probe's sequence number (None: a discovery frame)."""
    l = packet.Packet(data).get_protocol(lldp.lldp)
    for t in l.tlvs if l is not None else []:
        if isinstance(t, lldp.SystemName) and t.system_name.startswith(b"seq:"):
            return int(t.system_name[4:])
    return None


HOST_CHASSIS = "host:"  # a GPU port's own LLDP frame (testbed.emulation.wiring.host_lldp_frame)


def parse_lldp(data: bytes):
    """(dpid, port number) from a frame built by lldp_frame; ("host", GPU port name) from a GPU
    port's frame; else None."""
    pkt = packet.Packet(data)
    l = pkt.get_protocol(lldp.lldp)
    if l is None or len(l.tlvs) < 2:
        return None
    chassis, port = l.tlvs[0], l.tlvs[1]
    cid = chassis.chassis_id.decode(errors="replace")
    if cid.startswith(HOST_CHASSIS):
        return "host", cid[len(HOST_CHASSIS) :]
    if not cid.startswith("dpid:") or len(port.port_id) != 4:
        return None
    return int(cid[5:], 16), struct.unpack("!I", port.port_id)[0]


MOD_CHUNK = 256  # flow-mods sent between two yields of the controller's event loop


def probes_due(start_s: float, now_s: float, hz: float, n_targets: int) -> int:
    """How many link probes should have gone out by now_s: every target once per 1/hz, spread
    evenly (target k of a round at k / (hz * n_targets) into it)."""
    return int((now_s - start_s) * hz * n_targets) + 1


class Pace:
    """A recovery's flow-mod pace: after each chunk, how long to wait so that the mods sent so far
    average at most mods_per_s since the recovery began (0: never wait).

    Why: on a 2-core machine the controller serialising and ovs-vswitchd applying an unpaced
    recovery (17,337 entries on a 256-GPU ROFT, in 8-11 s) held both cores above the fidelity
    guard's limit; spread over longer, the same entries leave room for the replay. Averaging from
    the start (not per chunk) lets a chunk sent late (the loop was busy) be followed sooner."""

    def __init__(self, mods_per_s: float, t0_s: float):
        self.mods_per_s, self.t0_s, self.sent = float(mods_per_s), float(t0_s), 0

    def wait_s(self, n: int, now_s: float) -> float:
        self.sent += n
        if self.mods_per_s <= 0:
            return 0.0
        return max(0.0, self.t0_s + self.sent / self.mods_per_s - now_s)


class ZlabRoutes(BaseApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        run_dir = os.environ.get("ZLAB_RUN_DIR")
        if not run_dir:
            raise RuntimeError("ZLAB_RUN_DIR is not set: start the app with 'zlab controller RUN_DIR'")
        with open(os.path.join(run_dir, "flows.json"), encoding="utf-8") as fh:
            flows = json.load(fh)
        if flows.get("schema") != "zlab.flows/1":
            raise RuntimeError(f"{run_dir}/flows.json: unknown schema {flows.get('schema')!r}")
        self.switches = flows["switches"]  # name -> {dpid, entries}
        self.by_dpid = {int(v["dpid"]): name for name, v in self.switches.items()}
        out = os.path.join(run_dir, "controller")
        os.makedirs(out, exist_ok=True)
        self.installed = JsonLines(os.path.join(out, "installed.jsonl"))
        self.lldp_log = JsonLines(os.path.join(out, "lldp.jsonl"))
        self.reconnects = JsonLines(os.path.join(out, "reconnects.jsonl"))  # held vs expected entries
        self.port_stats = JsonLines(os.path.join(out, "port_stats.jsonl"))
        self.flow_stats = JsonLines(os.path.join(out, "flow_stats.jsonl"))
        self.stats_interval_s = float(os.environ.get("ZLAB_STATS_INTERVAL_S", "1.0"))
        self.lldp_interval_s = float(os.environ.get("ZLAB_LLDP_INTERVAL_S", "1.0"))
        self.datapaths = {}
        self.installed_here: set[str] = set()  # switches this process has sent a whole table to
        self.ports = {}  # dpid -> port numbers
        self.current = {name: list(v["entries"]) for name, v in self.switches.items()}  # what each switch holds
        self.plan = None
        fpath = os.path.join(run_dir, "failures.json")
        if os.path.exists(fpath):  # a failure experiment: detect, and recover as failures.json says
            with open(fpath, encoding="utf-8") as fh:
                self.plan = RecoveryPlan(json.load(fh), {n: v["entries"] for n, v in self.switches.items()})
            d = self.plan.detect
            self.current = {name: list(v) for name, v in self.plan.healthy.items()}  # + fast-failover transit
            self.probes = ProbeLoss(int(d["probe_window"]), int(d["probe_min_lost"]), int(d["probe_timeout_s"] * 1e9))
            self.fail_log = JsonLines(os.path.join(out, "failures.jsonl"))  # CLOCK_MONOTONIC, as the agents
            self.port_down: dict[tuple[str, int], bool] = {}
            self.down_status: set[int] = set()
            self.down_gray: set[int] = set()
            self.detected: frozenset = frozenset()
            self.barriers: dict[int, str] = {}
            self.pending: frozenset | None = None  # the latest detected state not yet installed
            self.installing = False
            self.probe_seq = 0
            self.probes_sent = self.probes_back = 0
            hub.spawn(self._fail_loop)
        self.poller = hub.spawn(self._poll)

    # ---- proactive install ------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        dp = ev.msg.datapath
        name = self.by_dpid.get(dp.id)
        if name is None:
            self.logger.error("unknown dpid %016x connected; not in flows.json, ignoring", dp.id)
            return
        if name in self.installed_here:
            # a reconnection (OVS drops a channel after its inactivity probe goes unanswered): the
            # switch kept its table (fail-mode secure), so ask how many of our entries it holds and
            # re-send the table only if that is not what it should hold. Re-sending deletes first,
            # and at 1,024 GPUs a reinstall under load left a switch without its table for seconds:
            # probes through it were lost and its counters restarted (issue 27).
            self._attach(dp)
            parser, ofp = dp.ofproto_parser, dp.ofproto
            dp.send_msg(
                parser.OFPAggregateStatsRequest(
                    dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, COOKIE, 0xFFFFFFFFFFFFFFFF, parser.OFPMatch()
                )
            )
            return
        self._install_table(dp, name)
        self._attach(dp)

    @set_ev_cls(ofp_event.EventOFPAggregateStatsReply, MAIN_DISPATCHER)
    def on_aggregate(self, ev):
        dp = ev.msg.datapath
        name = self.by_dpid.get(dp.id)
        if name is None:
            return
        held, expected = ev.msg.body.flow_count, len(self.current[name]) + FIXED_ENTRIES
        self.reconnects.write(
            {
                "t_ns": time.time_ns(),
                "switch": name,
                "dpid": dp.id,
                "held": held,
                "expected": expected,
            }
        )
        if held != expected:
            self._install_table(dp, name)

    def _attach(self, dp) -> None:
        """Track the switch's channel and ask for its ports (their state is what failures read)."""
        self.datapaths[dp.id] = dp
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))

    def _install_table(self, dp, name: str) -> None:
        """Delete ours, then the whole table (and fast-failover groups first)."""
        self.installed_here.add(name)
        entries = self.current[name]
        backup = self._backup_of(name)
        if backup is not None:  # fast-failover: the groups before the entries that use them
            for mod in ff_groups(dp, [(e["out_port"], backup(e)) for e in entries if backup(e) is not None]):
                dp.send_msg(mod)
        mods = build_flow_mods(dp, entries, backup)
        for k in range(0, len(mods), MOD_CHUNK):
            self._send_chunk(dp, mods[k : k + MOD_CHUNK])
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
        self.installed.write(
            {
                "t_ns": time.time_ns(),
                "switch": name,
                "dpid": dp.id,
                "entries": len(entries) + FIXED_ENTRIES,
                "ff_protected": sum(1 for e in entries if backup is not None and backup(e) is not None),
            }
        )

    def _backup_of(self, name: str):
        """entry -> its fast-failover backup port while the entry still outputs to its protected
        primary (None: no fast-failover in this run)."""
        if self.plan is None or not self.plan.ff_backup:
            return None
        ff = self.plan.ff_backup
        return lambda e: backup_for(ff, name, e)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def on_port_desc(self, ev):
        dp = ev.msg.datapath
        self.ports[dp.id] = sorted(p.port_no for p in ev.msg.body if p.port_no < dp.ofproto.OFPP_MAX)
        if self.plan is not None:  # the poll confirms (or replaces) port-status messages
            for p in ev.msg.body:
                if p.port_no < dp.ofproto.OFPP_MAX:
                    self._port_seen(dp, p, "port_desc")

    # ---- failures: detect, then install the model's degraded tables ----------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev):
        if self.plan is not None:
            self._port_seen(ev.msg.datapath, ev.msg.desc, "port_status")

    def _port_seen(self, dp, desc, via: str) -> None:
        ofp = dp.ofproto
        name = self.by_dpid.get(dp.id)
        key = (name, desc.port_no)
        down = bool(desc.state & ofp.OFPPS_LINK_DOWN) or bool(desc.config & ofp.OFPPC_PORT_DOWN)
        if self.port_down.get(key, False) == down:
            self.port_down[key] = down
            return
        self.port_down[key] = down
        link = self.plan.port_link.get(key)
        self.fail_log.write(
            {
                "t_ns": time.monotonic_ns(),
                "event": "port_down" if down else "port_up",
                "switch": name,
                "port": desc.port_no,
                "link": link,
                "via": via,
            }
        )
        self.down_status = {self.plan.port_link[k] for k, d in self.port_down.items() if d and k in self.plan.port_link}
        for d, lk in self.plan.probe_dirs.items():  # probes lost while a port was down say nothing about gray loss
            if lk == link:
                self.probes.forget(d)
        self.down_gray = {self.plan.probe_dirs[d] for d in self.probes.bad}
        self._recompute(via)

    def _recompute(self, via: str) -> None:
        down = frozenset(self.down_status | self.down_gray)
        if down == self.detected:
            return
        self.detected = down
        self.fail_log.write(
            {
                "t_ns": time.monotonic_ns(),
                "event": "state",
                "down_links": sorted(down),
                "state": self.plan.state_name(down),
                "via": via,
            }
        )
        if self.plan.mode in ("controller", "fast-failover", "both"):
            # not in this event handler: while it runs the app reads no events, its queue fills
            # with the switches' replies, os-ken's receive loops block on it, OVS stops reading a
            # channel whose replies go unread and drops it after its inactivity probe (measured:
            # 24-188 disconnections while a ROFT recovery sent 16 x 16,400 entries)
            self.pending = down
            if not self.installing:
                self.installing = True
                hub.spawn(self._installer)

    def _installer(self) -> None:
        try:
            while self.pending is not None:
                down, self.pending = self.pending, None
                self._install(down)
        finally:
            self.installing = False

    def _install(self, down: frozenset) -> None:
        target = self.plan.target(down)
        if target is None:
            self.fail_log.write({"t_ns": time.monotonic_ns(), "event": "unplanned", "down_links": sorted(down)})
            return
        changes = {name: diff(self.current[name], entries) for name, entries in target.items()}
        pace = Pace(self.plan.install_mods_per_s, time.monotonic())
        # the smallest changes first: the switches at the failed cable (a ROFT leaf there changes
        # 949 entries, the other leaves 16,400 each) stop sending into it seconds, not a minute, sooner
        for name in sorted(changes, key=lambda n: sum(map(len, changes[n]))):
            entries, (delete, add) = target[name], changes[name]
            dp = self.datapaths.get(self.switches[name]["dpid"])
            if dp is None or not (delete or add):
                continue
            self.current[name] = list(entries)  # before the sends below yield: a concurrent diff sees it
            backup = self._backup_of(name)
            # adds, then deletes (make before break), in chunks with a yield after each: building and
            # serializing a ROFT leaf's 16,400 entries took the controller 3-8 s without one, the
            # other switches' echo requests went unanswered, OVS dropped them after its 5 s
            # inactivity probe, and each reconnection re-sent a whole table (30 in one run)
            for k in range(0, len(add), MOD_CHUNK):
                self._send_chunk(dp, entry_mods(dp, [], add[k : k + MOD_CHUNK], backup), pace)
            for k in range(0, len(delete), MOD_CHUNK):
                self._send_chunk(dp, entry_mods(dp, delete[k : k + MOD_CHUNK], [], backup), pace)
            barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
            dp.set_xid(barrier)
            self.barriers[barrier.xid] = name
            dp.send_msg(barrier)
            self.fail_log.write(
                {
                    "t_ns": time.monotonic_ns(),
                    "event": "install",
                    "switch": name,
                    "deleted": len(delete),
                    "added": len(add),
                    "down_links": sorted(down),
                }
            )

    @staticmethod
    def _send_chunk(dp, mods, pace: Pace | None = None) -> None:
        for mod in mods:
            dp.send_msg(mod)
        # a yield lets the other switches' channels (echo replies, port status) run; a paced
        # recovery also waits until its pace allows the next chunk
        hub.sleep(pace.wait_s(len(mods), time.monotonic()) if pace is not None else 0)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev):
        if self.plan is not None and ev.msg.xid in self.barriers:
            self.fail_log.write(
                {"t_ns": time.monotonic_ns(), "event": "installed", "switch": self.barriers.pop(ev.msg.xid)}
            )

    def _fail_loop(self):
        """Poll port state, send link probes and judge them. The probes of a period go out in
        batches once a second (every probe period, if shorter), not all at once: 544 probes and
        their packet-ins in one burst every 10 s (a 256-GPU ROFT at probe_hz 0.1) put the machine
        above the fidelity guard's limit in the 250 ms after each burst; sent a few at every 50 ms
        tick they woke ovs-vswitchd, which polls every port on each wake-up, twenty times a second
        (its mean load went from 0.21 to 0.41 of a core). Their loss is judged once per probe
        period (at most once a second): nothing changes in between but the probes' age."""
        d = self.plan.detect
        poll_s, hz = float(d["poll_s"]), float(d["probe_hz"])
        start = next_poll = next_judge = next_batch = time.monotonic()
        tick = min(poll_s or 1.0, 1.0 / hz if hz else 1.0, 0.05)
        targets = [("self", name) for name in self.switches] + list(self.plan.probe_dirs)
        sent = 0  # probes sent so far; the k-th goes to targets[k % len(targets)]
        while True:
            now = time.monotonic()
            if poll_s and now >= next_poll:
                for dpid, dp in list(self.datapaths.items()):
                    if self.by_dpid.get(dpid) in self.plan.poll_switches:
                        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
                next_poll = now + poll_s
            if hz and targets and now >= next_batch:
                due = probes_due(start, now, hz, len(targets))
                self._send_probes([targets[k % len(targets)] for k in range(sent, due)])
                sent = max(sent, due)
                next_batch = now + min(1.0, 1.0 / hz)
            if now >= next_judge:
                next_judge = now + min(1.0, 1.0 / hz if hz else 1.0)
                changed = False
                for (name, port), gray, lost, judged in self.probes.update(
                    time.monotonic_ns(), self.plan.probe_receiver
                ):
                    link = self.plan.probe_dirs[(name, port)]
                    self.fail_log.write(
                        {
                            "t_ns": time.monotonic_ns(),
                            "event": "gray" if gray else "gray_clear",
                            "switch": name,
                            "port": port,
                            "link": link,
                            "lost": lost,
                            "judged": judged,
                            "via": "probes",
                        }
                    )
                    changed = True
                if changed:
                    self.down_gray = {self.plan.probe_dirs[d] for d in self.probes.bad}
                    self._recompute("probes")
            hub.sleep(tick)

    def _send_probes(self, targets) -> None:
        """One probe to each target: ("self", switch) goes out of the switch's control channel and
        straight back; (switch, port) crosses the cable at that port."""
        t = time.monotonic_ns()
        for name, port in targets:
            self_probe = name == "self"
            if self_probe:
                name, port = port, 0
            dpid = self.switches[name]["dpid"]
            dp = self.datapaths.get(dpid)
            if dp is None:
                continue
            ofp, parser = dp.ofproto, dp.ofproto_parser
            self.probe_seq += 1
            out = (
                parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
                if self_probe
                else parser.OFPActionOutput(port)
            )
            dp.send_msg(
                parser.OFPPacketOut(
                    dp,
                    buffer_id=ofp.OFP_NO_BUFFER,
                    in_port=ofp.OFPP_CONTROLLER,
                    actions=[out],
                    data=lldp_frame(dpid, port, self.probe_seq),
                )
            )
            self.probes.sent_probe(("self", name) if self_probe else (name, port), self.probe_seq, t)
            if not self_probe:
                self.probes_sent += 1

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def on_dead(self, ev):
        self.datapaths.pop(ev.datapath.id, None)

    # ---- cabling discovery ------------------------------------------------------------
    def _send_lldp(self):
        for dpid, dp in list(self.datapaths.items()):
            ofp, parser = dp.ofproto, dp.ofproto_parser
            facing = self.switches[self.by_dpid[dpid]].get("lldp_ports")  # switch-facing ports only
            for port_no in self.ports.get(dpid, []):
                if facing is not None and port_no not in facing:
                    continue
                out = parser.OFPPacketOut(
                    dp,
                    buffer_id=ofp.OFP_NO_BUFFER,
                    in_port=ofp.OFPP_CONTROLLER,
                    actions=[parser.OFPActionOutput(port_no)],
                    data=lldp_frame(dpid, port_no),
                )
                dp.send_msg(out)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        got = parse_lldp(msg.data)
        if got is None:
            return
        if got[0] == "host":  # a NIC cable: which switch port the GPU port is plugged into
            self.lldp_log.write(
                {
                    "t_ns": time.time_ns(),
                    "src_host_port": got[1],
                    "dst_dpid": msg.datapath.id,
                    "dst": self.by_dpid.get(msg.datapath.id),
                    "dst_port": msg.match["in_port"],
                }
            )
            return
        src_dpid, src_port = got
        if self.plan is not None:
            seq = probe_seq(msg.data)
            if seq is not None:  # a link probe came across its cable (port 0: a control-channel self-probe)
                src = self.by_dpid.get(src_dpid)
                self.probes.got_probe(("self", src) if src_port == 0 else (src, src_port), seq)
                self.probes_back += 1
                return
        self.lldp_log.write(
            {
                "t_ns": time.time_ns(),
                "src_dpid": src_dpid,
                "src_port": src_port,
                "src": self.by_dpid.get(src_dpid),
                "dst_dpid": msg.datapath.id,
                "dst": self.by_dpid.get(msg.datapath.id),
                "dst_port": msg.match["in_port"],
            }
        )

    # ---- counters ---------------------------------------------------------------------
    def _poll(self):
        """Each switch's statistics once per interval, the switches spread evenly across it. Why
        spread: asking every switch at once is a burst (ovs-vswitchd answering, this process parsing
        every flow entry) that on a 256-GPU fabric (32 tables of ~1,000 entries) pushed the machine
        over the fidelity guard's limit in the 250 ms it lasted; spread, the same work is a steady
        load a few times smaller at its peak."""
        next_lldp = next_stats = 0.0
        turn = 0  # round robin over the switches connected now
        while True:
            now = time.monotonic()
            if self.lldp_interval_s > 0 and now >= next_lldp:  # 0: no discovery (replays)
                self._send_lldp()
                next_lldp = now + self.lldp_interval_s
            if now >= next_stats:
                dps = list(self.datapaths.values())
                if dps:
                    self._request_stats(dps[turn % len(dps)])
                    turn += 1
                next_stats = now + self.stats_interval_s / max(len(dps), 1)
            wake = min(next_stats, next_lldp) if self.lldp_interval_s > 0 else next_stats
            hub.sleep(max(0.0, wake - time.monotonic()))

    @staticmethod
    def _request_stats(dp):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
        dp.send_msg(
            parser.OFPFlowStatsRequest(
                dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, COOKIE, 0xFFFFFFFFFFFFFFFF, parser.OFPMatch()
            )
        )

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def on_port_stats(self, ev):
        t = time.time_ns()
        name = self.by_dpid.get(ev.msg.datapath.id)
        for s in ev.msg.body:
            if s.port_no >= ev.msg.datapath.ofproto.OFPP_MAX:
                continue
            self.port_stats.write(
                {
                    "t_ns": t,
                    "switch": name,
                    "port": s.port_no,
                    "rx_packets": s.rx_packets,
                    "tx_packets": s.tx_packets,
                    "rx_bytes": s.rx_bytes,
                    "tx_bytes": s.tx_bytes,
                    "rx_dropped": s.rx_dropped,
                    "tx_dropped": s.tx_dropped,
                }
            )

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def on_flow_stats(self, ev):
        t = time.time_ns()
        name = self.by_dpid.get(ev.msg.datapath.id)
        for s in ev.msg.body:
            match = {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.match.items()}
            self.flow_stats.write(
                {
                    "t_ns": t,
                    "switch": name,
                    "priority": s.priority,
                    "match": match,
                    "packets": s.packet_count,
                    "bytes": s.byte_count,
                }
            )
