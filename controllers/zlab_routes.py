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

ETH_IP, ETH_LLDP, IP_UDP = 0x0800, 0x88CC, 17
PRIORITY_LLDP = 65000
LLDP_DST = "01:80:c2:00:00:0e"
COOKIE = 0x5A4C  # "ZL": every entry this app installs


def build_flow_mods(dp, entries: list[dict]) -> list:
    """OFPFlowMods for one switch: delete ours, table-miss drop, LLDP punt, then the table."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    mods = [parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                              out_group=ofp.OFPG_ANY, match=parser.OFPMatch())]
    mods.append(parser.OFPFlowMod(dp, cookie=COOKIE, priority=0, match=parser.OFPMatch(), instructions=[]))
    punt = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                         [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])]
    mods.append(parser.OFPFlowMod(dp, cookie=COOKIE, priority=PRIORITY_LLDP,
                                  match=parser.OFPMatch(eth_type=ETH_LLDP), instructions=punt))
    for e in entries:
        fields = {"eth_type": ETH_IP, "ipv4_dst": (e["ipv4_dst"], e["ipv4_mask"])}
        if e["udp_src"] is not None:
            fields.update(ip_proto=IP_UDP, udp_src=tuple(e["udp_src"]))
        out = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(e["out_port"])])]
        mods.append(parser.OFPFlowMod(dp, cookie=COOKIE, priority=e["priority"], match=parser.OFPMatch(**fields),
                                      instructions=out))
    return mods


def lldp_frame(dpid: int, port_no: int) -> bytes:
    """LLDP with chassis id 'dpid:<hex>' and port id = port number, as discovery expects."""
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=LLDP_DST, src="02:5a:00:00:00:01", ethertype=ETH_LLDP))
    tlvs = (lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED, chassis_id=f"dpid:{dpid:016x}".encode()),
            lldp.PortID(subtype=lldp.PortID.SUB_PORT_COMPONENT, port_id=struct.pack("!I", port_no)),
            lldp.TTL(ttl=120), lldp.End())
    pkt.add_protocol(lldp.lldp(tlvs))
    pkt.serialize()
    return bytes(pkt.data)


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
        return "host", cid[len(HOST_CHASSIS):]
    if not cid.startswith("dpid:") or len(port.port_id) != 4:
        return None
    return int(cid[5:], 16), struct.unpack("!I", port.port_id)[0]


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
        self.port_stats = JsonLines(os.path.join(out, "port_stats.jsonl"))
        self.flow_stats = JsonLines(os.path.join(out, "flow_stats.jsonl"))
        self.stats_interval_s = float(os.environ.get("ZLAB_STATS_INTERVAL_S", "1.0"))
        self.lldp_interval_s = float(os.environ.get("ZLAB_LLDP_INTERVAL_S", "1.0"))
        self.datapaths = {}
        self.ports = {}  # dpid -> port numbers
        self.poller = hub.spawn(self._poll)

    # ---- proactive install ------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        dp = ev.msg.datapath
        name = self.by_dpid.get(dp.id)
        if name is None:
            self.logger.error("unknown dpid %016x connected; not in flows.json, ignoring", dp.id)
            return
        entries = self.switches[name]["entries"]
        for mod in build_flow_mods(dp, entries):
            dp.send_msg(mod)
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
        self.datapaths[dp.id] = dp
        self.installed.write({"t_ns": time.time_ns(), "switch": name, "dpid": dp.id, "entries": len(entries) + 2})

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def on_port_desc(self, ev):
        dp = ev.msg.datapath
        self.ports[dp.id] = sorted(p.port_no for p in ev.msg.body if p.port_no < dp.ofproto.OFPP_MAX)

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
                out = parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                          actions=[parser.OFPActionOutput(port_no)], data=lldp_frame(dpid, port_no))
                dp.send_msg(out)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        got = parse_lldp(msg.data)
        if got is None:
            return
        if got[0] == "host":  # a NIC cable: which switch port the GPU port is plugged into
            self.lldp_log.write({"t_ns": time.time_ns(), "src_host_port": got[1], "dst_dpid": msg.datapath.id,
                                 "dst": self.by_dpid.get(msg.datapath.id), "dst_port": msg.match["in_port"]})
            return
        src_dpid, src_port = got
        self.lldp_log.write({"t_ns": time.time_ns(), "src_dpid": src_dpid, "src_port": src_port,
                             "src": self.by_dpid.get(src_dpid), "dst_dpid": msg.datapath.id,
                             "dst": self.by_dpid.get(msg.datapath.id), "dst_port": msg.match["in_port"]})

    # ---- counters ---------------------------------------------------------------------
    def _poll(self):
        next_lldp = 0.0
        while True:
            now = time.monotonic()
            if self.lldp_interval_s > 0 and now >= next_lldp:  # 0: no discovery (replays)
                self._send_lldp()
                next_lldp = now + self.lldp_interval_s
            for dp in list(self.datapaths.values()):
                parser, ofp = dp.ofproto_parser, dp.ofproto
                dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                dp.send_msg(parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                                       COOKIE, 0xFFFFFFFFFFFFFFFF, parser.OFPMatch()))
            hub.sleep(self.stats_interval_s)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def on_port_stats(self, ev):
        t = time.time_ns()
        name = self.by_dpid.get(ev.msg.datapath.id)
        for s in ev.msg.body:
            if s.port_no >= ev.msg.datapath.ofproto.OFPP_MAX:
                continue
            self.port_stats.write({"t_ns": t, "switch": name, "port": s.port_no, "rx_packets": s.rx_packets,
                                   "tx_packets": s.tx_packets, "rx_bytes": s.rx_bytes, "tx_bytes": s.tx_bytes,
                                   "rx_dropped": s.rx_dropped, "tx_dropped": s.tx_dropped})

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def on_flow_stats(self, ev):
        t = time.time_ns()
        name = self.by_dpid.get(ev.msg.datapath.id)
        for s in ev.msg.body:
            match = {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.match.items()}
            self.flow_stats.write({"t_ns": t, "switch": name, "priority": s.priority, "match": match,
                                   "packets": s.packet_count, "bytes": s.byte_count})
