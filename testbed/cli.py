"""`zlab` command line: one entry point, one small handler per subcommand."""

from __future__ import annotations

import argparse
import json
import sys

from .fabric.spec import SpecError, _kinds

EPILOG_SPECS = """fabric specs (kind:key=value,...), e.g.
  zcube:n=4,gpus_per_server=4              ZCube(4,2), the paper's 16-GPU testbed
  zcube:n=8,gpus=32,links_per_pair=2       Zhipu's rectangular 32-GPU form
  roft:gpus=16,gpus_per_server=4,segments=2
  roft:gpus=16384,radix=128                three tiers (640 switches)
run 'zlab fabric kinds' for every parameter with its default."""


def _json_out(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def cmd_fabric_kinds(args) -> int:
    for kind in _kinds().values():
        print(kind.describe())
        print()
    return 0


def cmd_fabric_show(args) -> int:
    from .fabric import build_fabric
    from .fabric.cost import inventory
    from .fabric.validate import validate

    fab = build_fabric(args.spec)
    rep = validate(fab)
    inv = inventory(fab)
    if args.json:
        _json_out({"spec": fab.spec, "params": dict(fab.params), "counts": fab.counts(), "inventory": inv,
                   "validation": rep.to_dict()})
        return 0 if rep.ok else 1
    c = fab.counts()
    groups = ", ".join(f"{k.split('_', 1)[1]} {v}" for k, v in c.items() if k.startswith("switches_"))
    models = " + ".join(f"{m['count']} x {m['radix']}x{m['port_gbps']:g}G" for m in inv["switch_models"])
    print(fab.spec)
    print(f"  GPUs            {c['gpus']} ({fab.params['gpus_per_server']} per server), "
          f"{fab.ports_per_gpu} NIC port(s) of {fab.gpu_port(0, 0).rate_bps / 1e9:g} Gb/s each")
    print(f"  switches        {c['switches']} ({groups}): {models}")
    print(f"  cables          {c['cables']} = {c['nic_links']} NIC + {c['fabric_links']} fabric; "
          f"transceivers {inv['transceivers']}")
    print(f"  per GPU         switch {inv['switch_tbps_per_gpu']:.2f} Tb/s, optics {inv['optics_tbps_per_gpu']:.2f} Tb/s")
    apl = "not computed above 4096 GPUs" if rep.avg_path_links is None else f"{rep.avg_path_links:.3f} links"
    print(f"  diameter        {rep.diameter_switches} switches; average GPU-GPU path {apl}")
    print(f"  validation      {'OK' if rep.ok else 'FAILED'}")
    for name, result in rep.checks.items():
        print(f"    {'ok  ' if result == 'ok' else 'FAIL'} {name}{'' if result == 'ok' else ': ' + result}")
    return 0 if rep.ok else 1


def cmd_fabric_export(args) -> int:
    from .fabric import build_fabric
    from .fabric import draw

    fab = build_fabric(args.spec)
    out = args.output
    if out.endswith(".json"):
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(fab.to_json())
    elif out.endswith(".dot"):
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(draw.to_dot(fab))
    elif out.endswith(".png"):
        draw.to_png(fab, out)
    else:
        raise SpecError(f"cannot tell the format of {out!r}: use a .json, .dot or .png file name")
    print(f"wrote {out} ({fab.spec})")
    return 0


def cmd_route(args) -> int:
    from .fabric import build_fabric
    from .fabric.routing import route

    fab = build_fabric(args.spec)
    r = route(fab, args.src, args.dst, sport=args.sport)
    if args.json:
        _json_out({"src": r.src_port, "dst": r.dst_port, "dst_ip": r.dst_ip,
                   "hops": [h.__dict__ for h in r.hops]})
        return 0
    path = " -> ".join(f"{h.switch}[{h.in_port}>{h.out_port}]" for h in r.hops)
    print(f"{r.src_port} -> {path} -> {r.dst_port} ({r.dst_ip}), {len(r.hops)} switches")
    return 0


def cmd_cost(args) -> int:
    from dataclasses import fields

    from .fabric.cost import Prices, compare, format_table

    try:
        gpus = [int(x) for x in args.gpus.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"--gpus takes comma-separated integers, got {args.gpus!r}") from None
    overrides = {}
    valid = {f.name for f in fields(Prices)}
    for item in args.price or []:
        key, _, value = item.partition("=")
        if key not in valid:
            raise SpecError(f"unknown price {key!r}; valid: {', '.join(sorted(valid))}")
        overrides[key] = float(value)
    prices = Prices(**overrides)
    rows = compare(gpus, prices, args.gpus_per_server)
    if args.json:
        _json_out(rows)
    else:
        print(format_table(rows, prices))
    return 0


def cmd_load(args) -> int:
    from .fabric import build_fabric
    from .fabric.load import estimate, from_file, pattern

    fab = build_fabric(args.spec)
    if args.file:
        traffic = from_file(fab, args.file)
    elif args.pattern:
        traffic = pattern(fab, args.pattern, fraction=args.fraction, seed=args.seed, fan_in=args.fan_in)
    else:
        raise SpecError("give --pattern NAME or --file CSV")
    res = estimate(fab, traffic, split=args.split, seed=args.seed)
    summary = {"spec": fab.spec, "pattern": traffic.name, **res.summary(fab)}
    if args.json:
        _json_out(summary)
        return 0
    print(f"{fab.spec}  pattern={traffic.name}")
    for key, value in summary.items():
        if key in ("spec", "pattern"):
            continue
        print(f"  {key:<32} {value:.3f}" if isinstance(value, float) else f"  {key:<32} {value}")
    return 0


def cmd_doctor(args) -> int:
    from .lab.doctor import main as doctor_main

    return doctor_main(as_json=args.json)


def cmd_clean(args) -> int:
    from .lab.clean import main as clean_main

    return clean_main(dry_run=args.dry_run)


def cmd_up(args) -> int:
    from .emulation.up import cmd_up as up

    return up(args)


def cmd_controller(args) -> int:
    from controllers.launch import main as launch

    return launch(args.rest)


def cmd_wiring_check(args) -> int:
    from .emulation import wiring
    from .emulation.network import write_json

    rep = wiring.check_run(args.run_dir)
    write_json(f"{args.run_dir}/wiring.json", rep)
    if args.json:
        _json_out(rep)
    else:
        print(wiring.format_report(rep))
    return 0 if rep["ok"] else 1


def cmd_verify_paths(args) -> int:
    from .emulation.probes import LiveRun, prove_path

    live = LiveRun(args.run_dir)
    bad = 0
    results = []
    for item in args.pairs:
        src, _, dst = item.partition(":")
        if not dst:
            raise SpecError(f"pair {item!r} is not SRC_PORT:DST (e.g. g0-p0:g5)")
        proof = prove_path(live, src, dst, sport=args.sport, count=args.count)
        bad += not proof.ok
        results.append(proof.__dict__ | {"ok": proof.ok})
        if not args.json:
            fmt = lambda hops: " -> ".join(f"{s}[out {p}]" for s, p in hops) or "(nothing counted)"  # noqa: E731
            print(f"{'ok  ' if proof.ok else 'FAIL'} {src} -> {proof.dst} sport {args.sport}: "
                  f"model {fmt(proof.model)}; counters {fmt(proof.observed)}")
    if args.json:
        _json_out(results)
    return 1 if bad else 0


def cmd_send(args) -> int:
    from testbed.emulation.probes import LiveRun
    from traffic.live import send_message

    live = LiveRun(args.run_dir)
    recs, counters = send_message(live, args.src, args.dst, args.size, split=args.split, path_mtu=args.path_mtu,
                                  sport=args.sport, timeout_s=args.timeout)
    if args.json:
        _json_out({"records": recs, "counters": counters})
        return 0 if all(r["integrity_ok"] for r in recs) else 1
    for r in recs:
        dt = (r["t_complete_ns"] - r["t_first_tx_ns"]) / 1e9
        print(f"{r['src']} -> {r['dst']} qp {r['qp']} sport {r['sport']}: {r['size_bytes']} bytes in {r['packets']} "
              f"packets, {dt * 1e3:.1f} ms, goodput {r['size_bytes'] * 8 / dt / 1e6:.2f} Mb/s, "
              f"retransmits {r['qp_retransmits']}, data {'intact' if r['integrity_ok'] else 'CORRUPT'}")
        print("  " + json.dumps({k: v for k, v in r.items() if k.startswith("t_")}, sort_keys=True))
    return 0 if all(r["integrity_ok"] for r in recs) else 1


def cmd_capture(args) -> int:
    from testbed.emulation.probes import LiveRun
    from traffic.capture import start

    if not args.count and not args.duration:
        raise SpecError("give --count N or --duration S so the capture ends")
    p = start(LiveRun(args.run_dir), args.iface, args.output, args.count, args.duration)
    _, err = p.communicate()
    if p.returncode not in (0, 124):
        print(f"zlab: error: tcpdump failed: {err.strip()}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} ({err.strip().splitlines()[-1] if err.strip() else 'done'})")
    return 0


def _print_summary(root, metrics) -> None:
    for lab, m in metrics.items():
        kv, tt = m["kv_transfer_real_s"], m["ttft_real_s"]
        f = m["fidelity"]
        fmt = lambda x: "—" if x is None else f"{1e3 * x:.2f}"  # noqa: E731
        print(f"  {lab:<8} KV p50/p99 {fmt(kv['p50'])}/{fmt(kv['p99'])} ms  TTFT p50/p99 {fmt(tt['p50'])}/{fmt(tt['p99'])} ms"
              f"  max queue {((m['queue_max_bytes'] or 0) / 1024):.1f} KiB  max offered util "
              f"{m['max_offered_link_util'] or 0:.2f}  {'valid' if f['valid'] else 'INVALID: ' + '; '.join(f['reasons'])}")
    print(f"[zlab] report: {root}/report.md")


def cmd_run(args) -> int:
    from .experiment import spec as especs
    from .experiment.runner import run_experiment

    spec = especs.load(args.spec, args.set)
    if args.dry_run:
        print(__import__("yaml").safe_dump(spec, sort_keys=False))
        return 0
    root, status = run_experiment(spec, results_dir=args.results, show_progress=not args.no_progress)
    metrics = json.loads((root / "metrics.json").read_text()) if (root / "metrics.json").exists() else {}
    print(f"[zlab] run {status}: {root}")
    _print_summary(root, metrics)
    if status != "complete":
        return 130
    return 0 if all(m["fidelity"]["valid"] for m in metrics.values()) else 3


def cmd_sweep(args) -> int:
    from .experiment import spec as especs
    from .experiment.runner import run_experiment

    key, eq, values = args.param.partition("=")
    if not eq or not values:
        raise SpecError(f"--param takes KEY=v1,v2,... (got {args.param!r})")
    roots = []
    for v in values.split(","):
        spec = especs.load(args.spec, (args.set or []) + [f"{key}={v}"])
        print(f"[zlab] sweep {key}={v}")
        root, status = run_experiment(spec, results_dir=args.results, show_progress=not args.no_progress)
        roots.append(root)
        if status != "complete":
            print("[zlab] sweep interrupted")
            break
    return compare_roots(roots, args.json)


def compare_roots(roots, as_json=False) -> int:
    rows = []
    for r in roots:
        from pathlib import Path

        r = Path(r)
        metrics = json.loads((r / "metrics.json").read_text())
        spec = __import__("yaml").safe_load((r / "spec.yaml").read_text())
        for lab, m in metrics.items():
            rows.append({"run": r.name, "fabric": lab, "mapping": spec["deployment"]["mapping"],
                         "offered_load": spec["workload"].get("offered_load"),
                         "kv_p50_ms": m["kv_transfer_real_s"]["p50"], "kv_p99_ms": m["kv_transfer_real_s"]["p99"],
                         "ttft_p99_ms": m["ttft_real_s"]["p99"], "queue_max_kib": (m["queue_max_bytes"] or 0) / 1024,
                         "max_offered_util": m["max_offered_link_util"], "valid": m["fidelity"]["valid"]})
    if as_json:
        _json_out(rows)
        return 0
    print(f"{'run':<32} {'fabric':<8} {'mapping':<13} {'KV p50 ms':>9} {'KV p99 ms':>9} {'TTFT p99 ms':>11} "
          f"{'max queue KiB':>13} {'max util':>8} valid")
    for x in rows:
        f = lambda v, s=1e3: "—" if v is None else f"{v * s:.2f}"  # noqa: E731
        print(f"{x['run']:<32} {x['fabric']:<8} {x['mapping']:<13} {f(x['kv_p50_ms']):>9} {f(x['kv_p99_ms']):>9} "
              f"{f(x['ttft_p99_ms']):>11} {x['queue_max_kib']:>13.1f} {f(x['max_offered_util'], 1):>8} {x['valid']}")
    return 0


def cmd_compare(args) -> int:
    return compare_roots(args.runs, args.json)


def cmd_report(args) -> int:
    from pathlib import Path

    from .measure import report

    metrics = report.build(Path(args.run_dir))
    _print_summary(args.run_dir, metrics)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zlab", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="zlab: emulation testbed comparing ZCube and rail-optimized fat-tree fabrics "
                    "for prefill/decode-disaggregated LLM serving.",
        epilog=EPILOG_SPECS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    d = sub.add_parser("doctor", help="check that this machine can run the lab (exit 1 on a blocker)")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(func=cmd_doctor)

    c = sub.add_parser("clean", help="remove what killed zlab runs left behind (only what zlab recorded)")
    c.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    c.set_defaults(func=cmd_clean)

    f = sub.add_parser("fabric", help="build, inspect and export fabric models (no root needed)")
    fsub = f.add_subparsers(dest="fabric_command", metavar="ACTION", required=True)
    fk = fsub.add_parser("kinds", help="list fabric kinds and every parameter with its default")
    fk.set_defaults(func=cmd_fabric_kinds)
    fs = fsub.add_parser("show", help="counts, diameter, inventory and validation of a fabric",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_SPECS)
    fs.add_argument("spec", help="fabric spec, e.g. zcube:n=4")
    fs.add_argument("--json", action="store_true", help="machine-readable output")
    fs.set_defaults(func=cmd_fabric_show)
    fe = fsub.add_parser("export", help="write the resolved fabric (.json), a Graphviz file (.dot) or a picture (.png)",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_SPECS)
    fe.add_argument("spec", help="fabric spec")
    fe.add_argument("-o", "--output", required=True, help="output file; the extension picks the format")
    fe.set_defaults(func=cmd_fabric_export)

    r = sub.add_parser("route", help="the model's path of one flow, hop by hop",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_SPECS)
    r.add_argument("spec", help="fabric spec")
    r.add_argument("src", help="source GPU port: interface name (g0-p0) or IP")
    r.add_argument("dst", help="destination GPU (g5: the address rule picks its port) or GPU port")
    r.add_argument("--sport", type=int, default=49152, help="UDP source port (ECMP entropy), default 49152")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_route)

    co = sub.add_parser("cost", help="ZCube vs two- and three-tier ROFT inventory and cost, side by side")
    co.add_argument("--gpus", default="1024,16384", help="comma-separated square GPU counts (default 1024,16384)")
    co.add_argument("--gpus-per-server", type=int, default=8, help="default 8")
    co.add_argument("--price", action="append", metavar="NAME=USD",
                    help="override an illustrative price (switch_usd_per_gbps, optic_usd_per_gbps, "
                         "fibre_cable_usd, copper_cable_usd); repeatable")
    co.add_argument("--json", action="store_true")
    co.set_defaults(func=cmd_cost)

    lo = sub.add_parser("load", help="flow-level link load and max-min rates for a traffic pattern",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_SPECS)
    lo.add_argument("spec", help="fabric spec")
    lo.add_argument("--pattern", help="rail-aligned, rank-shifted, random, incast or all-to-all")
    lo.add_argument("--file", help="CSV traffic matrix with columns src_gpu,dst_gpu,demand_gbps")
    lo.add_argument("--fraction", type=float, default=1.0,
                    help="each sender's demand as a fraction of its per-GPU bandwidth (default 1.0)")
    lo.add_argument("--seed", type=int, default=0, help="seed for random matchings and ECMP entropy (default 0)")
    lo.add_argument("--fan-in", type=int, default=4, help="senders per receiver for incast (default 4)")
    lo.add_argument("--split", choices=("half", "cons", "rail"),
                    help="ZCube port-split policy (default: the fabric spec's split)")
    lo.add_argument("--json", action="store_true")
    lo.set_defaults(func=cmd_load)
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
                    help="swap two fabric cables on purpose (default: the first two that share no switch)")
    up.add_argument("--wiring-check", action="store_true", help="print the cabling check once the fabric is up")
    up.add_argument("--no-cli", action="store_true", help="no Mininet CLI: stay up until Ctrl-C/SIGTERM")
    up.add_argument("--duration", type=float, default=0, help="with --no-cli: tear down after this many seconds")
    up.add_argument("--results", default="results", help="where the run folder goes (default ./results)")
    up.set_defaults(func=cmd_up)

    ct = sub.add_parser("controller", help="run the zlab OpenFlow app on os-ken for a run folder",
                        add_help=False)
    ct.add_argument("rest", nargs=argparse.REMAINDER)
    ct.set_defaults(func=cmd_controller)

    wc = sub.add_parser("wiring-check", help="compare LLDP-discovered cabling of a live run with its blueprint")
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
    se.add_argument("--split", choices=("half", "cons", "rail"), help="ZCube port split (default: the fabric's)")
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

    def experiment_args(x):
        x.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a spec field, e.g. deployment.mapping=rank-shifted (repeatable)")
        x.add_argument("--results", default="results", help="where run folders go (default ./results)")
        x.add_argument("--no-progress", action="store_true", help="no progress bar")

    ru = sub.add_parser("run", help="run an experiment spec (default: ZCube(4,2) vs 16-GPU two-segment ROFT, "
                                    "Azure code trace); writes results/<run>/report.md")
    ru.add_argument("spec", nargs="?", help="YAML experiment spec merged over the built-in default")
    ru.add_argument("--dry-run", action="store_true", help="print the resolved spec and exit")
    experiment_args(ru)
    ru.set_defaults(func=cmd_run)
    sw = sub.add_parser("sweep", help="run a spec once per value of one field, then compare")
    sw.add_argument("spec", nargs="?", help="YAML experiment spec (default: the built-in one)")
    sw.add_argument("--param", required=True, metavar="KEY=v1,v2",
                    help="e.g. emulation.rate_scale=5e-5,1e-4 (NIC 100G vs 200G)")
    sw.add_argument("--json", action="store_true")
    experiment_args(sw)
    sw.set_defaults(func=cmd_sweep)
    cm = sub.add_parser("compare", help="key metrics of several runs side by side")
    cm.add_argument("runs", nargs="+", help="run folders")
    cm.add_argument("--json", action="store_true")
    cm.set_defaults(func=cmd_compare)
    rp = sub.add_parser("report", help="rebuild tables, plots and report.md of a run from its raw records")
    rp.add_argument("run_dir")
    rp.set_defaults(func=cmd_report)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, KeyError, LookupError, OSError) as exc:
        # Bad input (spec, pattern, file) gets one clear line, not a traceback.
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"zlab: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
