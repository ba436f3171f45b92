"""iperf3 calibration of NIC paths (via the iperf3 Python package, inside the hosts).

Why: before a run, each path's achievable goodput sets what "line rate" means on this
machine; a path far below its configured rate is flagged instead of silently skewing results.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from .probes import LiveRun

SERVER = """
import iperf3, json, sys
s = iperf3.Server(); s.bind_address = sys.argv[1]; s.port = int(sys.argv[2]); s.json_output = True
r = s.run()
print(json.dumps(r.json if r is not None and r.json else {"error": getattr(r, "error", "no result")}))
"""
CLIENT = """
import iperf3, json, sys
c = iperf3.Client(); c.server_hostname = sys.argv[2]; c.bind_address = sys.argv[1]; c.port = int(sys.argv[3])
c.protocol = "udp"; c.bandwidth = int(float(sys.argv[4])); c.duration = int(sys.argv[5]); c.blksize = int(sys.argv[6])
c.json_output = True
r = c.run()
print(json.dumps(r.json if r is not None and r.json else {"error": getattr(r, "error", "no result")}))
"""


def iperf3_udp(
    live: LiveRun,
    src_port: str,
    dst_port: str,
    rate_bps: float,
    duration_s: int = 3,
    blksize: int = 4096,
    port: int = 5201,
) -> dict:
    """UDP at rate_bps from src_port's address to dst_port's address; the receiver's goodput."""
    fab = live.fabric
    sp = next(p for p in fab.ports if p.name == src_port)
    dp = next(p for p in fab.ports if p.name == dst_port)
    src_gpu, dst_gpu = fab.nodes[sp.node].name, fab.nodes[dp.node].name
    srv = live.popen_in_host(
        dst_gpu,
        [sys.executable, "-c", SERVER, dp.ip, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        cli = live.in_host(
            src_gpu,
            [sys.executable, "-c", CLIENT, sp.ip, dp.ip, str(port), str(rate_bps), str(duration_s), str(blksize)],
            timeout=duration_s + 30,
        )
        out, _ = srv.communicate(timeout=duration_s + 30)
    finally:
        if srv.poll() is None:
            srv.kill()
    client = json.loads(cli.stdout.strip().splitlines()[-1]) if cli.stdout.strip() else {"error": cli.stderr}
    server = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    if "error" in client:
        raise RuntimeError(f"iperf3 {src_port} -> {dst_port}: {client['error']}")
    # the receiver's view: what arrived, over the receiving interval
    s = client.get("end", {}).get("sum_received") or server.get("end", {}).get("sum_received")
    if not s:
        raise RuntimeError(f"iperf3 {src_port} -> {dst_port}: no receiver summary in its JSON")
    return {
        "src": src_port,
        "dst": dst_port,
        "offered_bps": rate_bps,
        "goodput_bps": s["bits_per_second"],
        "lost_percent": client["end"]["sum"].get("lost_percent", 0.0),
    }


def calibrate(
    live: LiveRun, pairs: list[tuple[str, str]], rate_of, duration_s: int = 3, flag_below: float = 0.9
) -> list[dict]:
    """iperf3 each (src port, dst port) at its configured rate; flag paths below flag_below."""
    out = []
    for sp, dp in pairs:
        r = iperf3_udp(live, sp, dp, rate_of(sp), duration_s)
        r["ratio"] = r["goodput_bps"] / rate_of(sp)
        r["underperforms"] = r["ratio"] < flag_below
        out.append(r)
    return out
