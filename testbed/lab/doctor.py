"""`zlab doctor`: can this machine run the lab, and will it measure the fabric, not itself?

Each check says ok / warn / FAIL with a fix hint; any FAIL is a blocker (exit 1).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass

from . import procs, state
from .registry import load_runs
from .sh import CommandError, ok, run

PROVISION = "bash scripts/provision.sh"


@dataclass
class Check:
    name: str
    status: str  # ok | warn | FAIL
    detail: str
    hint: str = ""


def _root() -> Check:
    if os.geteuid() == 0:
        return Check("root", "ok", "running as root")
    return Check("root", "FAIL", f"running as uid {os.geteuid()}", "Mininet and OVS need root: sudo zlab ...")


def _ovs() -> list[Check]:
    try:
        version = run(["ovs-vsctl", "--version"]).splitlines()[0]
    except CommandError:
        return [Check("ovs reachable", "FAIL", "ovs-vsctl not installed", f"run: {PROVISION}")]
    if not ok(["ovs-vsctl", "--timeout=3", "show"]):
        return [
            Check(
                "ovs reachable",
                "FAIL",
                f"{version}: ovsdb-server/ovs-vswitchd not answering",
                f"start OVS: {PROVISION} --services",
            )
        ]
    checks = [Check("ovs reachable", "ok", version)]
    dp = state.datapath()
    kernel = os.path.isdir("/sys/module/openvswitch")
    if dp is None:
        checks.append(Check("ovs datapath", "FAIL", "no datapath recorded by provision.sh", f"run: {PROVISION}"))
    elif dp == "system" and not kernel:
        checks.append(
            Check(
                "ovs datapath",
                "FAIL",
                "recorded 'system' but the openvswitch module is not loaded",
                f"re-run {PROVISION} to re-detect",
            )
        )
    else:
        what = "userspace (netdev): one forwarding thread, ~100 k packets/s" if dp == "netdev" else "kernel (system)"
        checks.append(Check("ovs datapath", "ok", what))
    rec = state.ovs_start_record()
    pid = _vswitchd_pid()
    if rec and pid and rec.get("vswitchd_pid") == pid:
        checks.append(Check("ovs started with large buffers", "ok", f"ovs-vswitchd pid {pid} started by provision.sh"))
    else:
        checks.append(
            Check(
                "ovs started with large buffers",
                "FAIL",
                f"ovs-vswitchd (pid {pid}) was not started by provision.sh after raising socket buffers: "
                "its port sockets may drop packets silently",
                f"restart it: {PROVISION} --services",
            )
        )
    return checks


def _vswitchd_pid() -> int | None:
    try:
        pid = int(open("/var/run/openvswitch/ovs-vswitchd.pid").read().strip())
    except (OSError, ValueError):
        return None
    return pid if procs.alive(pid, None) else None


def _sysctls() -> Check:
    bad = []
    for key in ("wmem_default", "rmem_default"):
        try:
            value = int(open(f"/proc/sys/net/core/{key}").read())
        except (OSError, ValueError):
            value = 0
        if value < state.SOCK_BUF_BYTES:
            bad.append(f"net.core.{key}={value}")
    if bad:
        return Check(
            "socket buffers",
            "FAIL",
            f"{', '.join(bad)} < {state.SOCK_BUF_BYTES}: OVS userspace ports drop packets without counting them",
            f"{PROVISION} --services (sets 8 MiB and restarts OVS)",
        )
    return Check("socket buffers", "ok", f"wmem/rmem_default >= {state.SOCK_BUF_BYTES}")


def _qdiscs() -> list[Check]:
    """Try htb, tbf and netem on a private veth pair, then remove it."""
    a, b = f"zdoc{os.getpid() % 100000}a", f"zdoc{os.getpid() % 100000}b"
    try:
        run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
    except CommandError as exc:
        return [Check("veth", "FAIL", str(exc), "the kernel needs veth support")]
    out = [Check("veth", "ok", "veth pairs can be created")]
    try:
        for q, args, hint in (
            ("htb", ["htb", "default", "1"], "link shaping needs sch_htb"),
            ("tbf", ["tbf", "rate", "10mbit", "burst", "10kb", "latency", "50ms"], "needs sch_tbf"),
        ):
            good = ok(["tc", "qdisc", "replace", "dev", a, "root", *args])
            out.append(
                Check(q, "ok" if good else "FAIL", f"{q} qdisc {'works' if good else 'missing'}", "" if good else hint)
            )
        netem = ok(["tc", "qdisc", "replace", "dev", a, "root", "netem", "delay", "1ms"])
        out.append(
            Check(
                "netem",
                "ok" if netem else "warn",
                "netem available"
                if netem
                else "netem absent: no delay, jitter or loss emulation; zlab refuses those options",
                "" if netem else "use a kernel with sch_netem to emulate delay/loss",
            )
        )
    finally:
        run(["ip", "link", "del", a], check=False)
    return out


def _tools() -> list[Check]:
    checks = []
    for tool, why in (
        ("mnexec", "Mininet hosts"),
        ("ethtool", "TX offload off (TCP through userspace OVS)"),
        ("iperf3", "path calibration"),
        ("tshark", "RoCE decoding of captures"),
        ("tcpdump", "captures"),
    ):
        path = shutil.which(tool)
        checks.append(
            Check(tool, "ok" if path else "FAIL", path or f"missing ({why})", "" if path else f"run: {PROVISION}")
        )
    lib = ctypes.util.find_library("iperf")
    checks.append(
        Check(
            "libiperf",
            "ok" if lib else "FAIL",
            lib or "libiperf missing (iperf3 Python package)",
            "" if lib else f"run: {PROVISION}",
        )
    )
    for mod, label in (("os_ken.base.app_manager", "os-ken"), ("mininet.net", "mininet python")):
        try:
            __import__(mod)
            checks.append(Check(label, "ok", f"import {mod}"))
        except Exception as exc:  # noqa: BLE001 - any import failure is the finding
            checks.append(Check(label, "FAIL", f"import {mod}: {exc}", f"run: {PROVISION}"))
    return checks


def _cpu(sample_s: float = 0.5) -> Check:
    def snap():
        f = open("/proc/stat").readline().split()[1:]
        vals = list(map(int, f))
        return sum(vals), vals[3] + vals[4]

    t1, i1 = snap()
    time.sleep(sample_s)
    t2, i2 = snap()
    cores = os.cpu_count() or 1
    idle = cores * (i2 - i1) / max(t2 - t1, 1)
    status = "ok" if idle >= 1.5 else "warn"
    return Check(
        "free cpu",
        status,
        f"{idle:.1f} of {cores} cores idle",
        "" if status == "ok" else "other processes compete with OVS and the agents: runs may be CPU-bound",
    )


def _leftovers() -> Check:
    dead = [r.run_id for r in load_runs() if not r.owner_alive]
    if dead:
        return Check(
            "leftover runs",
            "warn",
            f"{len(dead)} killed run(s) left resources: {', '.join(dead[:3])}",
            "remove them: zlab clean",
        )
    return Check("leftover runs", "ok", "none")


def collect() -> list[Check]:
    checks = [_root(), *_ovs(), _sysctls()]
    if os.geteuid() == 0:
        checks += _qdiscs()
    checks += [*_tools(), _cpu(), _leftovers()]
    return checks


def main(as_json: bool = False, extra: list[Check] | None = None) -> int:
    """extra: checks of optional parts from layers above the lab (e.g. the ns-3 referee)."""
    checks = collect() + list(extra or [])
    blockers = [c for c in checks if c.status == "FAIL"]
    if as_json:
        print(json.dumps({"ok": not blockers, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.status:<5} {c.name:<{width}}  {c.detail}")
            if c.hint and c.status != "ok":
                print(f"{'':<5} {'':<{width}}  fix: {c.hint}")
        print(f"\n{'READY' if not blockers else f'NOT READY: {len(blockers)} blocker(s)'}")
    return 1 if blockers else 0
