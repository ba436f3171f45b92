"""`zlab capture`: a pcap of one port of a live fabric."""

from __future__ import annotations

from ...errors import RuntimeFailure, UserInputError


def run(args) -> int:
    from ...emulation.capture import start
    from ...emulation.probes import LiveRun

    if not args.count and not args.duration:
        raise UserInputError("give --count N or --duration S so the capture ends")
    p = start(LiveRun(args.run_dir), args.iface, args.output, args.count, args.duration)
    _, err = p.communicate()
    if p.returncode not in (0, 124):
        raise RuntimeFailure(f"tcpdump failed: {err.strip()}")
    print(f"wrote {args.output} ({err.strip().splitlines()[-1] if err.strip() else 'done'})")
    return 0


def register(sub) -> None:
    cp = sub.add_parser("capture", help="save a pcap of a live fabric port (GPU port or switch port)")
    cp.add_argument("run_dir", help="run folder of a running fabric")
    cp.add_argument("iface", help="port name, e.g. g0-p0 (in its host) or za0-p6 (a fabric link)")
    cp.add_argument("-o", "--output", required=True, help="pcap file to write")
    cp.add_argument("--count", type=int, help="stop after N packets")
    cp.add_argument("--duration", type=float, help="stop after S seconds")
    cp.set_defaults(func=run)
