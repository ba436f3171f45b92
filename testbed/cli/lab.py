"""Lab commands (root, a live fabric): doctor, clean, up, inspect, destroy, controller,
wiring-check, verify-paths, send, capture."""

from __future__ import annotations

import argparse
import json

from ..errors import RuntimeFailure, UserInputError
from .model import EPILOG_SPECS
from .output import print_json


def cmd_doctor(args) -> int:
    from ..lab.doctor import Check
    from ..lab.doctor import main as doctor_main
    from ..referee import binary

    ok, what = binary.status()  # optional: not a blocker
    code = doctor_main(as_json=args.json, extra=[Check("ns-3 referee", "ok" if ok else "warn", what,
                                                       "" if ok else f"optional; run: {binary.PROVISION}")])
    if code or not args.capacity:
        return code
    from ..emulation import capacity
    from ..lab import state

    rec = capacity.measure_curve(results_dir=args.results, log=(lambda *_: None) if args.json else print)
    path = state.save_capacity(rec)
    if args.json:
        print_json(rec)
        return 0
    print(f"\ncapacity ({rec['datapath']} datapath, {rec['frame_bytes']}-byte frames), per link rate:")
    print(f"  {'link Mb/s':>9} {'forwards/core-s':>15} {'forwards/s':>10} {'ovs core':>8} {'agent frames/core-s':>19}")
    for p in rec["curve"]:
        print(f"  {p['link_rate_mbps']:>9g} {p['forwards_per_core_s']:>15,.0f} {p['forwards_per_s']:>10,.0f} "
              f"{100 * p['ovs_cpu_fraction']:>7.0f}% {p['agent_frames_per_core_s']:>19,.0f}")
    print(f"stored in {path}; the scaling planner interpolates it at each run's link rate")
    return 0


def cmd_inspect(args) -> int:
    from ..lab.live import describe, live_runs

    rows = [describe(r) for r in live_runs()]
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("zlab inspect: no live zlab runs")
        return 0
    from .output import print_table

    for r in rows:
        r["age"] = "?" if r["age_s"] is None else f"{r['age_s']:.0f} s"
        r["ports_s"] = f"{r['ports']} ({r['bridges']} switches, {r['hosts']} hosts)"
    print_table(rows, [("run", "run", None), ("kind", "kind", None), ("spec", "spec", None), ("pid", "pid", None),
                       ("age", "age", None), ("controller", "controller", None), ("datapath", "datapath", None),
                       ("ports_s", "veth ends", None), ("status", "status", None), ("user", "user", None)])
    return 0


def cmd_destroy(args) -> int:
    import os

    from ..lab.live import destroy, select

    if bool(args.run) == bool(args.all_mine):
        raise UserInputError("give a run id (zlab inspect lists them) or --all-mine, not both")
    user = os.environ.get("SUDO_USER") or os.environ.get("USER") or str(os.getuid())
    runs = select(args.run, args.all_mine, user)
    if not runs:
        if args.all_mine:
            print(f"zlab destroy: no live runs of {user}")
            return 0
        raise UserInputError(f"no live run {args.run!r} (zlab inspect lists them; a run whose owner died is "
                             "zlab clean's)")
    for r in runs:
        for line in destroy(r, args.timeout):
            print(f"[zlab] {line}")
    return 0


def cmd_clean(args) -> int:
    from ..lab.clean import main as clean_main

    return clean_main(dry_run=args.dry_run)


def cmd_up(args) -> int:
    from ..emulation.up import cmd_up as up

    return up(args)


def cmd_controller(args) -> int:
    from controllers.launch import main as launch

    return launch(args.rest)


def cmd_wiring_check(args) -> int:
    import time

    from ..emulation import wiring
    from ..emulation.probes import LiveRun
    from ..records import write_json

    wiring.probe_nic_cables(LiveRun(args.run_dir))  # NIC cables announce themselves; switches' LLDP is periodic
    time.sleep(1.0)
    rep = wiring.check_run(args.run_dir)
    write_json(f"{args.run_dir}/wiring.json", rep)
    if args.json:
        print_json(rep)
    else:
        print(wiring.format_report(rep))
    return 0 if rep["ok"] else 1


def cmd_verify_paths(args) -> int:
    from ..emulation.probes import LiveRun, prove_path

    live = LiveRun(args.run_dir)
    bad = 0
    results = []
    for item in args.pairs:
        src, _, dst = item.partition(":")
        if not dst:
            raise UserInputError(f"pair {item!r} is not SRC_PORT:DST (e.g. g0-p0:g5)")
        proof = prove_path(live, src, dst, sport=args.sport, count=args.count)
        bad += not proof.ok
        results.append(proof.__dict__ | {"ok": proof.ok})
        if not args.json:
            fmt = lambda hops: " -> ".join(f"{s}[out {p}]" for s, p in hops) or "(nothing counted)"  # noqa: E731
            print(f"{'ok  ' if proof.ok else 'FAIL'} {src} -> {proof.dst} sport {args.sport}: "
                  f"model {fmt(proof.model)}; counters {fmt(proof.observed)}")
    if args.json:
        print_json(results)
    return 1 if bad else 0


def cmd_send(args) -> int:
    from ..emulation.agents import send_message
    from ..emulation.probes import LiveRun

    live = LiveRun(args.run_dir)
    recs, counters = send_message(live, args.src, args.dst, args.size, split=args.split, path_mtu=args.path_mtu,
                                  sport=args.sport, timeout_s=args.timeout)
    if args.json:
        print_json({"records": recs, "counters": counters})
        return 0 if all(r["integrity_ok"] for r in recs) else 1
    for r in recs:
        dt = (r["t_complete_ns"] - r["t_first_tx_ns"]) / 1e9
        print(f"{r['src']} -> {r['dst']} qp {r['qp']} sport {r['sport']}: {r['size_bytes']} bytes in {r['packets']} "
              f"packets, {dt * 1e3:.1f} ms, goodput {r['size_bytes'] * 8 / dt / 1e6:.2f} Mb/s, "
              f"retransmits {r['qp_retransmits']}, data {'intact' if r['integrity_ok'] else 'CORRUPT'}")
        print("  " + json.dumps({k: v for k, v in r.items() if k.startswith("t_")}, sort_keys=True))
    return 0 if all(r["integrity_ok"] for r in recs) else 1


def cmd_capture(args) -> int:
    from ..emulation.capture import start
    from ..emulation.probes import LiveRun

    if not args.count and not args.duration:
        raise UserInputError("give --count N or --duration S so the capture ends")
    p = start(LiveRun(args.run_dir), args.iface, args.output, args.count, args.duration)
    _, err = p.communicate()
    if p.returncode not in (0, 124):
        raise RuntimeFailure(f"tcpdump failed: {err.strip()}")
    print(f"wrote {args.output} ({err.strip().splitlines()[-1] if err.strip() else 'done'})")
    return 0


def add_commands(sub) -> None:
    d = sub.add_parser("doctor", help="check that this machine can run the lab (exit 1 on a blocker)")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.add_argument("--capacity", action="store_true",
                   help="also measure this machine's datapath capacity (switch forwards per core-second at 5 link rates, ~1 min) "
                        "and store it for the scaling planner")
    d.add_argument("--results", default="results", help="where the capacity probe's run folder goes")
    d.set_defaults(func=cmd_doctor)

    c = sub.add_parser("clean", help="remove what killed zlab runs left behind (only what zlab recorded)")
    c.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    c.set_defaults(func=cmd_clean)

    up = sub.add_parser("up", help="bring a fabric up in Mininet with the zlab controller (root)",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_SPECS)
    up.add_argument("spec", help="fabric spec, e.g. zcube:n=4")
    up.add_argument("--rate-scale", type=float, default=1e-4,
                    help="emulated rate = model rate x this (default 1e-4: 200 Gb/s -> 20 Mb/s); "
                         "links above 1000 Mb/s are refused")
    up.add_argument("--mtu", type=int, default=1500, help="MTU of every link, bytes (default 1500)")
    up.add_argument("--queue-pkts", type=int, default=1000, help="switch egress queue limit, packets (default 1000)")
    up.add_argument("--datapath", choices=("auto", "netdev", "system"), default="auto",
                    help="OVS datapath (default: what provision.sh detected)")
    up.add_argument("--miswire", nargs="?", const="auto", metavar="PORT1,PORT2",
                    help="swap two cables on purpose: two switch ports of fabric cables, or two GPU ports (NIC "
                         "cables, e.g. g0-p0,g1-p0); default: the first two fabric cables that share no switch")
    up.add_argument("--wiring-check", action="store_true", help="print the cabling check once the fabric is up")
    up.add_argument("--no-cli", action="store_true", help="no Mininet CLI: stay up until Ctrl-C/SIGTERM")
    up.add_argument("--duration", type=float, default=0, help="with --no-cli: tear down after this many seconds")
    up.add_argument("--results", default="results", help="where the run folder goes (default ./results)")
    up.add_argument("--controller", choices=("os-ken", "ryu"), default="os-ken",
                    help="framework running the zlab app: os-ken (default, the maintained fork) or ryu (real Ryu 4.34 "
                         "from .venv-ryu, through a one-line eventlet shim; README 'Controller frameworks')")
    up.add_argument("-d", "--detach", action="store_true",
                    help="bring it up in the background and return once it is ready (then: zlab inspect, zlab destroy)")
    up.add_argument("--run-id", help=argparse.SUPPRESS)  # zlab up -d names its child's run
    up.set_defaults(func=cmd_up)

    ins = sub.add_parser("inspect", help="live runs (zlab up and zlab run): spec, pid, age, controller, ports, datapath")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    ins.set_defaults(func=cmd_inspect)

    de = sub.add_parser("destroy", help="tear down live runs cleanly (their owner stops them, as on Ctrl-C); "
                                        "'zlab clean' stays for runs whose owner died")
    de.add_argument("run", nargs="?", help="run id or run folder (as zlab inspect shows)")
    de.add_argument("--all-mine", action="store_true", help="every live run you started")
    de.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a run to stop (default 60)")
    de.set_defaults(func=cmd_destroy)

    ct = sub.add_parser("controller", help="run the zlab OpenFlow app on os-ken for a run folder", add_help=False)
    ct.add_argument("rest", nargs=argparse.REMAINDER)
    ct.set_defaults(func=cmd_controller)

    wc = sub.add_parser("wiring-check", help="compare every cable of a live run (NIC and fabric), as LLDP found it, "
                                             "with the blueprint")
    wc.add_argument("run_dir", help="run folder of a running fabric (zlab up prints it)")
    wc.add_argument("--json", action="store_true")
    wc.set_defaults(func=cmd_wiring_check)

    vp = sub.add_parser("verify-paths", help="prove from switch counters which path probes took, vs the model")
    vp.add_argument("run_dir", help="run folder of a running fabric")
    vp.add_argument("pairs", nargs="+", metavar="SRC_PORT:DST", help="e.g. g0-p0:g5 (DST: GPU or GPU port)")
    vp.add_argument("--sport", type=int, default=49152, help="UDP source port of the probes (ECMP entropy)")
    vp.add_argument("--count", type=int, default=20, help="probes per pair (default 20)")
    vp.add_argument("--json", action="store_true")
    vp.set_defaults(func=cmd_verify_paths)

    se = sub.add_parser("send", help="push one RDMA-WRITE message between GPUs of a live fabric; print its record")
    se.add_argument("run_dir", help="run folder of a running fabric")
    se.add_argument("src", help="source GPU (g0: split by the port-split policy) or GPU port (g0-p1)")
    se.add_argument("dst", help="destination GPU (the address rule picks its port)")
    se.add_argument("--size", type=int, default=1_000_000, help="message size, bytes (default 1,000,000)")
    se.add_argument("--split", help="port-split policy of a multi-port kind (ZCube: half, cons, rail; "
                                    "default: the fabric's)")
    se.add_argument("--path-mtu", type=int, choices=(256, 512, 1024, 2048, 4096),
                    help="RoCE path MTU (default: the largest the link MTU carries)")
    se.add_argument("--sport", type=int, help="UDP source port (ECMP entropy); default random per QP")
    se.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    se.add_argument("--json", action="store_true")
    se.set_defaults(func=cmd_send)

    cp = sub.add_parser("capture", help="save a pcap of a live fabric port (GPU port or switch port)")
    cp.add_argument("run_dir", help="run folder of a running fabric")
    cp.add_argument("iface", help="port name, e.g. g0-p0 (in its host) or za0-p6 (a fabric link)")
    cp.add_argument("-o", "--output", required=True, help="pcap file to write")
    cp.add_argument("--count", type=int, help="stop after N packets")
    cp.add_argument("--duration", type=float, help="stop after S seconds")
    cp.set_defaults(func=cmd_capture)
