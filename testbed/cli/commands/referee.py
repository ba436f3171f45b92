"""`zlab referee RUN`: replay a recorded run in ns-3 and say where the emulation agrees."""

from __future__ import annotations

from pathlib import Path

from .. import options
from ..output import print_json


def cmd_oracles(args) -> int:
    """`zlab referee --oracles`: the queueing oracles in ns-3 (and the routing oracle on a run, if given)."""
    from ...referee import oracles, routing

    res = oracles.run_all(no_pacing=args.debug_no_pacing, log=(lambda *_: None) if args.json else print)
    if args.run_dir:
        res["routing"] = routing.check_run(Path(args.run_dir))
        res["ok"] = res["ok"] and all(r["ok"] for r in res["routing"].values())
    if args.json:
        print_json(res)
        return 0 if res["ok"] else 3
    if args.debug_no_pacing:
        print("DEBUG: the NIC pacer is removed (a broken transport): every oracle should FAIL")
    ok = lambda r: "ok" if r["ok"] else "FAILED"  # noqa: E731
    for tail in ("", "_bucket"):
        d, m, f = res["dd1" + tail], res["md1" + tail], res["fair_share" + tail]
        print(f"ns-3 links: {d['link_model']}")
        print(
            f"  D/D/1 (rho {d['rho']}, {d['messages']} messages): max |wait| {d['max_abs_wait_us']:.3g} µs against 0 "
            f"(tolerance {d['tolerance_us']} µs), NIC drops {d['nic_drops']}: {ok(d)}"
        )
        print(
            f"  M/D/1 (rho {m['rho']}, {m['messages']} Poisson messages, seed {m['seed']}): mean wait "
            f"{m['mean_wait_us'] / 1e3:.4g} ms vs Pollaczek-Khinchine {m['pollaczek_khinchine_us'] / 1e3:.4g} ms "
            f"({100 * m['mean_gap']:.2f} %, tolerance {100 * m['tolerance']['mean']:.0f} %); p99 "
            f"{m['p99_wait_us'] / 1e3:.4g} ms vs exact {m['exact_p99_us'] / 1e3:.4g} ms ({100 * m['p99_gap']:.2f} %, "
            f"tolerance {100 * m['tolerance']['p99']:.0f} %); per message off Lindley by at most "
            f"{m['max_off_lindley_us']:.3g} µs: {ok(m)}"
        )
        print(
            f"  fair share ({f['flows']} flows of {'/'.join(map(str, f['sizes_frames']))} frames, one bottleneck): "
            f"completion off processor sharing by at most {100 * f['max_gap']:.2f} % "
            f"(tolerance {100 * f['tolerance']:.0f} %), NIC drops {f['nic_drops']}: {ok(f)}"
        )
    for label, r in res.get("routing", {}).items():
        print(ref_routing_text(label, r))
    print(f"oracles: {'ALL PASS' if res['ok'] else 'FAILED'}")
    return 0 if res["ok"] else 3


def cmd_baseline(args) -> int:
    """`zlab referee RUN --baseline`: ns-3's own TCP beside zlab's transport, both in ns-3 (a sanity check)."""
    from ...referee import baseline

    if args.run_dir is None:
        args.parser.error("--baseline needs a run folder")
    res = baseline.baseline(Path(args.run_dir), repeats=args.repeats, log=(lambda *_: None) if args.json else print)
    if args.json:
        print_json(res)
    else:
        print(
            "ns-3 TCP (NewReno) beside zlab's transport in ns-3, same fabric, entries, QP source ports and schedule "
            "(serialising links, the emulation's scale); a sanity baseline, not an equality:"
        )
        for r in res["repeats"]:
            print(
                f"  {r['label']:<8} rep {r['repeat']}: bytes on {r['data_ports']} data-carrying ports off by at most "
                f"{100 * (r['data_bytes_max_error'] or 0):.2f} %; KV p50 zlab {r['kv_p50_s']['zlab']:.4g} s, "
                f"TCP {r['kv_p50_s']['tcp']:.4g} s; KV p99 zlab {r['kv_p99_s']['zlab']:.4g} s, "
                f"TCP {r['kv_p99_s']['tcp']:.4g} s; TCP incomplete {r['tcp_incomplete']}"
            )
        print(
            f"same bytes per link (within {100 * res['bytes_band']:.0f} %): {'yes' if res['same_bytes'] else 'NO'}; "
            f"written: {Path(args.run_dir) / 'referee' / 'baseline.json'}"
        )
    return 0 if res["same_bytes"] and not res["tcp_incomplete"] else 3


def ref_routing_text(label: str, r: dict) -> str:
    from ...referee.referee import routing_text

    return routing_text(label, r)


def run(args) -> int:
    from ...referee import referee as ref
    from ...referee.scenario import SCALES

    if args.oracles or args.debug_no_pacing:
        return cmd_oracles(args)
    if args.baseline:
        return cmd_baseline(args)
    if args.run_dir is None or args.scale is None:
        args.parser.error("a run folder and --scale are required (or --oracles)")
    root = Path(args.run_dir)
    log = (lambda *_: None) if args.json else print
    scales = SCALES if args.scale == "both" else (args.scale,)
    out, code = {}, 0
    for scale in scales:
        what_if = {
            k: v
            for k, v in (("window_pkts", args.what_if_window_pkts), ("payload_per_packet", args.what_if_payload_bytes))
            if v is not None
        }
        s = ref.referee(
            root,
            scale,
            requests=args.requests if scale == "real" or args.requests_same else None,
            repeats=args.repeats,
            hop_delay_ns=args.hop_delay_ns,
            log=log,
            what_if=what_if,
            link_model=args.link_model if scale == "same" else None,
        )
        out[scale] = s
        if not s["what_if"] and not s[ref.gate(s)]["agree"]:  # every scale asked decides the exit code
            code = 3
    if args.json:
        print_json(out)
        return code
    for scale, s in out.items():
        print(f"\n{scale} scale ({'emulated' if scale == 'same' else 'real'} units), mean over repeats:")
        unit, k = ("s", 1.0) if scale == "same" else ("ms", 1e3)
        for label, f in s["fabrics"].items():
            for key in ("kv_p50", "kv_p99"):
                e, n = f[key]["emu_s"]["mean"], f[key]["ns3_s"]["mean"]
                extra = ""
                if scale == "same" and s.get("link_model") == "serialiser":
                    a = f[key + "_link_model"]
                    extra = f"   (less the link-model term: ns-3 {k * a['ns3_s']['mean']:.4g} {unit}, gap {100 * a['gap']:.1f} %)"
                print(
                    f"  {label:<8} {key.replace('kv_', 'KV '):<7} emulation {k * e:10.4g} {unit}   ns-3 {k * n:10.4g} {unit}"
                    f"   gap {100 * f[key]['gap']:5.1f} %{extra}"
                )
            lk = f["links"]
            print(f"  {label:<8} link bytes: {ref.links_text(lk)}")
            if f.get("msg_offset_frames", {}).get("median") is not None:
                print(f"  {label:<8} {ref.offset_text(f['msg_offset_frames'])}")
        if "kv_p99_ratio" in s:
            r = s["kv_p99_ratio"]
            print(f"  {ref.ratio_name(r)}: emulation {r['emu']:.3f}, ns-3 {r['ns3']:.3f} (gap {100 * r['gap']:.1f} %)")
        for label, f in s["fabrics"].items():
            print(
                f"  {label:<8} switch-queue drops: emulation {ref.drops_text(f['drops']['emu'])}, ns-3 {f['drops']['ns3']}"
            )
        for text in (
            ref.excluded_text(s),
            ref.incomplete_text(s),
            *(ref.routing_text(label, r) for label, r in s.get("routing", {}).items()),
        ):
            if text:
                print(f"  {text}")
        keys = [("verdict", f"raw, ns-3 as it ran ({s.get('link_model', 'serialiser')} links)")]
        if ref.gate(s) != "verdict":
            keys.append(("verdict_link_model", "between ns-3 less the link-model term and ns-3 as it ran"))
        for key, what in keys:
            v = s[key]
            gate = " [decides the exit code]" if key == ref.gate(s) else ""
            print(
                f"  verdict, {what}: {'AGREE' if v['agree'] else 'DISAGREE'} "
                f"({', '.join(k for k, ok in v['checks'].items() if not ok) or 'every band met'}){gate}"
            )
    if any(s["what_if"] for s in out.values()):
        print(
            "\nWHAT-IF replay (not the transport's own parameters): "
            + ", ".join(f"{k}={v}" for k, v in next(s["what_if"] for s in out.values()).items())
        )
    if any(s["what_if"] for s in out.values()):
        print(
            f"written: {', '.join(str(root / 'referee' / f'{sc}-whatif.json') for sc in out)} (the report is unchanged)"
        )
    else:
        print(f"\nwritten: {root / 'referee'}/ (report section: {root / 'referee' / ref.SECTION})")
    return code


def register(sub) -> None:
    rf = sub.add_parser(
        "referee",
        parents=[options.JSON],
        formatter_class=options.RAW,
        help="replay a recorded run in ns-3 (same fabric, flow entries, QPs, schedule) and compare",
        description="Replay every fabric's repeats of a recorded run in ns-3 and compare with the emulation.\n"
        "same scale: the emulation's rates, sizes and times, ns-3's links given the emulation's link\n"
        "model (a one-frame token bucket, no serialisation); bands: link bytes 2 %, KV p50/p99 15 %,\n"
        "the two fabrics' KV p99 ratio 20 %, judged raw (no correction). With --link-model serialiser\n"
        "the emulation must fall between ns-3 less the link-model term and ns-3 as it ran.\n"
        "real scale: real rates and sizes (sigma = 1), the emulation converted to real units; judged raw.\n"
        "exit 3 when any scale asked misses a band, when ns-3 leaves a message incomplete, or when a\n"
        "fabric has no valid repeat (INVALID emulation repeats are left out and named).\n"
        "Needs the optional ns-3 referee: bash scripts/provision.sh --referee (zlab doctor says).",
    )
    rf.add_argument("run_dir", nargs="?", help="a run folder written by zlab run")
    rf.add_argument(
        "--scale",
        choices=("same", "real", "both"),
        help="same: emulated units; real: real rates and sizes; both (required unless --oracles)",
    )
    rf.add_argument(
        "--oracles",
        action="store_true",
        help="run the queueing oracles in ns-3 (D/D/1, M/D/1, fair share against their formulas), "
        "and the routing oracle on RUN's fabrics if a run folder is given; exit 3 if one fails",
    )
    rf.add_argument(
        "--baseline",
        action="store_true",
        help="replay RUN with ns-3's own TCP beside zlab's transport (both in ns-3, same fabric, entries, "
        "source ports and schedule): same bytes per link and plausible completion times; exit 3 "
        "if the bytes differ beyond 2 %% or TCP leaves a message incomplete",
    )
    rf.add_argument(
        "--debug-no-pacing",
        action="store_true",
        help="with --oracles: replay them with the NIC pacer removed, a broken transport they must catch",
    )
    rf.add_argument(
        "--requests",
        type=int,
        metavar="N",
        help="real scale: replay only the first N requests (by request id) of each repeat, and "
        "compare the emulation's same requests (ns-3 time grows with 1/size_scale); default all",
    )
    rf.add_argument("--requests-same", action="store_true", help="apply --requests at the same scale too")
    rf.add_argument("--repeats", type=int, metavar="K", help="only the first K repeats of each fabric (default all)")
    rf.add_argument(
        "--link-model",
        choices=("bucket", "serialiser"),
        default=None,
        help="same scale: ns-3's links as the emulation's (bucket: a one-frame token bucket, no "
        "serialisation; the default) or as a real network's (serialiser; then judged with the "
        "link-model term). Real scale always serialises",
    )
    rf.add_argument(
        "--hop-delay-ns",
        type=int,
        default=0,
        help="propagation delay per link in ns-3 (default 0: the emulation's veths have none)",
    )
    rf.add_argument(
        "--what-if-window-pkts",
        type=int,
        metavar="N",
        help="replay with another transport window (packets) to see what a figure depends on; "
        "written to referee/<scale>-whatif.json, never over the real comparison",
    )
    rf.add_argument(
        "--what-if-payload-bytes",
        type=int,
        metavar="B",
        help="replay with another payload per packet (bytes), e.g. the emulation's frame in real bytes",
    )
    rf.set_defaults(func=run, parser=rf)
