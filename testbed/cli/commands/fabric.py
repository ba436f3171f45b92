"""`zlab fabric ACTION`: build, inspect, export and import fabric models (no root)."""

from __future__ import annotations

from pathlib import Path

from ...errors import UserInputError
from ...fabric.params import SpecError
from .. import options
from ..output import print_fields, print_json


def kinds(args) -> int:
    from ...fabric.kinds import KINDS

    for kind in KINDS.values():
        print(kind.describe())
        print()
    return 0


def show(args) -> int:
    from ...fabric import build_fabric
    from ...fabric.cost import inventory
    from ...fabric.validate import validate

    fab = build_fabric(args.spec)
    rep = validate(fab)
    inv = inventory(fab)
    if args.json:
        print_json(
            {
                "spec": fab.spec,
                "params": dict(fab.params),
                "counts": fab.counts(),
                "inventory": inv,
                "validation": rep.to_dict(),
            }
        )
        return 0 if rep.ok else 1
    c = fab.counts()
    groups = ", ".join(f"{k.split('_', 1)[1]} {v}" for k, v in c.items() if k.startswith("switches_"))
    models = " + ".join(f"{m['count']} x {m['radix']}x{m['port_gbps']:g}G" for m in inv["switch_models"])
    print(fab.spec)
    apl = "not computed above 4096 GPUs" if rep.avg_path_links is None else f"{rep.avg_path_links:.3f} links"
    print_fields(
        [
            (
                "GPUs",
                f"{c['gpus']} ({fab.params['gpus_per_server']} per server), {fab.ports_per_gpu} NIC port(s) of "
                f"{fab.gpu_port(0, 0).rate_bps / 1e9:g} Gb/s each",
            ),
            ("switches", f"{c['switches']} ({groups}): {models}"),
            (
                "cables",
                f"{c['cables']} = {c['nic_links']} NIC + {c['fabric_links']} fabric; transceivers "
                f"{inv['transceivers']}",
            ),
            ("per GPU", f"switch {inv['switch_tbps_per_gpu']:.2f} Tb/s, optics {inv['optics_tbps_per_gpu']:.2f} Tb/s"),
            ("diameter", f"{rep.diameter_switches} switches; average GPU-GPU path {apl}"),
            ("validation", "OK" if rep.ok else "FAILED"),
        ]
    )
    for name, result in rep.checks.items():
        print(f"    {'ok  ' if result == 'ok' else 'FAIL'} {name}{'' if result == 'ok' else ': ' + result}")
    return 0 if rep.ok else 1


def export(args) -> int:
    from ...fabric import build_fabric, draw

    fab = build_fabric(args.spec)
    out = args.output
    if not out.endswith((".json", ".dot", ".png", ".clab.yml", ".clab.yaml")):
        raise SpecError(f"cannot tell the format of {out!r}: use a .json, .dot, .png or .clab.yml file name")
    try:
        if out.endswith((".clab.yml", ".clab.yaml")):
            from ...fabric import clab

            name = Path(out).name.rsplit(".clab.", 1)[0]
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(clab.dumps(fab, name=name, image=args.image))
            setup = Path(out).with_name(f"{name}.setup.sh")
            setup.write_text(clab.setup_script(fab))
            setup.chmod(0o755)
            ctl = Path(out).with_name(f"{name}.controller")  # what `zlab controller` reads: the model's tables
            ctl.mkdir(exist_ok=True)
            (ctl / "fabric.json").write_text(fab.to_json())
            from ...emulation.runfolder import flows_document
            from ...records import write_json

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


def import_clab(args) -> int:
    from ...fabric import clab

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


def run(args) -> int:
    """One command, four actions: looked up when called, so each stays replaceable on its own."""
    return {"kinds": kinds, "show": show, "export": export, "import": import_clab}[args.fabric_command](args)


def register(sub) -> None:
    f = sub.add_parser("fabric", help="build, inspect and export fabric models (no root needed)")
    f.set_defaults(func=run)
    fsub = f.add_subparsers(dest="fabric_command", metavar="ACTION", required=True)
    fsub.add_parser("kinds", help="list fabric kinds and every parameter with its default")
    fs = fsub.add_parser(
        "show",
        parents=[options.JSON],
        help="counts, diameter, inventory and validation of a fabric",
        formatter_class=options.RAW,
        epilog=options.EPILOG_SPECS,
    )
    fs.add_argument("spec", help="fabric spec, e.g. zcube:n=4")
    fe = fsub.add_parser(
        "export",
        help="write the resolved fabric (.json), a Graphviz file (.dot) or a picture (.png)",
        formatter_class=options.RAW,
        epilog=options.EPILOG_SPECS,
    )
    fe.add_argument("spec", help="fabric spec")
    fe.add_argument(
        "-o",
        "--output",
        required=True,
        help="output file; the extension picks the format "
        "(NAME.clab.yml: a containerlab topology, plus NAME.setup.sh creating its OVS bridges)",
    )
    fe.add_argument(
        "--image",
        default="ghcr.io/hellt/network-multitool",
        help="clab export: container image of the GPU hosts (needs iproute2)",
    )
    fi = fsub.add_parser("import", help="rebuild the zlab fabric model of a containerlab file zlab exported")
    fi.add_argument("clab_file", help="NAME.clab.yml written by zlab fabric export")
    fi.add_argument("-o", "--output", required=True, help="the fabric JSON to write (.json)")
