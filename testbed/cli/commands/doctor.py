"""`zlab doctor`: can this machine run the lab (and, with --capacity, how fast is its datapath)?"""

from __future__ import annotations

from .. import options
from ..output import print_json


def run(args) -> int:
    from ...lab.doctor import Check
    from ...lab.doctor import main as doctor_main
    from ...referee import binary

    ok, what = binary.status()  # optional: not a blocker
    code = doctor_main(
        as_json=args.json,
        extra=[Check("ns-3 referee", "ok" if ok else "warn", what, "" if ok else f"optional; run: {binary.PROVISION}")],
    )
    if code or not args.capacity:
        return code
    from ...emulation import capacity
    from ...lab import state

    rec = capacity.measure_curve(results_dir=args.results, log=(lambda *_: None) if args.json else print)
    path = state.save_capacity(rec)
    if args.json:
        print_json(rec)
        return 0
    print(f"\ncapacity ({rec['datapath']} datapath, {rec['frame_bytes']}-byte frames), per link rate:")
    print(f"  {'link Mb/s':>9} {'forwards/core-s':>15} {'forwards/s':>10} {'ovs core':>8} {'agent frames/core-s':>19}")
    for p in rec["curve"]:
        print(
            f"  {p['link_rate_mbps']:>9g} {p['forwards_per_core_s']:>15,.0f} {p['forwards_per_s']:>10,.0f} "
            f"{100 * p['ovs_cpu_fraction']:>7.0f}% {p['agent_frames_per_core_s']:>19,.0f}"
        )
    print(f"stored in {path}; the scaling planner interpolates it at each run's link rate")
    print()
    for line in sizes():
        print(line)
    return 0


# Sizes the capacity report predicts besides the measured ones: the next ZCube and ROFT up.
BEYOND = ("zcube:n=64", "roft:gpus=4096,gpus_per_server=8,radix=128,tiers=2")


def sizes(costs=None, mem_available_bytes: int | None = None) -> list[str]:
    """Which fabric sizes fit this machine: every measured size and the next ones up."""
    from ...emulation import sizing
    from ..experiments import size_table

    costs = sizing.load() if costs is None else costs
    measured = [p["spec"] for p in (costs or {}).get("points", [])]
    return size_table(measured + [s for s in BEYOND if s not in measured], costs, mem_available_bytes)


def register(sub) -> None:
    d = sub.add_parser(
        "doctor", parents=[options.JSON], help="check that this machine can run the lab (exit 1 on a blocker)"
    )
    d.add_argument(
        "--capacity",
        action="store_true",
        help="also measure this machine's datapath capacity (switch forwards per core-second at 5 link rates, ~1 min) "
        "and store it for the scaling planner",
    )
    d.add_argument("--results", default="results", help="where the capacity probe's run folder goes")
    d.set_defaults(func=run)
