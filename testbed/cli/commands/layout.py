"""`zlab layout`: machine-room layout of fabric models: racks, cables, patch list, BOM, floor plan."""

from __future__ import annotations

from dataclasses import fields

from ...fabric.layout import Constraints
from .. import options
from ..output import print_json


def run(args) -> int:
    """One spec: the layout written to --output (floor plan, patch list, BOM); several specs: also
    a side-by-side table of cables, fibre and optics."""
    from pathlib import Path

    from ...fabric import build_fabric, floorplan
    from ...fabric import layout as lay_mod
    from ...records import write_json

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
                print(
                    f"[zlab] {fab.spec}: wrote {out}/ (patch-list.csv, bom.json, layout.json"
                    f"{'' if args.no_drawing else ', floorplan.png'})"
                )
    if args.json:
        print_json(rows)
        return 0
    head = (
        f"{'fabric':<46} {'GPUs':>6} {'racks':>6} {'cables':>7} {'DAC':>6} {'AEC':>6} {'AOC':>6} {'optics':>7}"
        f" {'fibre km':>8} {'optical %':>9} {'longest m':>9} {'$/GPU':>8}"
    )
    print(head)
    print("-" * len(head))
    for b in rows:
        m = b["cables_by_medium"]
        print(
            f"{b['spec'][:46]:<46} {b['gpus']:>6} {b['racks']['total']:>6} {b['cables']:>7} {m['DAC']:>6} {m['AEC']:>6}"
            f" {m['AOC']:>6} {m['optics']:>7} {b['fibre_length_m'] / 1000:>8.2f} {100 * b['optical_share']:>8.1f}%"
            f" {b['longest_cable_m']:>9.1f} {b['cost']['total_usd_per_gpu']:>8,.0f}"
        )
    print(
        f"constraints: {cons.servers_in_rack} servers or {cons.switches_in_rack} switches per rack, "
        f"{cons.racks_per_row} racks per row; reach DAC <= {cons.dac_max_m:g} m, AEC <= {cons.aec_max_m:g} m, "
        f"AOC <= {cons.aoc_max_m:g} m, else optics (illustrative prices)"
    )
    return 0


def register(sub) -> None:
    la = sub.add_parser(
        "layout",
        parents=[options.JSON],
        help="machine-room layout: racks, rows, cable lengths and media, patch list, BOM, floor plan",
        formatter_class=options.RAW,
        epilog="constraints (--set key=value, repeatable) and their defaults:\n"
        + "\n".join(f"  {f.name} = {f.default}" for f in fields(Constraints))
        + "\n\nexample: zlab layout zcube:n=32,gpus_per_server=8 roft:gpus=1024,radix=32,tiers=3 -o layouts/",
    )
    la.add_argument("spec", nargs="+", help="fabric spec(s); several give a side-by-side table")
    la.add_argument(
        "-o",
        "--output",
        help="folder for patch-list.csv, bom.json, layout.json and floorplan.png "
        "(one subfolder per spec when several are given)",
    )
    la.add_argument("--set", action="append", metavar="KEY=VALUE", help="a layout constraint (see below); repeatable")
    la.add_argument("--no-drawing", action="store_true", help="skip floorplan.png")
    la.set_defaults(func=run)
