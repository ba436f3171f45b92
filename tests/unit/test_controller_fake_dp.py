"""The OpenFlow app against a fake datapath: the flow entries it emits are exactly the
model's tables, and a packet matched against them follows the model's route."""

import json

import pytest

from controllers import zlab_routes
from testbed.emulation.runfolder import flows_document
from testbed.fabric import build_fabric
from testbed.fabric.openflow import match_flow_entries
from testbed.fabric.paths import route

try:
    from os_ken.ofproto import ofproto_v1_3 as ofp, ofproto_v1_3_parser as parser
except ImportError:  # pragma: no cover - Ryu
    from ryu.ofproto import ofproto_v1_3 as ofp, ofproto_v1_3_parser as parser


class FakeDatapath:
    ofproto = ofp
    ofproto_parser = parser

    def __init__(self, dpid):
        self.id = dpid
        self.sent = []

    def send_msg(self, msg):
        self.sent.append(msg)


class Event:
    def __init__(self, dp):
        self.msg = type("Msg", (), {"datapath": dp})()


@pytest.fixture
def app(tmp_path, monkeypatch):
    def make(spec):
        fab = build_fabric(spec)
        (tmp_path / "flows.json").write_text(json.dumps(flows_document(fab)))
        monkeypatch.setenv("ZLAB_RUN_DIR", str(tmp_path))
        monkeypatch.setattr(zlab_routes.hub, "spawn", lambda *a, **k: None)
        return fab, zlab_routes.ZlabRoutes()
    return make


def entries_from_mods(mods):
    """Turn emitted OFPFlowMods back into the model's entry form."""
    out = []
    for m in mods:
        if not isinstance(m, parser.OFPFlowMod) or m.command != ofp.OFPFC_ADD or m.priority in (0, 65000):
            continue
        f = dict(m.match.items())
        dst, mask = f["ipv4_dst"] if isinstance(f["ipv4_dst"], tuple) else (f["ipv4_dst"], "255.255.255.255")
        udp = list(f["udp_src"]) if "udp_src" in f else None
        (action,) = m.instructions[0].actions
        out.append({"priority": m.priority, "ipv4_dst": dst, "ipv4_mask": mask, "udp_src": udp,
                    "out_port": action.port})
    return out


@pytest.mark.parametrize("spec", ["zcube:n=4", "roft:gpus=16,gpus_per_server=4,segments=2"])
def test_emitted_entries_equal_the_model_tables(app, spec):
    fab, a = app(spec)
    want = flows_document(fab)["switches"]
    for sw in fab.switches:
        dp = FakeDatapath(sw.dpid)
        a.on_features(Event(dp))
        mods = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod)]
        assert mods[0].command == ofp.OFPFC_DELETE  # stale entries of ours go first
        miss = [m for m in mods if m.priority == 0]
        assert len(miss) == 1 and miss[0].instructions == []  # table-miss: drop (and count)
        lldp = [m for m in mods if m.priority == 65000]
        assert dict(lldp[0].match.items()) == {"eth_type": 0x88CC}
        assert entries_from_mods(mods) == want[sw.name]["entries"]
        assert isinstance(dp.sent[-2], parser.OFPBarrierRequest)
        for m in mods:  # encodes as valid OpenFlow 1.3
            m.datapath = dp
            m.serialize()


def test_installed_entries_route_like_the_model(app):
    fab, a = app("roft:gpus=16,gpus_per_server=4,segments=2")
    tables = {}
    for sw in fab.switches:
        dp = FakeDatapath(sw.dpid)
        a.on_features(Event(dp))
        tables[sw.name] = entries_from_mods(dp.sent)
    for src, dst in (("g0-p0", "g8"), ("g1-p0", "g14"), ("g3-p0", "g7"), ("g0-p0", "g4")):
        for sport in range(49152, 49152 + 48, 5):
            r = route(fab, src, dst, sport=sport)
            for hop in r.hops:
                e = match_flow_entries(tables[hop.switch], r.dst_ip, sport)
                assert e["out_port"] == hop.out_port, (src, dst, sport, hop)


def test_unknown_dpid_is_ignored(app):
    fab, a = app("zcube:n=4")
    dp = FakeDatapath(0xDEAD)
    a.on_features(Event(dp))
    assert dp.sent == []


def test_lldp_frame_round_trip():
    frame = zlab_routes.lldp_frame(0xA00000000003, 7)
    assert zlab_routes.parse_lldp(frame) == (0xA00000000003, 7)


def test_app_refuses_a_foreign_flows_file(tmp_path, monkeypatch):
    (tmp_path / "flows.json").write_text('{"schema": "other"}')
    monkeypatch.setenv("ZLAB_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(zlab_routes.hub, "spawn", lambda *a, **k: None)
    with pytest.raises(RuntimeError, match="unknown schema"):
        zlab_routes.ZlabRoutes()
