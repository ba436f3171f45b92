"""The spec's `congestion:` section on the live fabric: ECN marking at every switch egress port
(testbed/emulation/ecn.py) and DCQCN in the agents (traffic/dcqcn.py), in the run's emulated
units.

Why its own module: the section is written in real units for both engines (docs/congestion.md);
this is the one place that converts it by the scaling rules (times x dilation D, bytes x size
scale sigma, rates x rate scale rho) and says what the emulation cannot run. A threshold below
four emulated frames cannot be represented (a frame is the smallest step the queue takes): the
run records which ports that was true of and its report calls the marking qualitative.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from pathlib import Path

from ..congestion import params as ccparams
from ..congestion.red import per_25g
from ..errors import UserInputError
from ..records import write_json
from . import ecn

MIN_FRAMES = 4  # a threshold below this many emulated frames is qualitative
BIN_FRACTION = 16  # counter bins: Kmax / 16 wide, so 32 bins reach 2 x Kmax
NO_WINDOW_PKTS = 1 << 22  # half the 24-bit PSN space: the go-back-N window cannot be larger


def refuse(spec: dict) -> None:
    """One line (UserInputError, exit 2) for what the emulation cannot run, before anything starts."""
    c = ccparams.validate(spec.get("congestion"))
    d = ccparams.defaults()
    where = "spec error at congestion"
    for key in ("link_delay_ns", "switch_latency_ns"):
        if c[key] != d[key]:
            raise UserInputError(
                f"{where}.{key}: the emulation cannot set it (its links' delay is the veths' own); "
                "set it with --engine ns3"
            )


@dataclass(frozen=True)
class Scaling:
    dilation: float
    rate_scale: float
    size_scale: float


def port_thresholds(cfg: dict, port_rate_real_bps: float, sc: Scaling) -> tuple[int, int]:
    """(Kmin, Kmax) in emulated bytes for a port of this real rate: per 25 Gb/s, then x sigma."""
    c = ccparams.validate(cfg)
    kmin = per_25g(c["ecn_kmin_bytes_per_25g"], port_rate_real_bps)
    kmax = per_25g(c["ecn_kmax_bytes_per_25g"], port_rate_real_bps)
    return round(kmin * sc.size_scale), round(kmax * sc.size_scale)


def marker_configs(fab, cfg: dict, sc: Scaling, frame_bytes: int) -> tuple[dict[str, ecn.PortConfig], list[str]]:
    """Per switch egress port (its interface name): the marker's configuration; and the ports
    whose Kmax is below MIN_FRAMES frames (marking there is qualitative)."""
    c = ccparams.validate(cfg)
    out, coarse = {}, []
    for p in fab.ports:
        if fab.nodes[p.node].role != "switch" or fab.port_link[p.id] < 0:
            continue
        kmin, kmax = port_thresholds(c, p.rate_bps, sc)
        if kmax < MIN_FRAMES * frame_bytes:
            coarse.append(p.name)
        out[p.name] = ecn.PortConfig(
            rate_bytes_per_s=round(p.rate_bps * sc.rate_scale / 8),
            kmin_bytes=kmin,
            kmax_bytes=kmax,
            pmax=c["ecn_pmax"],
            bin_bytes=max(1, kmax // BIN_FRACTION),
        )
    return out, coarse


def dcqcn(cfg: dict, line_rate_emulated_bps: float, sc: Scaling):
    """A QP's DCQCN in emulated units: timers x D, byte counter x sigma, the rate floor x rho (AI
    and HAI are per 25 Gb/s of the line rate, so the emulated line rate scales them)."""
    from traffic.dcqcn import DcqcnParams, DcqcnQp

    c = ccparams.validate(cfg)
    return DcqcnQp(
        DcqcnParams(
            line_rate_bps=line_rate_emulated_bps,
            g=1 / c["dcqcn_g_inv"],
            alpha_update_ns=max(1, round(c["dcqcn_alpha_update_ns"] * sc.dilation)),
            rate_decrease_ns=max(1, round(c["dcqcn_rate_decrease_ns"] * sc.dilation)),
            rate_increase_ns=max(1, round(c["dcqcn_rate_increase_ns"] * sc.dilation)),
            byte_counter_bytes=round(c["dcqcn_byte_counter_bytes"] * sc.size_scale),
            fast_recovery_stages=c["dcqcn_f"],
            ai_bps_per_25g=c["dcqcn_ai_bps_per_25g"],
            hai_bps_per_25g=c["dcqcn_hai_bps_per_25g"],
            min_rate_bps=min(line_rate_emulated_bps, c["dcqcn_min_rate_bps"] * sc.rate_scale),
        )
    )


def agent_options(cfg: dict, sc: Scaling, payload_per_packet: int) -> dict:
    """The Agent's keyword arguments: CNPs (when DCQCN runs) and the transport's window."""
    c = ccparams.validate(cfg)
    if c["window_bytes"] > 0:
        window = max(1, math.ceil(c["window_bytes"] * sc.size_scale / payload_per_packet))
    else:
        window = c["window_pkts"] or NO_WINDOW_PKTS
    return {
        "cnp_interval_ns": round(c["cnp_interval_ns"] * sc.dilation) if c["cc"] == "dcqcn" else None,
        "rc_opts": {"window_pkts": window},
    }


def far_ends(fab, live, ports) -> dict[str, tuple[str, int | None, str | None]]:
    """For each switch egress port named: the interface at the other end of its cable, the pid
    whose network namespace holds it and its MAC when it is a GPU's NIC (None, None: a switch,
    in this namespace).
    The marker runs there: that is where a frame is seen the moment the port's shaper releases it."""
    by_name = {p.name: p for p in fab.ports}
    out = {}
    for name in ports:
        far = fab.ports[fab.peer_port(by_name[name].id)]
        node = fab.nodes[far.node]
        out[name] = (far.name, None, None) if node.role == "switch" else (far.name, live.host_pid(node.name), far.mac)
    return out


class FabricMarkers:
    """The run's marker on every switch egress port of one live fabric. `start` records the pin
    directory in the fabric's registry before loading, then attaches and configures every port
    (the phantom queue on the port, the marker at its cable's far end); `snapshot` reads the
    counters; `stop` removes the pins."""

    def __init__(
        self, name: str, configs: dict[str, ecn.PortConfig], peers: dict[str, tuple[str, int | None, str | None]]
    ):
        if set(peers) != set(configs):
            raise ValueError("every marked port needs its far end")
        self.marker = ecn.Marker(name)
        self.configs = configs
        self.peers = peers
        self.ifindex: dict[str, int] = {}
        self.sink: ecn.LldpSink | None = None

    def start(self, registry) -> FabricMarkers:
        registry.bpf_pin(str(self.marker.dir))
        self.sink = ecn.LldpSink()  # before clsact exists: no LLDP frame is ever miscounted as dropped
        self.marker.load()
        self.ifindex = {dev: socket.if_nametoindex(dev) for dev in self.configs}
        self.marker.configure_many({self.ifindex[d]: c for d, c in self.configs.items()})
        self.marker.attach_many(list(self.configs))
        self.marker.attach_peers(self.peers)
        return self

    def snapshot(self) -> dict:
        """{port: {"frames": [per bin], "marked": [per bin], "max_queue_bytes": phantom max}}."""
        by_index = {i: d for d, i in self.ifindex.items()}
        out = {
            d: {
                "frames": [0] * ecn.NBINS,
                "marked": [0] * ecn.NBINS,
                "unmarkable": [0] * ecn.NBINS,
                "max_queue_bytes": 0,
            }
            for d in self.configs
        }
        for r in self.marker.counters().itertuples():
            dev = by_index.get(int(r.ifindex))
            if dev is not None:
                out[dev]["frames"][int(r.bin)] = int(r.frames)
                out[dev]["marked"][int(r.bin)] = int(r.marked)
                out[dev]["unmarkable"][int(r.bin)] = int(r.unmarkable)
        for r in self.marker.queues().itertuples():
            dev = by_index.get(int(r.ifindex))
            if dev is not None:
                out[dev]["max_queue_bytes"] = int(r.max_queue_bytes)
        return out

    def write(self, raw: Path, before: dict, after: dict, coarse: list[str]) -> None:
        """raw/rep<k>/ecn.json: what the marker did during one repeat (counter deltas per port)."""
        ports = {}
        for dev, a in after.items():
            b = before[dev]
            ports[dev] = {
                "config": vars(self.configs[dev]),
                **{k: [x - y for x, y in zip(a[k], b[k])] for k in ("frames", "marked", "unmarkable")},
                "phantom_max_queue_bytes": a["max_queue_bytes"],
            }
        write_json(raw / "ecn.json", {"bins": ecn.NBINS, "qualitative_ports": coarse, "ports": ports})

    def stop(self) -> None:
        self.marker.unload()
        if self.sink is not None:
            self.sink.close()
