"""Model commands (no root): fabric kinds/show/export, route, cost, load."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserInputError
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
    if not out.endswith((".json", ".dot", ".png", ".clab.yml", ".clab.yaml")):
        raise SpecError(f"cannot tell the format of {out!r}: use a .json, .dot, .png or .clab.yml file name")
    try:
        if out.endswith((".clab.yml", ".clab.yaml")):
            from ..fabric import clab

            name = Path(out).name.rsplit(".clab.", 1)[0]
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(clab.dumps(fab, name=name, image=args.image))
            setup = Path(out).with_name(f"{name}.setup.sh")
            setup.write_text(clab.setup_script(fab))
            setup.chmod(0o755)
            ctl = Path(out).with_name(f"{name}.controller")  # what `zlab controller` reads: the model's tables
            ctl.mkdir(exist_ok=True)
            (ctl / "fabric.json").write_text(fab.to_json())
            from ..emulation.runfolder import flows_document
            from ..records import write_json

            write_json(ctl / "flows.json", flows_document(fab))
            print(f"wrote {out}, {setup} and {ctl}/ ({fab.spec}; {len(fab.nodes)} nodes, {len(fab.links)} links)")
            return 0
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


def cmd_fabric_import(args) -> int:
    from ..fabric import clab

    try:
        text = Path(args.clab_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {args.clab_file}: {exc.strerror}") from None
    try:
        fab = clab.loads(text)
    except SpecError:
        raise
    except UserInputError as exc:
        raise SpecError(f"{args.clab_file}: {exc}") from None
    if not args.output.endswith(".json"):
        raise SpecError(f"{args.output!r}: the imported fabric is written as JSON (.json)")
    Path(args.output).write_text(fab.to_json())
    print(f"wrote {args.output} ({fab.spec}; {len(fab.nodes)} nodes, {len(fab.links)} links)")
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

    from ..fabric import failures as fl

    fab = build_fabric(args.spec)
    if args.seeds < 1:
        raise SpecError(f"--seeds must be >= 1 (got {args.seeds})")
    if not args.file and not args.pattern:
        raise SpecError("give --pattern NAME or --file CSV")
    degraded = None
    if args.fail:
        degraded = fl.degrade(fab, fl.parse(fab, args.fail), args.repair)
    elif args.repair:
        raise SpecError("--repair needs --fail (a healthy fabric has nothing to repair)")
    draws = []
    for seed in range(args.seed, args.seed + args.seeds):
        traffic = from_file(fab, args.file) if args.file else pattern(
            fab, args.pattern, fraction=args.fraction, seed=seed, fan_in=args.fan_in)
        draws.append(estimate(fab, traffic, split=args.split, seed=seed, degraded=degraded).summary(fab))
    keys = [k for k, v in draws[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and (degraded is not None or k not in ("lost_transfers", "lost_subflows", "failed_over_subflows"))]
    summary = {"spec": fab.spec, "pattern": traffic.name, "seeds": [args.seed, args.seed + args.seeds - 1],
               **({"failures": degraded.failures.describe(fab), "repair": degraded.policy} if degraded else {}),
               **{k: ci95([d[k] for d in draws]) for k in keys},
               "hottest_link_first_seed": draws[0]["hottest_link"]}
    if args.json:
        print_json(summary)
        return 0
    print(f"{fab.spec}  pattern={traffic.name}  seeds {args.seed}..{args.seed + args.seeds - 1} "
          "(mean ± 95 % CI [min, max] over draws)"
          + (f"\nfailed: {summary['failures']}; repair policy {summary['repair']}" if degraded else ""))

    def cell(c):
        half = "" if c["ci95"] is None else f" ± {c['ci95']:.3f}"
        return f"{c['mean']:.3f}{half} [{min(c['values']):.3f}, {max(c['values']):.3f}]"

    print_fields([(k, cell(summary[k])) for k in keys], width=32)
    return 0


def cmd_layout(args) -> int:
    """One spec: the layout written to --output (floor plan, patch list, BOM); several specs: also
    a side-by-side table of cables, fibre and optics."""
    from pathlib import Path

    from ..fabric import build_fabric, floorplan
    from ..fabric import layout as lay_mod
    from ..records import write_json

    cons = lay_mod.Constraints.parse(args.set)
    rows, used = [], set()
    for spec in args.spec:
        fab = build_fabric(spec)
        lay = lay_mod.plan(fab, cons)
        bom = lay_mod.bom(fab, lay)
        rows.append(bom)
        if args.output:
            name = ""
            if len(args.spec) > 1:  # one subfolder per spec: kind-GPUs, numbered when that repeats
                name = base = f"{fab.kind}-{fab.n_gpus}"
                k = 2
                while name in used:
                    name, k = f"{base}-{k}", k + 1
                used.add(name)
            out = Path(args.output) / name
            out.mkdir(parents=True, exist_ok=True)
            (out / "patch-list.csv").write_text(lay_mod.patch_list_csv(fab, lay))
            write_json(out / "bom.json", bom)
            write_json(out / "layout.json", lay_mod.layout_json(lay))
            if not args.no_drawing:
                floorplan.draw(fab, lay, str(out / "floorplan.png"))
            if not args.json:
                print(f"[zlab] {fab.spec}: wrote {out}/ (patch-list.csv, bom.json, layout.json"
                      f"{'' if args.no_drawing else ', floorplan.png'})")
    if args.json:
        print_json(rows)
        return 0
    head = (f"{'fabric':<46} {'GPUs':>6} {'racks':>6} {'cables':>7} {'DAC':>6} {'AEC':>6} {'AOC':>6} {'optics':>7}"
            f" {'fibre km':>8} {'optical %':>9} {'longest m':>9} {'$/GPU':>8}")
    print(head)
    print("-" * len(head))
    for b in rows:
        m = b["cables_by_medium"]
        print(f"{b['spec'][:46]:<46} {b['gpus']:>6} {b['racks']['total']:>6} {b['cables']:>7} {m['DAC']:>6} {m['AEC']:>6}"
              f" {m['AOC']:>6} {m['optics']:>7} {b['fibre_length_m'] / 1000:>8.2f} {100 * b['optical_share']:>8.1f}%"
              f" {b['longest_cable_m']:>9.1f} {b['cost']['total_usd_per_gpu']:>8,.0f}")
    print(f"constraints: {cons.servers_in_rack} servers or {cons.switches_in_rack} switches per rack, "
          f"{cons.racks_per_row} racks per row; reach DAC <= {cons.dac_max_m:g} m, AEC <= {cons.aec_max_m:g} m, "
          f"AOC <= {cons.aoc_max_m:g} m, else optics (illustrative prices)")
    return 0


def cmd_multiplane(args) -> int:
    from ..fabric import multiplane
    from ..measure.stats import ci95

    if args.seeds < 1:
        raise SpecError(f"--seeds must be >= 1 (got {args.seeds})")
    pats = [p.strip() for p in args.pattern.split(",") if p.strip()]
    if not pats:
        raise SpecError("--pattern needs at least one pattern name")
    out = []
    for spec in args.spec:
        print(f"[zlab] {spec}: building, validating and estimating {', '.join(pats)} over {args.seeds} draw(s) ...",
              flush=True)
        out.append(multiplane.run(spec, pats, args.fraction, args.seeds))
    if args.json:
        print_json(out)
        return 0 if all(r["validation"]["ok"] for r in out) else 1
    for r in out:
        c, v = r["counts"], r["validation"]
        print(f"\n{r['spec']}  (plane: {r['plane_spec']})")
        print_fields([
            ("GPUs", f"{c['gpus']:,} in {c['planes']} plane(s) of {r['gpus_per_plane']:,}; {c['nic_ports_per_gpu']} "
                     f"NIC ports per GPU at {r['plane_port_gbps']:g} Gb/s"),
            ("switches / cables", f"{c['switches']:,} of radix {r['plane_switch_radix']} / {c['cables']:,}"),
            ("validation", ("OK" if v["ok"] else "FAILED") + f"; diameter {v['diameter_switches']} switches, "
                           f"scale-up relay hops <= {v['max_scale_up_hops']}"),
            ("time / memory", f"build {r['build_s']:.1f} s, validate {r['validate_s']:.1f} s, load {r['load_s']:.1f} s; "
                              f"peak RSS {r['peak_rss_mib']:,.0f} MiB")])
        for name, check in v["checks"].items():
            if check != "ok":
                print(f"    FAIL {name}: {check}")
        for name, ld in r["loads"].items():
            m = ci95(ld["max_link_util"])
            half = "" if m["ci95"] is None else f" ± {m['ci95']:.3f}"
            print(f"  {name:<13} max link util {m['mean']:.3f}{half}; relayed "
                  f"{100 * ld['relayed_fraction_of_bytes'][0]:.0f} % of bytes over scale-up; min max-min share "
                  f"{min(ld['maxmin_min_fraction_of_demand']):.3f}")
    return 0 if all(r["validation"]["ok"] for r in out) else 1


def cmd_resilience(args) -> int:
    import sys

    from ..fabric import build_fabric
    from ..fabric import failures as fl
    from ..fabric.load import pattern
    from ..fabric.resilience import sweep

    if args.sample is not None and args.sample < 1:
        raise SpecError(f"--sample must be >= 1 (got {args.sample})")
    results = []
    for spec in args.spec:
        fab = build_fabric(spec)
        pols = fl.policies(fab) if args.repair == "all" else (fl.check_policy(fab, args.repair),)
        traffic = pattern(fab, args.pattern, fraction=args.fraction, seed=args.seed)
        for pol in pols:
            n = len(fl.single_failures(fab))
            print(f"[zlab] {fab.spec} repair={pol}: {min(n, args.sample or n):,} of {n:,} single failures ...",
                  file=sys.stderr, flush=True)
            r = sweep(fab, traffic, pol, sample=args.sample, seed=args.seed,
                      progress=lambda k, t: print(f"[zlab]   {k:,}/{t:,}", file=sys.stderr, flush=True))
            results.append(r)
    if args.json:
        print_json([{k: v for k, v in r.items() if k != "rows"} for r in results])
        return 0
    print(f"pattern {args.pattern} at {args.fraction:g} of line rate; one failure at a time; max link util (mean / "
          "worst), transfers losing every path, throughput lost vs healthy (mean / worst)")
    head = (f"{'fabric':<34} {'repair':<7} {'failure':<13} {'runs':>6} {'util mean':>9} {'worst':>6} "
            f"{'losing':>7} {'lost max':>8} {'tput lost':>9} {'worst':>6}  worst failure")
    print(head)
    print("-" * len(head))
    for r in results:
        for what, c in r["classes"].items():
            print(f"{r['spec'][:34]:<34} {r['policy']:<7} {what:<13} {c['scenarios']:>6,} "
                  f"{c['max_link_util_mean']:>9.2f} {c['max_link_util_worst']:>6.2f} {c['scenarios_losing_transfers']:>7,}"
                  f" {c['lost_transfers_max']:>8,} {100 * c['throughput_lost_mean']:>8.2f}% "
                  f"{100 * c['throughput_lost_worst']:>5.1f}%  {c['worst_failure']}")
        print(f"{'':<34} {r['policy']:<7} healthy util {r['healthy_max_link_util']:.2f}; "
              f"{r['scenarios_run']:,} of {r['scenarios_total']:,} failures"
              f"{' (random sample, seed ' + str(r['seed']) + ')' if r['sampled'] else ''} in {r['seconds']:.1f} s")
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
    fe.add_argument("-o", "--output", required=True, help="output file; the extension picks the format "
                    "(NAME.clab.yml: a containerlab topology, plus NAME.setup.sh creating its OVS bridges)")
    fe.add_argument("--image", default="ghcr.io/hellt/network-multitool",
                    help="clab export: container image of the GPU hosts (needs iproute2)")
    fe.set_defaults(func=cmd_fabric_export)

    fi = fsub.add_parser("import", help="rebuild the zlab fabric model of a containerlab file zlab exported")
    fi.add_argument("clab_file", help="NAME.clab.yml written by zlab fabric export")
    fi.add_argument("-o", "--output", required=True, help="the fabric JSON to write (.json)")
    fi.set_defaults(func=cmd_fabric_import)

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
    lo.add_argument("--fail", action="append", metavar="WHAT",
                    help="fail a cable or switch before estimating: cable:PORT (either end, e.g. g0-p0 or za0-p5), "
                         "cable:NODE1,NODE2 or switch:NAME; repeatable")
    lo.add_argument("--repair", help="repair policy for --fail: ZCube none|host|detour|both (default none), "
                                     "ROFT ecmp (member removal)")
    lo.add_argument("--json", action="store_true")
    lo.set_defaults(func=cmd_load)

    rs = sub.add_parser("resilience", help="every single cable and switch failure: worst case and mean, per repair "
                                           "policy, side by side", formatter_class=raw, epilog=EPILOG_SPECS)
    rs.add_argument("spec", nargs="+", help="fabric spec(s)")
    rs.add_argument("--pattern", default="rank-shifted", help="traffic pattern (default rank-shifted)")
    rs.add_argument("--fraction", type=float, default=1.0, help="each sender's demand as a fraction of its bandwidth")
    rs.add_argument("--repair", default="all", help="repair policy, or all (default): every policy of each kind")
    rs.add_argument("--sample", type=int, help="run this many failures drawn at random (with --seed) instead of all")
    rs.add_argument("--seed", type=int, default=0, help="seed of the pattern, ECMP entropy and the sample (default 0)")
    rs.add_argument("--json", action="store_true")
    rs.set_defaults(func=cmd_resilience)

    from dataclasses import fields as dc_fields

    from ..fabric.layout import Constraints

    la = sub.add_parser(
        "layout", help="machine-room layout: racks, rows, cable lengths and media, patch list, BOM, floor plan",
        formatter_class=raw,
        epilog="constraints (--set key=value, repeatable) and their defaults:\n"
               + "\n".join(f"  {f.name} = {f.default}" for f in dc_fields(Constraints))
               + "\n\nexample: zlab layout zcube:n=32,gpus_per_server=8 roft:gpus=1024,radix=32,tiers=3 -o layouts/")
    la.add_argument("spec", nargs="+", help="fabric spec(s); several give a side-by-side table")
    la.add_argument("-o", "--output", help="folder for patch-list.csv, bom.json, layout.json and floorplan.png "
                                           "(one subfolder per spec when several are given)")
    la.add_argument("--set", action="append", metavar="KEY=VALUE", help="a layout constraint (see below); repeatable")
    la.add_argument("--no-drawing", action="store_true", help="skip floorplan.png")
    la.add_argument("--json", action="store_true", help="print the bills of materials as JSON")
    la.set_defaults(func=cmd_layout)

    mp = sub.add_parser(
        "multiplane", help="multi-plane ZCube beyond one plane's n*n GPUs: validation, load, time and memory",
        formatter_class=raw,
        epilog="spec: zcube-planes:planes=P,n=N[,gpus_per_server=8,gpu_gbps=400,assign=rank|nic]\n"
               "  assign=rank  GPU rank r joins plane r mod P; inter-plane traffic relays over the server's\n"
               "               scale-up link to the peer GPU in the destination's plane (P*n*n GPUs)\n"
               "  assign=nic   every GPU has P dual-port NICs, NIC k in plane k (n*n GPUs, 1/P bandwidth each)\n"
               "example: zlab multiplane zcube-planes:planes=2,n=128 zcube-planes:planes=8,n=128")
    mp.add_argument("spec", nargs="+", help="multi-plane spec(s)")
    mp.add_argument("--pattern", default="rail-aligned,rank-shifted,random",
                    help="comma-separated patterns (default rail-aligned,rank-shifted,random)")
    mp.add_argument("--fraction", type=float, default=1.0, help="each sender's demand as a fraction of its bandwidth")
    mp.add_argument("--seeds", type=int, default=3, help="independent draws per pattern (default 3)")
    mp.add_argument("--json", action="store_true")
    mp.set_defaults(func=cmd_multiplane)
