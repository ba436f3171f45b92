"""`zlab wiring-check`: every cable of a live run, as LLDP found it, against the blueprint."""

from __future__ import annotations

from .. import options
from ..output import print_json


def run(args) -> int:
    import time

    from ...emulation import wiring
    from ...emulation.probes import LiveRun
    from ...records import write_json

    wiring.probe_nic_cables(LiveRun(args.run_dir))  # NIC cables announce themselves; switches' LLDP is periodic
    time.sleep(1.0)
    rep = wiring.check_run(args.run_dir)
    write_json(f"{args.run_dir}/wiring.json", rep)
    if args.json:
        print_json(rep)
    else:
        print(wiring.format_report(rep))
    return 0 if rep["ok"] else 1


def register(sub) -> None:
    wc = sub.add_parser(
        "wiring-check",
        parents=[options.JSON],
        help="compare every cable of a live run (NIC and fabric), as LLDP found it, with the blueprint",
    )
    wc.add_argument("run_dir", help="run folder of a running fabric (zlab up prints it)")
    wc.set_defaults(func=run)
