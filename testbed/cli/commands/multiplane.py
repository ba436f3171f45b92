"""`zlab multiplane`: multi-plane ZCube beyond one plane's n*n GPUs: validation, load, time, memory."""

from __future__ import annotations

from ...fabric.params import SpecError
from .. import options
from ..output import print_fields, print_json


def run(args) -> int:
    from ...fabric import multiplane
    from ...measure.stats import ci95

    if args.seeds < 1:
        raise SpecError(f"--seeds must be >= 1 (got {args.seeds})")
    pats = [p.strip() for p in args.pattern.split(",") if p.strip()]
    if not pats:
        raise SpecError("--pattern needs at least one pattern name")
    out = []
    for spec in args.spec:
        print(
            f"[zlab] {spec}: building, validating and estimating {', '.join(pats)} over {args.seeds} draw(s) ...",
            flush=True,
        )
        out.append(multiplane.run(spec, pats, args.fraction, args.seeds))
    if args.json:
        print_json(out)
        return 0 if all(r["validation"]["ok"] for r in out) else 1
    for r in out:
        c, v = r["counts"], r["validation"]
        print(f"\n{r['spec']}  (plane: {r['plane_spec']})")
        print_fields(
            [
                (
                    "GPUs",
                    f"{c['gpus']:,} in {c['planes']} plane(s) of {r['gpus_per_plane']:,}; {c['nic_ports_per_gpu']} "
                    f"NIC ports per GPU at {r['plane_port_gbps']:g} Gb/s",
                ),
                ("switches / cables", f"{c['switches']:,} of radix {r['plane_switch_radix']} / {c['cables']:,}"),
                (
                    "validation",
                    ("OK" if v["ok"] else "FAILED") + f"; diameter {v['diameter_switches']} switches, "
                    f"scale-up relay hops <= {v['max_scale_up_hops']}",
                ),
                (
                    "time / memory",
                    f"build {r['build_s']:.1f} s, validate {r['validate_s']:.1f} s, load {r['load_s']:.1f} s; "
                    f"peak RSS {r['peak_rss_mib']:,.0f} MiB",
                ),
            ]
        )
        for name, check in v["checks"].items():
            if check != "ok":
                print(f"    FAIL {name}: {check}")
        for name, ld in r["loads"].items():
            m = ci95(ld["max_link_util"])
            half = "" if m["ci95"] is None else f" ± {m['ci95']:.3f}"
            print(
                f"  {name:<13} max link util {m['mean']:.3f}{half}; relayed "
                f"{100 * ld['relayed_fraction_of_bytes'][0]:.0f} % of bytes over scale-up; min max-min share "
                f"{min(ld['maxmin_min_fraction_of_demand']):.3f}"
            )
    return 0 if all(r["validation"]["ok"] for r in out) else 1


def register(sub) -> None:
    mp = sub.add_parser(
        "multiplane",
        parents=[options.JSON],
        help="multi-plane ZCube beyond one plane's n*n GPUs: validation, load, time and memory",
        formatter_class=options.RAW,
        epilog="spec: zcube-planes:planes=P,n=N[,gpus_per_server=8,gpu_gbps=400,assign=rank|nic]\n"
        "  assign=rank  GPU rank r joins plane r mod P; inter-plane traffic relays over the server's\n"
        "               scale-up link to the peer GPU in the destination's plane (P*n*n GPUs)\n"
        "  assign=nic   every GPU has P dual-port NICs, NIC k in plane k (n*n GPUs, 1/P bandwidth each)\n"
        "example: zlab multiplane zcube-planes:planes=2,n=128 zcube-planes:planes=8,n=128",
    )
    mp.add_argument("spec", nargs="+", help="multi-plane spec(s)")
    mp.add_argument(
        "--pattern",
        default="rail-aligned,rank-shifted,random",
        help="comma-separated patterns (default rail-aligned,rank-shifted,random)",
    )
    mp.add_argument("--fraction", type=float, default=1.0, help="each sender's demand as a fraction of its bandwidth")
    mp.add_argument("--seeds", type=int, default=3, help="independent draws per pattern (default 3)")
    mp.set_defaults(func=run)
