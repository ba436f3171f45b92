"""ECN marking at the emulated switches' egress ports: builds, loads, configures and reads the tc
BPF program in bpf/ecn_marker.bpf.c.

Why BPF: this kernel has no sch_red (and no netem); a tc program on clsact egress can set CE with
bpf_skb_ecn_set_ce(). Why one program per run, pinned under /sys/fs/bpf/zlab/<run_id>/: every
port the run marks is attached to the same program, so the per-port configuration, the phantom
queues and the counters live in one set of maps the run can read at the end, and the pin
directory is one resource the registry records and `zlab clean` removes (the tc filters go with
the run's links).

Configuration is per ifindex: the port's shaped rate (the phantom queue drains at it), Kmin,
Kmax and Pmax of the RED-style curve (testbed/congestion/red.py) in the run's emulated bytes, and
the width of the counter bins. The counters (ECT frames seen and marked per queue-length bin)
are what the tests compare with the curve.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import struct
import subprocess
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
    """One loaded marker: `load` pins the program and its maps under PIN_ROOT/<name>; `attach`
    hangs it on a port's clsact egress; `configure` sets a port's curve; `counters` and
    `queues` read it; `unload` removes the pins (the caller records the directory first)."""

    def __init__(self, name: str):
        self.dir = PIN_ROOT / name.replace(".", "_")  # bpffs refuses names with a dot
        self.prog = self.dir / "prog"
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
            ["bpftool", "prog", "load", str(obj), str(self.prog), "type", "classifier", "pinmaps", str(self.maps)],
            "loading the ECN marker",
        )
        return self

    def configure(self, ifindex: int, cfg: PortConfig) -> None:
        self.configure_many({ifindex: cfg})

    def attach(self, dev: str) -> None:
        """clsact on the port (its htb root qdisc stays) and the pinned program on egress."""
        res = subprocess.run(["tc", "qdisc", "add", "dev", dev, "clsact"], capture_output=True, text=True)
        if res.returncode != 0 and "File exists" not in res.stderr:
            raise RuntimeFailure(f"tc qdisc add dev {dev} clsact failed: {res.stderr.strip()}")
        _run(
            ["tc", "filter", "replace", "dev", dev, "egress", "bpf", "da", "pinned", str(self.prog)],
            f"attaching the ECN marker to {dev}",
        )

    def configure_many(self, cfgs: dict[int, PortConfig]) -> None:
        """configure() for many ports in one bpftool process (a fabric has hundreds)."""
        for c in cfgs.values():
            if not 0 <= c.kmin_bytes <= c.kmax_bytes or not 0 < c.pmax <= 1 or c.bin_bytes <= 0:
                raise ValueError(f"bad ECN port configuration {c}")
        lines = [
            " ".join(
                ["map", "update", "pinned", str(self.maps / "cfg"), "key"]
                + _hex(struct.pack("<I", i))
                + ["value"]
                + _hex(c.packed())
            )
            for i, c in cfgs.items()
        ]
        self._batch("bpftool", lines, "configuring ECN on the fabric's ports")

    def attach_many(self, devs: list[str]) -> None:
        """attach() for many ports in one tc process."""
        lines = [f"qdisc add dev {d} clsact" for d in devs]
        lines += [f"filter replace dev {d} egress bpf da pinned {self.prog}" for d in devs]
        self._batch("tc", lines, "attaching the ECN marker to the fabric's ports")

    def _batch(self, tool: str, lines: list[str], what: str) -> None:
        if not lines:
            return
        batch = BUILD_DIR / f"{self.dir.name}.{tool}.batch"
        batch.write_text("\n".join(lines) + "\n")
        try:
            cmd = ["bpftool", "batch", "file", str(batch)] if tool == "bpftool" else ["tc", "-batch", str(batch)]
            _run(cmd, what)
        finally:
            batch.unlink(missing_ok=True)

    def reset(self, ifindex: int) -> None:
        """Forget a port's phantom queue (the next frame finds it empty)."""
        key = struct.pack("<I", ifindex)
        subprocess.run(
            ["bpftool", "map", "delete", "pinned", str(self.maps / "state"), "key", *_hex(key)], capture_output=True
        )

    def _dump(self, name: str) -> list[dict]:
        return json.loads(_run(["bpftool", "-j", "map", "dump", "pinned", str(self.maps / name)], f"reading {name}"))

    def counters(self) -> pd.DataFrame:
        """(ifindex, bin, frames, marked, unmarkable): ECT frames the program saw per port with the
        phantom backlog ahead of them in [bin, bin + 1) x bin_bytes (the last bin: everything
        deeper), those it marked CE, and those the curve chose but the kernel could not mark."""
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

    def test_run(self, frame: bytes, repeat: int, scratch: Path) -> bytes:
        """Run the program `repeat` times on one frame without a device (BPF_PROG_TEST_RUN, the
        skb on the loopback device, ifindex 1); returns the frame as the last run left it."""
        src, out = scratch / "frame.in", scratch / "frame.out"
        src.write_bytes(frame)
        _run(
            [
                "bpftool",
                "prog",
                "run",
                "pinned",
                str(self.prog),
                "data_in",
                str(src),
                "data_out",
                str(out),
                "repeat",
                str(repeat),
            ],
            "running the ECN marker on a test frame",
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
        value = self._ctypes.create_string_buffer(config.packed(), 40)
        attr = struct.pack("=IIQQQ", self.fd, 0, self._ctypes.addressof(key), self._ctypes.addressof(value), 0)
        self._bpf(_BPF_MAP_UPDATE_ELEM, attr + bytes(120 - len(attr)), f"update ifindex {ifindex}")

    def close(self) -> None:
        os.close(self.fd)
