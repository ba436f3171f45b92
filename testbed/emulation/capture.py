"""Packet captures of a live fabric port (a GPU port inside its host, or a switch port)."""

from __future__ import annotations

import subprocess

from .probes import LiveRun


def capture_cmd(live: LiveRun, iface: str, out: str, count: int | None, duration_s: float | None) -> list[str]:
    fab = live.fabric
    port = next((p for p in fab.ports if p.name == iface), None)
    if port is None:
        raise KeyError(f"{iface!r} is not a port of {fab.spec} (e.g. g0-p0, za0-p5)")
    cmd = ["tcpdump", "-i", iface, "-s", "0", "-U", "-w", out]
    if count:
        cmd += ["-c", str(count)]
    if duration_s:
        cmd = ["timeout", "--signal=INT", str(duration_s)] + cmd
    node = fab.nodes[port.node]
    if node.role == "gpu":
        cmd = ["nsenter", "-t", str(live.host_pid(node.name)), "-n", "--"] + cmd
    return cmd


def start(live: LiveRun, iface: str, out: str, count: int | None = None, duration_s: float | None = None):
    return subprocess.Popen(
        capture_cmd(live, iface, out, count, duration_s), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
