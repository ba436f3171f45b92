"""Experiment commands: run, sweep, compare, report."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserInputError
from .output import fmt, print_json, print_table


def _resolved(args_spec, overrides):
    from ..experiment import spec as especs
    from ..experiment.resolve import resolve

    return resolve(especs.load(args_spec, overrides))


def print_plan(exp) -> None:
    """The resolved plan per fabric: what `zlab run` would do, and what it will cost."""
    w, d = exp.spec["workload"], exp.spec["deployment"]
    print(f"experiment {exp.spec['name']!r}: trace {w['trace']} (requests {w['start_index']}..."
          f"{w['start_index'] + w['requests'] - 1}), model {w['model']}, {d['prefill_instances']} P + "
          f"{d['decode_instances']} D instances of TP {d['tp']}, mapping {d['mapping']}, seed {exp.spec['seed']}")
    for label, fr in exp.fabrics.items():
        f = fr.figures
        print(f"\n{label}: {fr.fabric.spec}")
        print(f"  link rates (emulated)      {', '.join(f'{r:g}' for r in f['link_rates_mbps'])} Mb/s; MTU "
              f"{fr.emulation.mtu_bytes} B; egress queue {fr.emulation.queue_limit_pkts} packets")
        print(f"  scaling                    rate_scale {f['rate_scale']:g}, size_scale {f['size_scale']:g}, "
              f"dilation {f['dilation']:g} (emulated s per real s), load factor {f['load_factor']:.1f}")
        print(f"  messages                   {f['messages']:,} ({f['transfers']:,} KV shards of {f['requests']:,} "
              f"requests{'' if fr.split is None else f', split {fr.split}'}); median {f['frames_per_message_p50']:g} "
              f"frames each")
        print(f"  bytes                      {f['emulated_bytes'] / 1e6:,.1f} MB emulated = {f['real_bytes'] / 1e9:,.1f} "
              f"GB real")
        print(f"  expected duration          {f['expected_emulated_duration_s']:.1f} s emulated "
              f"({f['expected_real_duration_s']:.2f} s real) without congestion")
        print(f"  expected peak packet rate  {f['peak_nic_frames_per_s']:,.0f} frames/s from NICs, "
              f"{f['peak_switch_forwards_per_s']:,.0f} switch forwards/s")


def _summary(root, metrics) -> None:
    rows = []
    for lab, m in metrics.items():
        kv, tt, f = m["kv_transfer_real_s"], m["ttft_real_s"], m["fidelity"]
        rows.append({"fabric": lab, "kv50": kv["p50"], "kv99": kv["p99"], "tt50": tt["p50"], "tt99": tt["p99"],
                     "queue": (m["queue_max_bytes"] or 0) / 1024, "util": m["max_offered_link_util"],
                     "verdict": "valid" if f["valid"] else "INVALID: " + "; ".join(f["reasons"])})
    ms = lambda v: fmt(None if v is None else 1e3 * v)  # noqa: E731
    print_table(rows, [("fabric", "fabric", None), ("kv50", "KV p50 ms", ms), ("kv99", "KV p99 ms", ms),
                       ("tt50", "TTFT p50 ms", ms), ("tt99", "TTFT p99 ms", ms),
                       ("queue", "max queue KiB (emul.)", lambda v: fmt(v, "{:.1f}")),
                       ("util", "max offered util", None), ("verdict", "fidelity", None)])
    print(f"[zlab] report: {root}/report.md  (times in real-cluster ms)")


def cmd_run(args) -> int:
    from ..experiment.runner import run_experiment
    from ..records import read_json

    exp = _resolved(args.spec, args.set)  # every part checked before anything is brought up
    if args.dry_run:
        print_plan(exp)
        return 0
    root, status = run_experiment(exp, results_dir=args.results, show_progress=not args.no_progress)
    metrics = read_json(root / "metrics.json") if (root / "metrics.json").exists() else {}
    print(f"[zlab] run {status}: {root}")
    _summary(root, metrics)
    if status != "complete":
        return 130
    return 0 if all(m["fidelity"]["valid"] for m in metrics.values()) else 3


def cmd_sweep(args) -> int:
    from ..experiment.runner import run_experiment

    key, eq, values = args.param.partition("=")
    if not eq or not values:
        raise UserInputError(f"--param takes KEY=v1,v2,... (got {args.param!r})")
    exps = [(v, _resolved(args.spec, (args.set or []) + [f"{key}={v}"])) for v in values.split(",")]
    roots = []
    for v, exp in exps:  # every value resolved before the first run
        print(f"[zlab] sweep {key}={v}")
        root, status = run_experiment(exp, results_dir=args.results, show_progress=not args.no_progress)
        roots.append(root)
        if status != "complete":
            print("[zlab] sweep interrupted")
            break
    return compare_roots(roots, args.json)


def compare_roots(roots, as_json=False) -> int:
    from ..measure.report import RunFolderError
    from ..records import read_json

    rows = []
    for r in map(Path, roots):
        if not (r / "metrics.json").exists() or not (r / "experiment.json").exists():
            raise RunFolderError(f"{r}: no metrics.json/experiment.json; is it a finished zlab run folder?")
        metrics, spec = read_json(r / "metrics.json"), read_json(r / "experiment.json")["spec"]
        for lab, m in metrics.items():
            ms = lambda v: None if v is None else 1e3 * v  # noqa: E731
            rows.append({"run": r.name, "fabric": lab, "mapping": spec["deployment"]["mapping"],
                         "offered_load": spec["workload"].get("offered_load"),
                         "kv_p50_real_ms": ms(m["kv_transfer_real_s"]["p50"]),
                         "kv_p99_real_ms": ms(m["kv_transfer_real_s"]["p99"]),
                         "ttft_p99_real_ms": ms(m["ttft_real_s"]["p99"]),
                         "queue_max_emulated_kib": (m["queue_max_bytes"] or 0) / 1024,
                         "max_offered_util": m["max_offered_link_util"], "valid": m["fidelity"]["valid"]})
    if as_json:
        print_json(rows)
        return 0
    print_table(rows, [("run", "run", None), ("fabric", "fabric", None), ("mapping", "mapping", None),
                       ("kv_p50_real_ms", "KV p50 ms", None), ("kv_p99_real_ms", "KV p99 ms", None),
                       ("ttft_p99_real_ms", "TTFT p99 ms", None),
                       ("queue_max_emulated_kib", "max queue KiB (emul.)", lambda v: fmt(v, "{:.1f}")),
                       ("max_offered_util", "max util", None), ("valid", "valid", None)])
    return 0


def cmd_compare(args) -> int:
    return compare_roots(args.runs, args.json)


def cmd_report(args) -> int:
    from ..measure import report

    metrics = report.build(Path(args.run_dir))
    _summary(args.run_dir, metrics)
    return 0


def add_commands(sub) -> None:
    def experiment_args(x):
        x.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a spec field, e.g. deployment.mapping=rank-shifted (repeatable)")
        x.add_argument("--results", default="results", help="where run folders go (default ./results)")
        x.add_argument("--no-progress", action="store_true", help="no progress bar")

    ru = sub.add_parser("run", help="run an experiment spec (default: ZCube(4,2) vs 16-GPU two-segment ROFT, "
                                    "Azure code trace); writes results/<run>/report.md")
    ru.add_argument("spec", nargs="?", help="YAML experiment spec merged over the built-in default")
    ru.add_argument("--dry-run", action="store_true",
                    help="resolve everything and print the plan per fabric (rates, scaling, messages, bytes, "
                         "expected duration and peak packet rate); bring nothing up")
    experiment_args(ru)
    ru.set_defaults(func=cmd_run)
    sw = sub.add_parser("sweep", help="run a spec once per value of one field, then compare")
    sw.add_argument("spec", nargs="?", help="YAML experiment spec (default: the built-in one)")
    sw.add_argument("--param", required=True, metavar="KEY=v1,v2",
                    help="e.g. emulation.rate_scale=5e-5,1e-4 (NIC 100G vs 200G)")
    sw.add_argument("--json", action="store_true")
    experiment_args(sw)
    sw.set_defaults(func=cmd_sweep)
    cm = sub.add_parser("compare", help="key metrics of several runs side by side (times in real ms)")
    cm.add_argument("runs", nargs="+", help="run folders")
    cm.add_argument("--json", action="store_true")
    cm.set_defaults(func=cmd_compare)
    rp = sub.add_parser("report", help="rebuild tables, plots and report.md of a run from its raw records")
    rp.add_argument("run_dir")
    rp.set_defaults(func=cmd_report)
