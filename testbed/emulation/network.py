"""Instantiate a resolved fabric model in Mininet: one host per GPU, one OVS bridge per switch.

The builder only instantiates: names, dpids, MACs, IPs and port numbers all come from the
model. Hosts get /32 addresses, explicit routes (ZCube: cons traffic to rail addresses and
vice versa) and permanent ARP entries, so nothing floods. Every link is shaped by our own
htb + pfifo (never Mininet's TCLink, which silently drops what it cannot do), and every
resource is recorded in the run registry before it exists.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field

from ..fabric.hostconf import ip_commands
from ..fabric.model import Fabric
from ..lab import procs
from ..lab.registry import Registry
from ..lab.sh import CommandError, run
from ..lab.state import datapath as recorded_datapath
from . import faultpoint
from .config import EmulationConfig, EmulationError, LabFailure, frame_bytes, scaled_rate_bps, tc_commands
from .offload import tx_checksum_off

# OVS drops a controller channel whose echo request goes unanswered for its inactivity probe (5 s
# by default) and the app then re-sends that switch's table. At 1,024 GPUs the controller, busy
# with 67,712 entries' statistics and LLDP on 2,048 ports, let 20 switches' channels lapse 38
# times while the tables went in and during the reachability proof (issue 27). The
# channel is local and the app's process is supervised by zlab, so a slow probe costs nothing.
INACTIVITY_PROBE_MS = 30_000


def _mininet():
    """Import Mininet lazily: the fabric model and offline tests must not need it."""
    from mininet.link import Link
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import Host, OVSSwitch, RemoteController
    from mininet.util import errRun

    setLogLevel(os.environ.get("ZLAB_MININET_LOG", "warning"))

    class ZlabSwitch(OVSSwitch):
        """OVSSwitch whose bridge carries external_ids:zlab-run=<run id> from its first
        transaction, so `zlab clean` can prove a bridge is this run's before deleting it."""

        def __init__(self, name, run_id="", **params):
            self.run_id = run_id
            super().__init__(name, **params)

        def bridgeOpts(self):
            return super().bridgeOpts() + f" external_ids:zlab-run={self.run_id}"

        def vsctl(self, *args, **kwargs):
            """Mininet starts each switch with one ovs-vsctl in the node's shell and ignores what it
            says; keep any error, so a port missing from OVS is reported with its cause (issue 27:
            at 1,024 GPUs switch ports were missing with no error until a later step met them).
            The controller record it creates gets zlab's inactivity probe (INACTIVITY_PROBE_MS)."""
            args = tuple(
                a.replace(
                    "create Controller target=", f"create Controller inactivity_probe={INACTIVITY_PROBE_MS} target="
                )
                if isinstance(a, str)
                else a
                for a in args
            )
            if self.batch or kwargs:
                out = super().vsctl(*args, **kwargs)
            else:  # not through the node's pty: a terminal line holds 4,095 characters, and a 64-port
                # switch's start command is longer (issue 27: every port of ZCube(32,2) was cut off)
                o, e, _rc = errRun("ovs-vsctl " + " ".join(str(a).strip() for a in args), shell=True)
                out = o + e
            if out and "ovs-vsctl:" in out:
                self.vsctl_errors = [*getattr(self, "vsctl_errors", []), out.strip()[:400]]
            return out

        @classmethod
        def batchStartup(cls, switches, run=errRun):
            """Every switch's start command in a few ovs-vsctl transactions (Mininet cuts them at
            128,000 characters), not one per switch: ovs-vswitchd reconfigures every port it has on
            each transaction, so one per switch made starting the bridges quadratic in ports (issue
            27: ZCube(32,2)'s 64 bridges of 64 ports took minutes, the later ones seconds each).
            Not through a node's pty either (see vsctl). What ovs-vsctl says is kept for the
            ports check."""
            said = []

            def run_keep(cmd, **kw):
                o, e, rc = run(cmd, **kw)
                if "ovs-vsctl:" in o + e or rc:
                    said.append(f"(exit {rc}) {(o + e).strip()[:400]}")
                return o, e, rc

            started = super().batchStartup(switches, run=run_keep)
            for sw in switches:
                sw.vsctl_errors = [*getattr(sw, "vsctl_errors", []), *said]
            return started

    class ZlabController(RemoteController):
        """The run's own controller, which LiveFabric has already seen listening (a socket connect).
        Mininet's check telnets to the port and decodes the reply as UTF-8: when the controller's
        OpenFlow HELLO arrives first, a non-UTF-8 byte in its xid raised UnicodeDecodeError (a CI run)."""

        def checkListening(self):
            pass

    return Mininet, Host, ZlabSwitch, ZlabController, Link


@dataclass
class Emulation:
    fabric: Fabric
    cfg: EmulationConfig
    run_id: str
    registry: Registry
    net: object = None
    datapath: str = ""
    miswired: list = field(default_factory=list)
    timings_s: dict = field(default_factory=dict)


def resolve_datapath(cfg: EmulationConfig) -> str:
    dp = recorded_datapath() if cfg.datapath == "auto" else cfg.datapath
    if dp is None:
        raise LabFailure("no OVS datapath recorded: run bash scripts/provision.sh first")
    return dp


def switch_side_links(fab: Fabric, miswire: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """(port a, port b) per cable as it will be plugged, after an optional deliberate swap of
    the far (b) ends of two fabric links — so the cabling check has something to find."""
    pairs = [(l.a, l.b) for l in fab.links]
    for i, j in miswire or []:
        (a1, b1), (a2, b2) = pairs[i], pairs[j]
        pairs[i], pairs[j] = (a1, b2), (a2, b1)
    return pairs


def pick_miswire(fab: Fabric, spec: str | None) -> list[tuple[int, int]]:
    """`--miswire` with no value: the first two fabric links that share no switch;
    with 'PORT1,PORT2': the cables on those ports — two switch ports of fabric cables, or two GPU
    ports (NIC cables: their switch ends are swapped)."""
    fabric_links = [l for l in fab.links if l.kind == "fabric"]
    if spec in (None, "", "auto"):
        first = fabric_links[0]
        nodes1 = {fab.ports[first.a].node, fab.ports[first.b].node}
        for other in fabric_links[1:]:
            if not nodes1 & {fab.ports[other.a].node, fab.ports[other.b].node}:
                return [(first.id, other.id)]
        raise EmulationError("no two fabric links without a shared switch to swap")
    names = [s.strip() for s in spec.split(",")]
    if len(names) != 2:
        raise EmulationError(
            f"--miswire takes two switch ports (za0-p5,za1-p5) or two GPU ports (g0-p0,g1-p0); got {spec!r}"
        )
    nic_links = {fab.ports[l.a].name: l for l in fab.links if l.kind == "nic"}
    if all(n in nic_links for n in names):
        found = [nic_links[n].id for n in names]
    else:
        found = []
        for name in names:
            link = next((l for l in fabric_links if name in (fab.ports[l.a].name, fab.ports[l.b].name)), None)
            if link is None:
                raise EmulationError(
                    f"--miswire: {name!r} is neither a switch port on a fabric cable nor a GPU port "
                    "(give two of the same kind)"
                )
            found.append(link.id)
    if found[0] == found[1]:
        raise EmulationError("--miswire: both ports are on the same cable")
    return [tuple(found)]


def precheck_names(fab: Fabric) -> None:
    """Refuse to build over existing bridges or interfaces: Mininet would silently delete them."""
    try:
        existing = set(run(["ovs-vsctl", "--timeout=10", "list-br"]).split())
    except CommandError as exc:
        raise LabFailure(f"OVS is not reachable ({exc}); run: bash scripts/provision.sh --services") from None
    clash = sorted(existing & {sw.name for sw in fab.switches})
    links = sorted(
        p.name for p in fab.ports if fab.nodes[p.node].role == "switch" and os.path.exists(f"/sys/class/net/{p.name}")
    )
    if clash or links:
        raise LabFailure(
            f"names already in use: bridges {clash[:5]} interfaces {links[:5]}; if a killed zlab run left them, "
            "run 'zlab clean'; zlab never deletes what it did not create"
        )


def prepare(
    fab: Fabric, cfg: EmulationConfig, run_id: str, registry: Registry, miswire: list[tuple[int, int]] | None = None
) -> Emulation:
    """The emulation's handle, before anything exists: the caller holds it first, so its teardown
    reaches whatever `build` manages to create even when `build` fails halfway (a 1,024-GPU
    bring-up that failed in its tc batch left 1,024 veth pairs because the handle was only
    returned on success)."""
    cfg.validate(fab)
    dp = resolve_datapath(cfg)
    return Emulation(fab, cfg, run_id, registry, datapath=dp, miswired=list(miswire or []))


def build(em: Emulation, controller_port: int) -> Emulation:
    """Create the network into `em` (from `prepare`); on failure the caller's `stop(em)` removes it."""
    fab, registry, dp = em.fabric, em.registry, em.datapath
    Mininet, Host, ZlabSwitch, ZlabController, Link = _mininet()
    for sw in fab.switches:
        registry.bridge(sw.name)
    for p in fab.ports:
        if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0:
            registry.link(p.name)
    t0 = time.perf_counter()
    net = Mininet(
        topo=None,
        build=False,
        controller=None,
        link=Link,
        host=Host,
        autoSetMacs=False,
        autoStaticArp=False,
        inNamespace=False,
        waitConnected=False,
    )
    em.net = net
    net.addController(ZlabController("c0", ip="127.0.0.1", port=controller_port))
    for g in fab.gpus:
        net.addHost(g.name, ip=None, inNamespace=True)
    for sw in fab.switches:
        net.addSwitch(
            sw.name,
            cls=ZlabSwitch,
            run_id=em.run_id,
            dpid=f"{sw.dpid:016x}",
            datapath="user" if dp == "netdev" else "kernel",
            protocols="OpenFlow13",
            failMode="secure",
            batch=True,  # started together by batchStartup, see ZlabSwitch
        )
    for node in list(net.hosts) + list(net.switches):
        registry.process(node.pid, f"mininet shell {node.name}")
    for a, b in switch_side_links(fab, em.miswired):
        pa, pb = fab.ports[a], fab.ports[b]
        na, nb = fab.nodes[pa.node], fab.nodes[pb.node]
        net.addLink(
            net.get(na.name),
            net.get(nb.name),
            port1=pa.number,
            port2=pb.number,
            intfName1=pa.name,
            intfName2=pb.name,
            addr1=pa.mac,
            addr2=pb.mac,
        )
    net.build()
    for p in fab.ports:
        if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0:
            registry.link(p.name, int(open(f"/sys/class/net/{p.name}/ifindex").read()))
    faultpoint.hit("links")
    em.timings_s["mininet_build"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    _configure_switch_ports(em)
    em.timings_s["configure_switch_ports"] = time.perf_counter() - t1
    _configure_hosts(em)
    em.timings_s["configure"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    net.start()
    _check_ports_attached(em)
    em.timings_s["start_bridges"] = time.perf_counter() - t2
    faultpoint.hit("bridges")
    _leave_qdiscs_to_us(em)
    _apply_switch_tc(em)
    em.timings_s["start"] = time.perf_counter() - t2
    return em


def _switch_ports(fab: Fabric):
    return [p for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0]


def _configure_switch_ports(em: Emulation) -> None:
    fab, cfg = em.fabric, em.cfg
    lines = []
    for p in _switch_ports(fab):
        lines.append(f"link set dev {p.name} mtu {cfg.mtu_bytes} up")
    run(["ip", "-batch", "-"], input="\n".join(lines) + "\n")
    try:
        tx_checksum_off(p.name for p in _switch_ports(fab))  # userspace OVS: no checksum offload
    except OSError as exc:
        raise CommandError(str(exc)) from None


def _leave_qdiscs_to_us(em: Emulation) -> None:
    """Tell OVS not to manage the switch ports' qdiscs (QoS type linux-noop, one row shared by all).

    Why: with no QoS row OVS treats a port as "linux-default" and, when it first configures the
    port, deletes any other root qdisc — our htb. It does so asynchronously in its reconfigure
    loop, so whether our shaping survived depended on timing: at 1,024 GPUs the tc batch met an
    htb OVS had not yet deleted and `qdisc replace` of an htb root fails ("Change operation not
    supported by specified qdisc": htb has no change operation). ovs-vsctl waits until
    ovs-vswitchd has applied this, so afterwards no earlier reconfigure is still pending and OVS
    never touches these qdiscs again. The QoS row goes with the ports (OVS garbage-collects it).
    """
    cmd = ["ovs-vsctl", "--timeout=120", "--", "--id=@noop", "create", "qos", "type=linux-noop"]
    for p in _switch_ports(em.fabric):
        cmd += ["--", "set", "port", p.name, "qos=@noop"]
    run(cmd, timeout=150)


def _check_ports_attached(em: Emulation) -> None:
    """Every switch port is a port of its bridge in OVS (one ovsdb read), or the start failed."""
    rows = json.loads(run(["ovs-vsctl", "--timeout=60", "--format=json", "--columns=name", "list", "port"]))["data"]
    have = {r[0] for r in rows}
    missing = [p.name for p in _switch_ports(em.fabric) if p.name not in have]
    if missing:
        said = [e for sw in em.net.switches for e in getattr(sw, "vsctl_errors", [])]
        raise LabFailure(
            f"{len(missing)} switch ports are not in OVS after Mininet started the bridges, e.g. {missing[:5]}; "
            f"ovs-vsctl said: {said[0] if said else 'nothing'}"
        )


def _root_qdiscs() -> dict[str, dict]:
    """{device: its root qdisc} for every root-namespace device, one tc call."""
    out = {}
    for q in json.loads(run(["tc", "-j", "qdisc", "show"]) or "[]"):
        if q.get("root"):
            out[q["dev"]] = q
    return out


def _apply_switch_tc(em: Emulation) -> None:
    """Shape every switch port (htb + pfifo), then check that each one carries exactly that.

    A port that already has an htb root (from an earlier attempt) has it deleted first in the same
    batch: `qdisc replace` cannot change an htb root in place."""
    fab, cfg = em.fabric, em.cfg
    ports = _switch_ports(fab)
    roots = _root_qdiscs()
    lines = []
    for p in ports:
        if roots.get(p.name, {}).get("kind") == "htb":
            lines.append(f"qdisc del dev {p.name} root")
        lines += tc_commands(
            p.name, scaled_rate_bps(p.rate_bps, cfg), cfg.mtu_bytes, cfg.queue_limit_pkts, frame_bytes(cfg)
        )
    faultpoint.hit("shaping")
    run(["tc", "-batch", "-"], input="\n".join(lines) + "\n", timeout=300)
    roots = _root_qdiscs()
    bad = [p.name for p in ports if roots.get(p.name, {}).get("kind") != "htb" or roots[p.name].get("handle") != "1:"]
    if bad:
        raise LabFailure(f"{len(bad)} switch ports lost their htb shaping after it was applied, e.g. {bad[:5]}")


def host_script(fab: Fabric, gpu: int, cfg: EmulationConfig) -> str:
    """Shell commands that configure one GPU host (pure: tested offline)."""
    ports = [fab.gpu_port(gpu, k) for k in range(fab.ports_per_gpu)]
    port_rp = " ".join(f"net.ipv4.conf.{p.name.replace('.', '/')}.rp_filter=0" for p in ports)
    cmds = [
        # one sysctl and one nft process per host (at 1,024 GPUs each process per host is a thousand)
        "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"
        f" net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 {port_rp}",
        # RoCE frames are read from packet sockets by the agent; the kernel's UDP stack must
        # not answer them with ICMP port-unreachable (packet sockets see frames before this)
        "nft -f - <<'ZLAB_EOF'\nadd table inet zlab\n"
        "add chain inet zlab input { type filter hook input priority 0; }\n"
        "add rule inet zlab input udp dport 4791 drop\nZLAB_EOF",
    ]
    for p in ports:
        cmds.append(f"ethtool -K {p.name} tx off >/dev/null")
    batch = ip_commands(fab, gpu, cfg.mtu_bytes)
    script = "\n".join(cmds) + "\nip -batch - <<'ZLAB_EOF'\n" + "\n".join(batch) + "\nZLAB_EOF\n"
    tc = []
    for p in ports:
        tc += tc_commands(
            p.name, scaled_rate_bps(p.rate_bps, cfg), cfg.mtu_bytes, cfg.host_queue_limit_pkts, frame_bytes(cfg)
        )
    script += "tc -batch - <<'ZLAB_EOF'\n" + "\n".join(tc) + "\nZLAB_EOF\n"
    return script


def _configure_hosts(em: Emulation) -> None:
    for h in em.net.hosts:
        gpu = em.fabric.node_by_name[h.name].id
        h.sendCmd("(\nset -e\n" + host_script(em.fabric, gpu, em.cfg) + ") 2>&1; echo __ZLAB_RC=$?")
    failures = []
    for h in em.net.hosts:
        out = h.waitOutput()
        rc = out.rsplit("__ZLAB_RC=", 1)[-1].strip() if "__ZLAB_RC=" in out else "?"
        if rc != "0":
            failures.append(f"{h.name}: rc={rc}: {out[-400:]}")
    if failures:
        raise CommandError("host configuration failed: " + "; ".join(failures[:3]))


def _delete_links_at_once(net) -> None:
    """Delete every link's veth pair in one `ip -batch` from its root-namespace end, and leave
    Mininet only the links that have no such end.

    Why: Mininet's stop deletes each link through both nodes' shells, two round trips per cable
    (the second finds the pair already gone): 35 s of a 256-GPU fabric's teardown. Deleting one
    end of a veth removes the pair, the host end in its namespace included. `-force` goes on past
    a name already gone (a cable a failure experiment removed); whatever is still left is the
    registry cleaner's, which runs after every stop and reports it.
    """
    root_ends, kept = [], []
    for link in net.links:
        end = next((i for i in (link.intf1, link.intf2) if i is not None and not i.node.inNamespace), None)
        if end is None:
            kept.append(link)
        else:
            root_ends.append(end.name)
    if root_ends:
        try:
            run(
                ["ip", "-force", "-batch", "-"],
                input="".join(f"link del {n}\n" for n in root_ends),
                check=False,
                timeout=300,
            )
        except CommandError:
            return  # no batch at all (ip missing, timed out): Mininet deletes them one by one
    net.links = kept


def stop(em: Emulation) -> float:
    """Tear down the Mininet network; returns seconds taken."""
    t = time.perf_counter()
    if em.net is not None:
        shells = [(c.pid, procs.start_time(c.pid)) for c in em.net.controllers if c.pid]
        _delete_links_at_once(em.net)
        em.net.stop()
        em.net = None
        # Mininet's stop leaves the controller node's shell running. It is an interactive bash, which
        # ignores SIGTERM and exits on SIGHUP (what Mininet sends its own node shells): SIGTERM cost
        # every teardown the whole 3 s grace period (measured), a third of a 16-GPU run's wall time.
        procs.terminate_all(shells, first_signal=signal.SIGHUP)
    return time.perf_counter() - t
