"""Run the zlab app against fake datapaths under whichever framework this Python has (os-ken or
Ryu) and print every OpenFlow message it emits, as wire bytes, per switch (JSON on stdout).

    python tests/unit/fake_dp_dump.py RUN_DIR [SWITCH:PORT_DOWN]

Used by test_controller_frameworks.py, which runs it in both environments and compares: the same
app must send byte-identical OpenFlow under both. Needs no numpy or testbed.fabric (the Ryu
environment has only Ryu): the run folder is prepared by the caller.
"""

import importlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))


def main() -> int:
    run_dir = sys.argv[1]
    os.environ["ZLAB_RUN_DIR"] = run_dir
    if "os_ken" not in sys.modules:
        try:
            import eventlet.wsgi  # Ryu's environment: the launcher's shim

            eventlet.wsgi.ALREADY_HANDLED = object()
        except ImportError:
            pass
    from controllers import zlab_routes

    framework = zlab_routes.BaseApp.__module__.split(".")[0]
    zlab_routes.hub.spawn = lambda *a, **k: None
    ofp = zlab_routes.ofproto_v1_3
    parser = importlib.import_module(ofp.__name__ + "_parser")

    class FakeDatapath:
        ofproto, ofproto_parser = ofp, parser

        def __init__(self, dpid):
            self.id, self.sent, self.xid = dpid, [], 0

        def send_msg(self, msg):
            msg.datapath = self
            if msg.xid is None:
                msg.set_xid(0)
            msg.serialize()
            buf = bytearray(msg.buf)
            buf[4:8] = bytes(4)  # transaction ids differ by design; compare the rest
            self.sent.append(buf.hex())

        def set_xid(self, msg):
            self.xid += 1
            msg.set_xid(self.xid)
            return self.xid

    app = zlab_routes.ZlabRoutes()
    flows = json.load(open(os.path.join(run_dir, "flows.json")))
    dps = {}
    for name, v in flows["switches"].items():
        dps[name] = FakeDatapath(int(v["dpid"]))
        app.on_features(type("Ev", (), {"msg": type("M", (), {"datapath": dps[name]})()})())
    if len(sys.argv) > 2:
        name, port = sys.argv[2].split(":")
        desc = parser.OFPPort(
            port_no=int(port),
            hw_addr="00:00:00:00:00:01",
            name=b"x",
            config=0,
            state=ofp.OFPPS_LINK_DOWN,
            curr=0,
            advertised=0,
            supported=0,
            peer=0,
            curr_speed=0,
            max_speed=0,
        )
        app.on_port_status(type("Ev", (), {"msg": type("M", (), {"datapath": dps[name], "desc": desc})()})())
    print(json.dumps({"framework": framework, "sent": {n: dp.sent for n, dp in dps.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
