"""`zlab send`: one RDMA-WRITE message between GPUs of a live fabric, and its record."""

from __future__ import annotations

import json

from .. import options
from ..output import print_json


def run(args) -> int:
    from ...emulation.agents import send_message
    from ...emulation.probes import LiveRun

    live = LiveRun(args.run_dir)
    recs, counters = send_message(
        live,
        args.src,
        args.dst,
        args.size,
        split=args.split,
        path_mtu=args.path_mtu,
        sport=args.sport,
        timeout_s=args.timeout,
    )
    if args.json:
        print_json({"records": recs, "counters": counters})
        return 0 if all(r["integrity_ok"] for r in recs) else 1
    for r in recs:
        dt = (r["t_complete_ns"] - r["t_first_tx_ns"]) / 1e9
        print(
            f"{r['src']} -> {r['dst']} qp {r['qp']} sport {r['sport']}: {r['size_bytes']} bytes in {r['packets']} "
            f"packets, {dt * 1e3:.1f} ms, goodput {r['size_bytes'] * 8 / dt / 1e6:.2f} Mb/s, "
            f"retransmits {r['qp_retransmits']}, data {'intact' if r['integrity_ok'] else 'CORRUPT'}"
        )
        print("  " + json.dumps({k: v for k, v in r.items() if k.startswith("t_")}, sort_keys=True))
    return 0 if all(r["integrity_ok"] for r in recs) else 1


def register(sub) -> None:
    se = sub.add_parser(
        "send",
        parents=[options.JSON],
        help="push one RDMA-WRITE message between GPUs of a live fabric; print its record",
    )
    se.add_argument("run_dir", help="run folder of a running fabric")
    se.add_argument("src", help="source GPU (g0: split by the port-split policy) or GPU port (g0-p1)")
    se.add_argument("dst", help="destination GPU (the address rule picks its port)")
    se.add_argument("--size", type=int, default=1_000_000, help="message size, bytes (default 1,000,000)")
    se.add_argument(
        "--split", help="port-split policy of a multi-port kind (ZCube: half, cons, rail; default: the fabric's)"
    )
    se.add_argument(
        "--path-mtu",
        type=int,
        choices=(256, 512, 1024, 2048, 4096),
        help="RoCE path MTU (default: the largest the link MTU carries)",
    )
    se.add_argument("--sport", type=int, help="UDP source port (ECMP entropy); default random per QP")
    se.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    se.set_defaults(func=run)
