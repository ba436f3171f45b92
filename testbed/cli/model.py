"""Model commands (no root): fabric kinds/show/export, route, cost, load."""

from __future__ import annotations

import argparse

from ..fabric.params import SpecError
from .output import print_fields, print_json

EPILOG_SPECS = """fabric specs (kind:key=value,...), e.g.
  zcube:n=4,gpus_per_server=4              ZCube(4,2), the paper's 16-GPU testbed
  zcube:n=8,gpus=32,links_per_pair=2       Zhipu's rectangular 32-GPU form
  roft:gpus=16,gpus_per_server=4,segments=2
  roft:gpus=16384,radix=128                three tiers (640 switches)
run 'zlab fabric kinds' for every parameter with its default."""


def cmd_fabric_kinds(args) -> int:
    from ..fabric.kinds import KINDS

    for kind in KINDS.values():
        print(kind.describe())
        print()
    return 0


def cmd_fabric_show(args) -> int:
    from ..fabric import build_fabric
    from ..fabric.cost import inventory
    from ..fabric.validate import validate

    fab = build_fabric(args.spec)
    rep = validate(fab)
    inv = inventory(fab)
    if args.json:
        print_json({"spec": fab.spec, "params": dict(fab.params), "counts": fab.counts(), "inventory": inv,
                    "validation": rep.to_dict()})
        return 0 if rep.ok else 1
    c = fab.counts()
    groups = ", ".join(f"{k.split('_', 1)[1]} {v}" for k, v in c.items() if k.startswith("switches_"))
    models = " + ".join(f"{m['count']} x {m['radix']}x{m['port_gbps']:g}G" for m in inv["switch_models"])
    print(fab.spec)
    apl = "not computed above 4096 GPUs" if rep.avg_path_links is None else f"{rep.avg_path_links:.3f} links"
    print_fields([
        ("GPUs", f"{c['gpus']} ({fab.params['gpus_per_server']} per server), {fab.ports_per_gpu} NIC port(s) of "
                 f"{fab.gpu_port(0, 0).rate_bps / 1e9:g} Gb/s each"),
        ("switches", f"{c['switches']} ({groups}): {models}"),
        ("cables", f"{c['cables']} = {c['nic_links']} NIC + {c['fabric_links']} fabric; transceivers "
                   f"{inv['transceivers']}"),
        ("per GPU", f"switch {inv['switch_tbps_per_gpu']:.2f} Tb/s, optics {inv['optics_tbps_per_gpu']:.2f} Tb/s"),
        ("diameter", f"{rep.diameter_switches} switches; average GPU-GPU path {apl}"),
        ("validation", "OK" if rep.ok else "FAILED")])
    for name, result in rep.checks.items():
        print(f"    {'ok  ' if result == 'ok' else 'FAIL'} {name}{'' if result == 'ok' else ': ' + result}")
    return 0 if rep.ok else 1


def cmd_fabric_export(args) -> int:
    from ..fabric import build_fabric, draw

    fab = build_fabric(args.spec)
    out = args.output
    if not out.endswith((".json", ".dot", ".png")):
        raise SpecError(f"cannot tell the format of {out!r}: use a .json, .dot or .png file name")
    try:
        if out.endswith(".json"):
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(fab.to_json())
        elif out.endswith(".dot"):
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(draw.to_dot(fab))
        else:
            draw.to_png(fab, out)
    except OSError as exc:
        raise SpecError(f"cannot write {out}: {exc.strerror}") from None
    print(f"wrote {out} ({fab.spec})")
    return 0


def cmd_route(args) -> int:
    from ..fabric import build_fabric
    from ..fabric.paths import route

    fab = build_fabric(args.spec)
    r = route(fab, args.src, args.dst, sport=args.sport)
    if args.json:
        print_json({"src": r.src_port, "dst": r.dst_port, "dst_ip": r.dst_ip, "hops": [h.__dict__ for h in r.hops]})
        return 0
    path = " -> ".join(f"{h.switch}[{h.in_port}>{h.out_port}]" for h in r.hops)
    print(f"{r.src_port} -> {path} -> {r.dst_port} ({r.dst_ip}), {len(r.hops)} switches")
    return 0


def cmd_cost(args) -> int:
    from dataclasses import fields

    from ..fabric.cost import Prices, compare, format_table

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
        try:
            overrides[key] = float(value)
        except ValueError:
            raise SpecError(f"--price {item!r}: {value!r} is not a number") from None
    prices = Prices(**overrides)
    rows = compare(gpus, prices, args.gpus_per_server)
    if args.json:
        print_json(rows)
    else:
        print(format_table(rows, prices))
    return 0


def cmd_load(args) -> int:
    """Every draw (seed) routes new UDP source ports (ECMP entropy) and, for random matchings, a
    new matching: figures are means over --seeds draws with a 95 % CI and the range."""
    from ..fabric import build_fabric
    from ..fabric.load import estimate, from_file, pattern
    from ..measure.stats import ci95

    fab = build_fabric(args.spec)
    if args.seeds < 1:
        raise SpecError(f"--seeds must be >= 1 (got {args.seeds})")
    if not args.file and not args.pattern:
        raise SpecError("give --pattern NAME or --file CSV")
    draws = []
    for seed in range(args.seed, args.seed + args.seeds):
        traffic = from_file(fab, args.file) if args.file else pattern(
            fab, args.pattern, fraction=args.fraction, seed=seed, fan_in=args.fan_in)
        draws.append(estimate(fab, traffic, split=args.split, seed=seed).summary(fab))
    keys = [k for k, v in draws[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    summary = {"spec": fab.spec, "pattern": traffic.name, "seeds": [args.seed, args.seed + args.seeds - 1],
               **{k: ci95([d[k] for d in draws]) for k in keys},
               "hottest_link_first_seed": draws[0]["hottest_link"]}
    if args.json:
        print_json(summary)
        return 0
    print(f"{fab.spec}  pattern={traffic.name}  seeds {args.seed}..{args.seed + args.seeds - 1} "
          "(mean ± 95 % CI [min, max] over draws)")

    def cell(c):
        half = "" if c["ci95"] is None else f" ± {c['ci95']:.3f}"
        return f"{c['mean']:.3f}{half} [{min(c['values']):.3f}, {max(c['values']):.3f}]"

    print_fields([(k, cell(summary[k])) for k in keys], width=32)
    return 0


def add_commands(sub) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    f = sub.add_parser("fabric", help="build, inspect and export fabric models (no root needed)")
    fsub = f.add_subparsers(dest="fabric_command", metavar="ACTION", required=True)
    fk = fsub.add_parser("kinds", help="list fabric kinds and every parameter with its default")
    fk.set_defaults(func=cmd_fabric_kinds)
    fs = fsub.add_parser("show", help="counts, diameter, inventory and validation of a fabric",
                         formatter_class=raw, epilog=EPILOG_SPECS)
    fs.add_argument("spec", help="fabric spec, e.g. zcube:n=4")
    fs.add_argument("--json", action="store_true", help="machine-readable output")
    fs.set_defaults(func=cmd_fabric_show)
    fe = fsub.add_parser("export", help="write the resolved fabric (.json), a Graphviz file (.dot) or a picture (.png)",
                         formatter_class=raw, epilog=EPILOG_SPECS)
    fe.add_argument("spec", help="fabric spec")
    fe.add_argument("-o", "--output", required=True, help="output file; the extension picks the format")
    fe.set_defaults(func=cmd_fabric_export)

    r = sub.add_parser("route", help="the model's path of one flow, hop by hop", formatter_class=raw,
                       epilog=EPILOG_SPECS)
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
                        formatter_class=raw, epilog=EPILOG_SPECS)
    lo.add_argument("spec", help="fabric spec")
    lo.add_argument("--pattern", help="rail-aligned, rank-shifted, random, incast or all-to-all")
    lo.add_argument("--file", help="CSV traffic matrix with columns src_gpu,dst_gpu,demand_gbps")
    lo.add_argument("--fraction", type=float, default=1.0,
                    help="each sender's demand as a fraction of its per-GPU bandwidth (default 1.0)")
    lo.add_argument("--seed", type=int, default=0, help="first seed for random matchings and ECMP entropy (default 0)")
    lo.add_argument("--seeds", type=int, default=20,
                    help="independent draws (seeds seed..seed+N-1); figures are means with 95 %% CI and range "
                         "(default 20)")
    lo.add_argument("--fan-in", type=int, default=4, help="senders per receiver for incast (default 4)")
    lo.add_argument("--split", help="port-split policy of a multi-port kind, e.g. ZCube's half, cons or rail "
                                    "(default: the fabric spec's split)")
    lo.add_argument("--json", action="store_true")
    lo.set_defaults(func=cmd_load)
