"""ECN marking at the emulated switches' egress ports: builds, loads, configures and reads the two
BPF programs in bpf/ecn_marker.bpf.c.

Why BPF: this kernel has no sch_red (and no netem). Why two programs: a switch marks a frame on
the backlog left behind it as it leaves the queue (as HPCC and the packet engine do), and no hook
runs between the egress qdisc and the wire. A tc program on the port's clsact egress keeps a
phantom queue (every frame adds its length; it drains at the port's shaped rate), and a generic
XDP program on the interface at the cable's far end, which sees the frame as the shaper releases
it, marks it on that phantom queue. Why one object per run, pinned under
/sys/fs/bpf/zlab/<run_id>/: every port the run marks uses the same two programs, so the per-port
configuration, the phantom queues and the counters live in one set of maps the run can read at
the end, and the pin directory is one resource the registry records and `zlab clean` removes (the
tc filters and XDP attachments go with the run's links).

Configuration is per egress ifindex: the port's shaped rate (the phantom queue drains at it),
Kmin, Kmax and Pmax of the RED-style curve (testbed/congestion/red.py) in the run's emulated
bytes, and the width of the counter bins; the `peers` map ties each far-end interface to the
egress port it hears. The counters (ECT frames seen and marked per queue-length bin) are what the
tests compare with the curve.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import RuntimeFailure
from ..lab.state import BPF_PIN_ROOT as PIN_ROOT

SOURCE = Path(__file__).with_name("bpf") / "ecn_marker.bpf.c"
BUILD_DIR = Path(__file__).resolve().parents[2] / ".bpf"
OBJECT = BUILD_DIR / "ecn_marker.bpf.o"
BPFFS = Path("/sys/fs/bpf")
NBINS = 32  # the program's counter bins (the last one holds everything deeper)
PROVISION = "sudo bash scripts/provision.sh"


class EcnUnavailable(RuntimeFailure):
    """The machine cannot build or load the marker (a missing package, no bpffs, no root)."""


@dataclass(frozen=True)
class PortConfig:
    rate_bytes_per_s: int  # the port's shaped rate; 0: never drains (the tests' deterministic sweep)
    kmin_bytes: int
    kmax_bytes: int
    pmax: float
    bin_bytes: int

    def packed(self) -> bytes:
        return struct.pack(
            "<5Q",
            self.rate_bytes_per_s,
            self.kmin_bytes,
            self.kmax_bytes,
            round(self.pmax * 1_000_000),
            self.bin_bytes,
        )


def _hex(b: bytes) -> list[str]:
    return ["hex", *(f"{x:02x}" for x in b)]


def _map_update(path: Path, key: bytes, value: bytes) -> list[str]:
    """bpftool's words for writing one entry of a pinned map (a command, or a batch file's line)."""
    return ["map", "update", "pinned", str(path), "key", *_hex(key), "value", *_hex(value)]


def _run(cmd: list[str], what: str) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeFailure(f"{what}: {' '.join(cmd[:4])} ... failed: {(res.stderr or res.stdout).strip()[-300:]}")
    return res.stdout


def build(force: bool = False) -> Path:
    """Compile the program if missing or older than its source (Debian's clang, libbpf headers)."""
    for tool in ("clang", "bpftool", "tc"):
        if shutil.which(tool) is None:
            raise EcnUnavailable(f"ECN marking needs {tool}: run {PROVISION}")
    if not Path("/usr/include/bpf/bpf_helpers.h").exists():
        raise EcnUnavailable(f"ECN marking needs libbpf-dev's headers: run {PROVISION}")
    if OBJECT.exists() and not force and OBJECT.stat().st_mtime >= SOURCE.stat().st_mtime:
        return OBJECT
    BUILD_DIR.mkdir(exist_ok=True)
    tmp = OBJECT.with_suffix(".tmp")
    multiarch = f"/usr/include/{platform.machine()}-linux-gnu"
    cmd = [
        "clang",
        "-O2",
        "-g",
        "-Wall",
        "-Werror",
        "-target",
        "bpf",
        f"-I{multiarch}",
        "-c",
        str(SOURCE),
        "-o",
        str(tmp),
    ]
    _run(cmd, f"compiling {SOURCE.name}")
    tmp.replace(OBJECT)
    return OBJECT


class Marker:
    """One loaded marker: `load` pins the two programs and their maps under PIN_ROOT/<name>;
    `attach` hangs the phantom queue on a port's clsact egress and the marker on the far end's
    XDP hook; `configure` sets a port's curve; `counters` and `queues` read it; `unload` removes
    the pins (the caller records the directory first)."""

    def __init__(self, name: str):
        self.dir = PIN_ROOT / name.replace(".", "_")  # bpffs refuses names with a dot
        self.phantom = self.dir / "progs" / "ecn_phantom"  # tc, switch port egress
        self.prog = self.dir / "progs" / "ecn_marker"  # generic XDP, the cable's far end
        self.maps = self.dir / "maps"

    @staticmethod
    def check_bpffs() -> None:
        if os.geteuid() != 0:
            raise EcnUnavailable("ECN marking loads a BPF program: run as root")
        mounts = Path("/proc/mounts").read_text().split("\n")
        if not any(line.split()[1:3] == [str(BPFFS), "bpf"] for line in mounts if len(line.split()) > 2):
            raise EcnUnavailable(f"no bpf filesystem at {BPFFS}: run {PROVISION} (it mounts it)")

    def load(self) -> Marker:
        self.check_bpffs()
        obj = build()
        if self.dir.exists():
            raise RuntimeFailure(f"{self.dir} exists: another run of this name is loaded (zlab clean removes it)")
        self.dir.mkdir(parents=True)
        _run(
            ["bpftool", "prog", "loadall", str(obj), str(self.prog.parent), "pinmaps", str(self.maps)],
            "loading the ECN marker",
        )
        return self

    def configure(self, ifindex: int, cfg: PortConfig) -> None:
        self.configure_many({ifindex: cfg})

    def attach(self, dev: str, peer: str, peer_netns_pid: int | None = None, peer_mac: str | None = None) -> None:
        """The phantom queue on `dev`'s clsact egress (its htb root qdisc stays) and the marker on
        `peer`, the interface at the other end of its cable: a switch port here, or (with its MAC)
        a GPU NIC port, in the namespace of that pid."""
        self.attach_many([dev])
        self.attach_peers({dev: (peer, peer_netns_pid, peer_mac)})

    def attach_peers(self, peers: dict[str, tuple[str, int | None, str | None]]) -> None:
        """The marker on each egress port's far end {port: (interface, netns pid or None, MAC of
        a GPU NIC or None)} and the map entry that ties it to the port: one `ip -batch` per
        namespace. A switch end is known by its ifindex (`peers`); a NIC end by its MAC
        (`nic_peers`), since every GPU's namespace numbers its interfaces from 2 again and XDP
        cannot tell the namespaces apart. Two far ends with one key fail the run rather than mark
        one port's frames on another's queue."""
        from traffic.port import in_netns

        by_ns: dict[int | None, list[str]] = {}
        switch_ends: dict[int, int] = {}
        nic_ends: dict[bytes, int] = {}
        for dev, (peer, pid, mac) in peers.items():
            port = socket.if_nametoindex(dev)
            if mac is not None:
                key = bytes.fromhex(mac.replace(":", "")) + bytes(2)
                if key in nic_ends:
                    raise RuntimeFailure(f"ECN marker: two far ends have MAC {mac} ({peer})")
                nic_ends[key] = port
                prog = self.prog.with_name("ecn_marker_nic")
            else:
                if pid is not None:
                    raise ValueError(f"far end {peer} is in another namespace: give its MAC")
                index = socket.if_nametoindex(peer)
                if index in switch_ends:
                    raise RuntimeFailure(f"ECN marker: two far ends have ifindex {index} ({peer})")
                switch_ends[index] = port
                prog = self.prog
            by_ns.setdefault(pid, []).append(f"link set dev {peer} xdpgeneric pinned {prog}")
        lines = [
            " ".join(_map_update(self.maps / "peers", struct.pack("<I", k), struct.pack("<I", v)))
            for k, v in switch_ends.items()
        ]
        lines += [" ".join(_map_update(self.maps / "nic_peers", k, struct.pack("<I", v))) for k, v in nic_ends.items()]
        self._batch("bpftool", lines, "tying the ECN marker's far ends to their ports")
        for pid, cmds in by_ns.items():
            with in_netns(pid):
                self._batch("ip", cmds, "attaching the ECN marker (XDP) at the far ends of the fabric's ports")

    def configure_many(self, cfgs: dict[int, PortConfig]) -> None:
        """configure() for many ports in one bpftool process (a fabric has hundreds)."""
        for c in cfgs.values():
            if not 0 <= c.kmin_bytes <= c.kmax_bytes or not 0 < c.pmax <= 1 or c.bin_bytes <= 0:
                raise ValueError(f"bad ECN port configuration {c}")
        lines = [" ".join(_map_update(self.maps / "cfg", struct.pack("<I", i), c.packed())) for i, c in cfgs.items()]
        self._batch("bpftool", lines, "configuring ECN on the fabric's ports")

    def attach_many(self, devs: list[str]) -> None:
        """attach() for many ports in one tc process."""
        lines = [f"qdisc add dev {d} clsact" for d in devs]
        lines += [f"filter replace dev {d} egress bpf da pinned {self.phantom}" for d in devs]
        self._batch("tc", lines, "attaching the ECN marker to the fabric's ports")

    def _batch(self, tool: str, lines: list[str], what: str) -> None:
        if not lines:
            return
        batch = BUILD_DIR / f"{self.dir.name}.{tool}.batch"
        batch.write_text("\n".join(lines) + "\n")
        try:
            cmd = ["bpftool", "batch", "file", str(batch)] if tool == "bpftool" else [tool, "-batch", str(batch)]
            _run(cmd, what)
        finally:
            batch.unlink(missing_ok=True)

    def reset(self, ifindex: int) -> None:
        """Forget a port's phantom queue (the next frame finds it empty)."""
        key = struct.pack("<I", ifindex)
        subprocess.run(
            ["bpftool", "map", "delete", "pinned", str(self.maps / "state"), "key", *_hex(key)], capture_output=True
        )

    def set_queue(self, ifindex: int, queue_bytes: int) -> None:
        """Put a port's phantom queue at `queue_bytes` now (tests: with rate 0 it stays there)."""
        value = struct.pack("<QQQQ", 0, queue_bytes, time.monotonic_ns(), queue_bytes)  # lock word, queue, last, max
        _run(
            ["bpftool", *_map_update(self.maps / "state", struct.pack("<I", ifindex), value)], "setting a phantom queue"
        )

    def tie(self, far_end_ifindex: int, port_ifindex: int) -> None:
        """Tie a far-end ifindex to a port without attaching anything (tests: BPF_PROG_TEST_RUN)."""
        key, value = struct.pack("<I", far_end_ifindex), struct.pack("<I", port_ifindex)
        _run(["bpftool", *_map_update(self.maps / "peers", key, value)], "tying a far end to a port")

    def _dump(self, name: str) -> list[dict]:
        return json.loads(_run(["bpftool", "-j", "map", "dump", "pinned", str(self.maps / name)], f"reading {name}"))

    def counters(self) -> pd.DataFrame:
        """(ifindex, bin, frames, marked, unmarkable): ECT frames that left each egress port with
        the phantom backlog behind them in [bin, bin + 1) x bin_bytes (the last bin: everything
        deeper), those marked CE, and those the curve chose but that could not be marked."""
        rows = []
        for e in self._dump("bins"):
            key, v = e["formatted"]["key"], e["formatted"]["value"]
            rows.append((key >> 32, key & 0xFFFFFFFF, v["frames"], v["marked"], v["unmarkable"]))
        cols = ["ifindex", "bin", "frames", "marked", "unmarkable"]
        return pd.DataFrame(rows, columns=cols).sort_values(["ifindex", "bin"])

    def queues(self) -> pd.DataFrame:
        """(ifindex, queue_bytes, max_queue_bytes, last_ns): each port's phantom queue now."""
        rows = [
            (e["formatted"]["key"], v["queue_bytes"], v["max_queue_bytes"], v["last_ns"])
            for e in self._dump("state")
            for v in [e["formatted"]["value"]]
        ]
        return pd.DataFrame(rows, columns=["ifindex", "queue_bytes", "max_queue_bytes", "last_ns"])

    def test_run(self, frame: bytes, repeat: int, scratch: Path, program: str = "marker") -> bytes:
        """Run one program `repeat` times on one frame without a device (BPF_PROG_TEST_RUN):
        "phantom" as if the loopback device (ifindex 1) sent it, "marker" as if it arrived on the
        loopback device; returns the frame as the last run left it."""
        src, out, ctx = scratch / "frame.in", scratch / "frame.out", scratch / "ctx.in"
        src.write_bytes(frame)
        extra = []
        if program == "marker":  # struct xdp_md: data 0, data_end the frame's length, ingress ifindex 1
            ctx.write_bytes(struct.pack("<6I", 0, len(frame), 0, 1, 0, 0))
            extra = ["ctx_in", str(ctx)]
        prog = {"marker": self.prog, "phantom": self.phantom}[program]
        _run(
            ["bpftool", "prog", "run", "pinned", str(prog), "data_in", str(src), *extra, "data_out", str(out)]
            + ["repeat", str(repeat)],
            f"running the ECN {program} on a test frame",
        )
        return out.read_bytes()

    def unload(self) -> None:
        if self.dir.exists():
            shutil.rmtree(self.dir)


SO_ATTACH_FILTER = 26
ETH_P_LLDP = 0x88CC


class LldpSink:
    """A packet socket that gives LLDP frames a protocol handler in the root namespace, and keeps none.

    Why: with a clsact qdisc on a port (the marker's), the kernel hands a received frame to the
    packet sockets listening on it (OVS's) while running the ingress hook and then, finding no
    protocol handler for it, counts it in the port's rx_dropped: every LLDP frame the controller
    sends (discovery, link probes) became a "drop" at the switch port that received it, although
    OVS had it (measured on a veth: 1 counted per frame with clsact, 0 without, 0 with this
    socket open). A socket bound to ETH_P_LLDP on every device is that handler; its filter accepts
    no byte, so it holds nothing. Closed with the markers (or by the kernel when the process ends).
    """

    def __init__(self):
        import ctypes
        import socket

        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_LLDP))
        self._prog = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF_RET | BPF_K, 0
        self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", 1, ctypes.addressof(self._prog)))

    def close(self) -> None:
        self.sock.close()


_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}
_BPF_MAP_UPDATE_ELEM, _BPF_OBJ_GET = 2, 7


class ConfigWriter:
    """Rewrites ports' entries in a loaded marker's configuration map in one bpf(2) call each.

    Why not bpftool: the pause loop changes a port's drain rate each time its gate shuts or opens
    (a paused port does not drain: its phantom queue must not either), and a bpftool process per
    change takes milliseconds; the system call takes microseconds."""

    def __init__(self, cfg_map: str):
        import ctypes

        self._ctypes = ctypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._nr = _BPF_SYSCALL.get(platform.machine())
        if self._nr is None:
            raise EcnUnavailable(f"no bpf(2) system call number known for {platform.machine()}")
        path = ctypes.create_string_buffer(cfg_map.encode())
        attr = struct.pack("=QII", ctypes.addressof(path), 0, 0) + bytes(104)
        self.fd = self._bpf(_BPF_OBJ_GET, attr, f"open {cfg_map}")

    def _bpf(self, cmd: int, attr: bytes, what: str) -> int:
        buf = self._ctypes.create_string_buffer(attr, len(attr))
        r = self._libc.syscall(self._nr, cmd, buf, len(attr))
        if r < 0:
            err = self._ctypes.get_errno()
            raise OSError(err, f"bpf: {what}: {os.strerror(err)}")
        return r

    def set(self, ifindex: int, config: PortConfig) -> None:
        key = self._ctypes.create_string_buffer(struct.pack("<I", ifindex), 4)
        packed = config.packed()
        value = self._ctypes.create_string_buffer(packed, len(packed))
        attr = struct.pack("=IIQQQ", self.fd, 0, self._ctypes.addressof(key), self._ctypes.addressof(value), 0)
        self._bpf(_BPF_MAP_UPDATE_ELEM, attr + bytes(120 - len(attr)), f"update ifindex {ifindex}")

    def close(self) -> None:
        os.close(self.fd)
