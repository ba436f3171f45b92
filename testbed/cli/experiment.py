"""Experiment commands: run, sweep, compare, report."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserInputError
from .output import fmt, print_json, print_table


def _resolved(args_spec, overrides, preset: str = "as-given", budget_s: float = 600.0):
    """The experiment resolved once, with the planner's choice applied (queue-faithful) or
    assessed (as-given)."""
    from ..experiment import planner
    from ..experiment import spec as especs
    from ..experiment.resolve import resolve

    exp = resolve(especs.load(args_spec, overrides))
    if preset == "queue-faithful":
        choice = planner.queue_faithful(exp, budget_s, args_spec, overrides)
        exp = resolve(especs.load(args_spec, (overrides or []) + planner.overrides(choice)))
        exp.scaling_choice = planner.assess(exp, preset).to_dict()
    else:
        capped = planner.capped_default_rate(exp, _user_set_rate(args_spec, overrides))
        if capped is not None:
            exp = resolve(especs.load(args_spec, (overrides or []) + [f"emulation.rate_scale={capped:.6g}"]))
        exp.scaling_choice = planner.assess(exp, preset).to_dict()
        if capped is not None:
            exp.scaling_choice["notes"].insert(0, f"the default rate_scale {especs.DEFAULT['emulation']['rate_scale']:g} "
                                                  f"exceeds what this machine's measured capacity allows: lowered to "
                                                  f"{capped:.3g} (give emulation.rate_scale to choose it yourself)")
    return exp


def _user_set_rate(args_spec, overrides) -> bool:
    """Did the user choose rate_scale (in the spec file or a --set)? Then it is theirs, not a default."""
    import yaml

    if any(o.startswith("emulation.rate_scale=") for o in overrides or []):
        return True
    if args_spec:
        try:
            user = yaml.safe_load(open(args_spec, encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            return False  # load() above already accepted it; be conservative
        return isinstance(user, dict) and "rate_scale" in (user.get("emulation") or {})
    return False


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
        if fr.failplan:
            fp = fr.failplan
            print(f"  failures                   recovery {fp['recovery']} (model policy {fp['policy']}); "
                  f"{len(fp['states'])} failure state(s) with precomputed tables")
            for st in fp["steps"]:
                extra = f", {st['loss_percent']:g} % loss" if st["loss_percent"] else ""
                print(f"    at {st['t_emulated_s']:6.2f} s emulated  {st['action']:5s} {st['target']}{extra} "
                      f"-> interfaces {', '.join(st['ifaces'])}")
            ffd = fp.get("fast_failover")
            if ffd:
                cov = list(ffd["coverage"].values())
                print(f"    fast-failover coverage   {100 * min(cov):.0f}-{100 * max(cov):.0f} % of the degraded-deliverable "
                      f"pairs per cable before the controller reacts; {len(ffd['rejected'])} cable(s) unprotected")
    ref = exp.spec["referee"]
    if ref["scales"]:
        n = "all" if ref["real_requests"] is None else f"the first {ref['real_requests']}"
        print(f"\nreferee: after the run, ns-3 replays every repeat at scale(s) {', '.join(ref['scales'])}"
              + (f" ({n} requests at real scale)" if "real" in ref["scales"] else ""))
    if exp.scaling_choice:
        from ..experiment.planner import Choice, describe

        print()
        for line in describe(Choice(**exp.scaling_choice)):
            print(line)


def _ci_ms(c: dict, scale: float = 1e3, f: str = "{:.2f}") -> str:
    if c["mean"] is None:
        return "—"
    return f.format(scale * c["mean"]) + ("" if c["ci95"] is None else " ± " + f.format(scale * c["ci95"]))


def _summary(root, metrics) -> None:
    """Means ± 95 % CI over repeats, and the verdict, per fabric."""
    rows = []
    for lab, f in metrics.get("fabrics", {}).items():
        s = f["summary"]
        rows.append({"fabric": lab, "n": str(s["repeats"]), "kv50": _ci_ms(s["kv_p50_real_s"]),
                     "kv99": _ci_ms(s["kv_p99_real_s"]), "q": _ci_ms(s["queue_delay_max_real_s"], 1e6, "{:.0f}"),
                     "util": _ci_ms(s["max_offered_util"], 1, "{:.2f}"),
                     "verdict": "valid" if s["fidelity"]["valid"] else "INVALID: " + "; ".join(s["fidelity"]["reasons"][:3])})
    print_table(rows, [("fabric", "fabric", None), ("n", "repeats", None), ("kv50", "KV p50 ms", None),
                       ("kv99", "KV p99 ms", None), ("q", "max queueing µs", None), ("util", "max offered util", None),
                       ("verdict", "fidelity", None)])
    c = metrics.get("comparison")
    if c:
        k = c["kv_p99_real_s"]
        print(f"[zlab] {c['a']}/{c['b']} KV p99 ratio {_ci_ms(k['ratio'], 1)}; {c['a']} better in {k['a_better']} of {k['n']}")
    print(f"[zlab] report: {root}/report.md  (real-cluster ms and µs, mean ± 95 % CI over repeats)")


def _retry_spec(run_dir: str):
    """The spec of an earlier run, narrowed to its invalid fabrics, with the advice applied."""
    from ..experiment import advice, spec as especs
    from ..measure.report import RunFolderError
    from ..records import read_json, write_json

    root = Path(run_dir)
    if not (root / "experiment.json").exists() or not (root / "metrics.json").exists():
        raise RunFolderError(f"{root}: no experiment.json/metrics.json; --retry-invalid takes a finished run folder")
    exp, metrics = read_json(root / "experiment.json"), read_json(root / "metrics.json")
    a = advice.advise(exp, metrics)
    if not a.fabrics:
        raise UserInputError(f"{root}: every fabric's run is valid; nothing to retry")
    if not a.retry_possible:
        raise UserInputError(f"{root}: the invalid runs are not fixable by scaling: {'; '.join(a.unfixable[:3])}")
    spec = dict(exp["spec"], fabrics={lab: exp["spec"]["fabrics"][lab] for lab in a.fabrics})
    for o in a.overrides:
        spec = especs.apply_override(spec, o)
    path = root / "retry-spec.json"
    write_json(path, spec, sort_keys=False)
    for w in a.why:
        print(f"[zlab] retry: {w}")
    return especs.validate(spec)


def cmd_run(args) -> int:
    from ..experiment import advice
    from ..experiment.runner import run_experiment
    from ..records import read_json

    if args.retry_invalid:
        if args.spec or args.set:
            raise UserInputError("--retry-invalid takes the earlier run's spec; give no SPEC or --set with it")
        from ..experiment import planner
        from ..experiment.resolve import resolve

        exp = resolve(_retry_spec(args.retry_invalid))
        exp.scaling_choice = planner.assess(exp, "retry").to_dict()
    else:
        exp = _resolved(args.spec, args.set, args.preset, args.budget_s)  # every part checked before bring-up
    if args.precision is not None:
        from ..experiment import planner

        if args.retry_invalid:
            raise UserInputError("--precision sets the number of repeats; --retry-invalid keeps the earlier run's")
        n, lines = planner.draws_for_precision(exp, args.precision)
        for line in lines:
            print(f"[zlab] precision: {line}")
        print(f"[zlab] precision: repeats={n}")
        if n != exp.spec["repeats"]:
            exp = _resolved(args.spec, (args.set or []) + [f"repeats={n}"], args.preset, args.budget_s)
    if args.dry_run:
        print_plan(exp)
        return 0
    root, status = run_experiment(exp, results_dir=args.results, show_progress=not args.no_progress)
    metrics = read_json(root / "metrics.json") if (root / "metrics.json").exists() else {}
    print(f"[zlab] run {status}: {root}")
    _summary(root, metrics)
    if status != "complete":
        return 130
    if all(f["summary"]["fidelity"]["valid"] for f in metrics.get("fabrics", {}).values()):
        return 0
    for line in advice.lines(advice.advise(read_json(root / "experiment.json"), metrics), str(root)):
        print(line)
    return 3


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
        for lab, f in metrics["fabrics"].items():
            s = f["summary"]
            ms = lambda c: None if c["mean"] is None else 1e3 * c["mean"]  # noqa: E731
            rows.append({"run": r.name, "fabric": lab, "mapping": spec["deployment"]["mapping"],
                         "offered_load": spec["workload"].get("offered_load"), "repeats": s["repeats"],
                         "kv_p50_real_ms": ms(s["kv_p50_real_s"]), "kv_p99_real_ms": ms(s["kv_p99_real_s"]),
                         "ttft_p99_real_ms": ms(s["ttft_p99_real_s"]),
                         "queue_delay_max_real_us": None if s["queue_delay_max_real_s"]["mean"] is None
                         else 1e6 * s["queue_delay_max_real_s"]["mean"],
                         "max_offered_util": s["max_offered_util"]["mean"], "valid": s["fidelity"]["valid"]})
    if as_json:
        print_json(rows)
        return 0
    print_table(rows, [("run", "run", None), ("fabric", "fabric", None), ("mapping", "mapping", None),
                       ("kv_p50_real_ms", "KV p50 ms", None), ("kv_p99_real_ms", "KV p99 ms", None),
                       ("ttft_p99_real_ms", "TTFT p99 ms", None),
                       ("queue_delay_max_real_us", "max queueing µs", lambda v: fmt(v, "{:.0f}")),
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
                         "expected duration and peak packet rate) and the scaling planner's trade-off; bring nothing up")
    ru.add_argument("--preset", choices=("as-given", "queue-faithful"), default="as-given",
                    help="as-given: the spec's scales (the default spec is the fast preset); queue-faithful: the "
                         "planner picks rate and size scales so the XOFF is >= 4 frames and the peak stays within "
                         "70 %% of the measured capacity, and cuts requests to the budget")
    ru.add_argument("--retry-invalid", metavar="RUN",
                    help="rerun only the INVALID fabrics of an earlier run, with the change its verdict suggested "
                         "(printed after an invalid run)")
    ru.add_argument("--budget-s", type=float, default=600.0,
                    help="wall-time budget for --preset queue-faithful, seconds (default 600)")
    ru.add_argument("--precision", type=float, metavar="P",
                    help="choose the number of repeats (ECMP draws) so the 95 %% interval on the share of draws "
                         "with an ECMP collision is within ±P (e.g. 0.1), at the routing model's probability")
    experiment_args(ru)
    ru.set_defaults(func=cmd_run)
    sw = sub.add_parser("sweep", help="run a spec once per value of one field, then compare")
    sw.add_argument("spec", nargs="?", help="YAML experiment spec (default: the built-in one)")
    sw.add_argument("--param", required=True, metavar="KEY=v1,v2",
                    help="e.g. emulation.rate_scale=5e-5,1e-4 (NIC 100G vs 200G)")
    sw.add_argument("--json", action="store_true")
    experiment_args(sw)
    sw.set_defaults(func=cmd_sweep)
    cm = sub.add_parser("compare", help="key metrics of several runs side by side (means over repeats; real ms, µs)")
    cm.add_argument("runs", nargs="+", help="run folders")
    cm.add_argument("--json", action="store_true")
    cm.set_defaults(func=cmd_compare)
    rp = sub.add_parser("report", help="rebuild tables, plots and report.md of a run from its raw records")
    rp.add_argument("run_dir")
    rp.set_defaults(func=cmd_report)
