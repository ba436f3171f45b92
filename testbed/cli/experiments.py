"""What the experiment commands share: the spec resolved with the scaling planner's choice, the
plan printed before a run, the summary printed after it, and runs compared side by side."""

from __future__ import annotations

from pathlib import Path

from .output import fmt, print_json, print_table


def resolved(args_spec, overrides, preset: str = "as-given", budget_s: float = 600.0):
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
        capped = planner.capped_default_rate(exp, user_set_rate(args_spec, overrides))
        if capped is not None:
            exp = resolve(especs.load(args_spec, (overrides or []) + [f"emulation.rate_scale={capped:.6g}"]))
        exp.scaling_choice = planner.assess(exp, preset).to_dict()
        if capped is not None:
            exp.scaling_choice["notes"].insert(
                0,
                f"the default rate_scale {especs.DEFAULT['emulation']['rate_scale']:g} "
                f"exceeds what this machine's measured capacity allows: lowered to "
                f"{capped:.3g} (give emulation.rate_scale to choose it yourself)",
            )
    return exp


def user_set_rate(args_spec, overrides) -> bool:
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


def size_check(fabric, costs=None, mem_available_bytes: int | None = None):
    """Will this fabric fit this machine: the prediction from the measured bring-ups
    (testbed/emulation/size_costs.json), against MemAvailable now."""
    from ..emulation import sizing
    from ..experiment.planner import HEADROOM

    costs = sizing.load() if costs is None else costs
    avail = sizing.mem_available() if mem_available_bytes is None else mem_available_bytes
    return sizing.predict(fabric, costs, avail, HEADROOM)


def size_table(specs, costs=None, mem_available_bytes: int | None = None) -> list[str]:
    """One line per fabric spec: verdict, predicted ready time and peak memory, and why."""
    from ..emulation import sizing
    from ..fabric import build_fabric

    costs = sizing.load() if costs is None else costs
    avail = sizing.mem_available() if mem_available_bytes is None else mem_available_bytes
    out = [
        f"fabric sizes on this machine ({avail / 2**30:.1f} GiB available now), predicted from "
        f"{len((costs or {}).get('points', []))} measured bring-ups ({sizing.COSTS.name}):",
        f"  {'fabric':<52} {'GPUs':>5} {'links':>6} {'ready s':>8} {'peak GiB':>8} {'ovs idle':>8}  verdict",
    ]
    for spec in specs:
        pr = size_check(build_fabric(spec), costs, avail)
        v = pr.values
        nums = (
            f"{v['ready_s']:>8.0f} {v['peak_memory_bytes'] / 2**30:>8.1f} {v['ovs_idle_cores']:>8.2f}"
            if v
            else f"{'—':>8} {'—':>8} {'—':>8}"
        )
        why = f" ({'; '.join(pr.reasons)})" if pr.reasons else ""
        out.append(f"  {spec:<52} {pr.gpus:>5} {pr.links:>6} {nums}  {pr.verdict}{why}")
    return out


def print_plan(exp) -> None:
    """The resolved plan per fabric: what `zlab run` would do, and what it will cost."""
    w, d = exp.spec["workload"], exp.spec["deployment"]
    print(
        f"experiment {exp.spec['name']!r}: trace {w['trace']} (requests {w['start_index']}..."
        f"{w['start_index'] + w['requests'] - 1}), model {w['model']}, {d['prefill_instances']} P + "
        f"{d['decode_instances']} D instances of TP {d['tp']}, mapping {d['mapping']}, seed {exp.spec['seed']}"
    )
    for label, fr in exp.fabrics.items():
        f = fr.figures
        print(f"\n{label}: {fr.fabric.spec}")
        print(
            f"  link rates (emulated)      {', '.join(f'{r:g}' for r in f['link_rates_mbps'])} Mb/s; MTU "
            f"{fr.emulation.mtu_bytes} B; egress queue {fr.emulation.queue_limit_pkts} packets"
        )
        print(
            f"  scaling                    rate_scale {f['rate_scale']:g}, size_scale {f['size_scale']:g}, "
            f"dilation {f['dilation']:g} (emulated s per real s), load factor {f['load_factor']:.1f}"
        )
        print(
            f"  messages                   {f['messages']:,} ({f['transfers']:,} KV shards of {f['requests']:,} "
            f"requests{'' if fr.split is None else f', split {fr.split}'}); median {f['frames_per_message_p50']:g} "
            f"frames each"
        )
        print(
            f"  bytes                      {f['emulated_bytes'] / 1e6:,.1f} MB emulated = {f['real_bytes'] / 1e9:,.1f} "
            f"GB real"
        )
        print(
            f"  expected duration          {f['expected_emulated_duration_s']:.1f} s emulated "
            f"({f['expected_real_duration_s']:.2f} s real) without congestion"
        )
        print(
            f"  expected peak packet rate  {f['peak_nic_frames_per_s']:,.0f} frames/s from NICs, "
            f"{f['peak_switch_forwards_per_s']:,.0f} switch forwards/s"
        )
        if exp.spec.get("engine", "emulation") == "emulation":
            from ..emulation import sizing

            for line in sizing.describe(size_check(fr.fabric)):
                print(f"  {line}")
        if fr.failplan:
            fp = fr.failplan
            print(
                f"  failures                   recovery {fp['recovery']} (model policy {fp['policy']}); "
                f"{len(fp['states'])} failure state(s) with precomputed tables"
            )
            for st in fp["steps"]:
                extra = f", {st['loss_percent']:g} % loss" if st["loss_percent"] else ""
                print(
                    f"    at {st['t_emulated_s']:6.2f} s emulated  {st['action']:5s} {st['target']}{extra} "
                    f"-> interfaces {', '.join(st['ifaces'])}"
                )
            ffd = fp.get("fast_failover")
            if ffd:
                cov = list(ffd["coverage"].values())
                print(
                    f"    fast-failover coverage   {100 * min(cov):.0f}-{100 * max(cov):.0f} % of the degraded-deliverable "
                    f"pairs per cable before the controller reacts; {len(ffd['rejected'])} cable(s) unprotected"
                )
    ref = exp.spec["referee"]
    if ref["scales"]:
        n = "all" if ref["real_requests"] is None else f"the first {ref['real_requests']}"
        print(
            f"\nreferee: after the run, ns-3 replays every repeat at scale(s) {', '.join(ref['scales'])}"
            + (f" ({n} requests at real scale)" if "real" in ref["scales"] else "")
        )
    if exp.scaling_choice:
        from ..experiment.planner import Choice, describe

        print()
        for line in describe(Choice(**exp.scaling_choice)):
            print(line)


def _ci_ms(c: dict, scale: float = 1e3, f: str = "{:.2f}") -> str:
    if c["mean"] is None:
        return "—"
    return f.format(scale * c["mean"]) + ("" if c["ci95"] is None else " ± " + f.format(scale * c["ci95"]))


def print_summary(root, metrics) -> None:
    """Means ± 95 % CI over repeats, and the verdict, per fabric."""
    rows = []
    for lab, f in metrics.get("fabrics", {}).items():
        s = f["summary"]
        rows.append(
            {
                "fabric": lab,
                "n": str(s["repeats"]),
                "kv50": _ci_ms(s["kv_p50_real_s"]),
                "kv99": _ci_ms(s["kv_p99_real_s"]),
                "q": _ci_ms(s["queue_delay_max_real_s"], 1e6, "{:.0f}"),
                "util": _ci_ms(s["max_offered_util"], 1, "{:.2f}"),
                "verdict": "valid" if s["fidelity"]["valid"] else "INVALID: " + "; ".join(s["fidelity"]["reasons"][:3]),
            }
        )
    print_table(
        rows,
        [
            ("fabric", "fabric", None),
            ("n", "repeats", None),
            ("kv50", "KV p50 ms", None),
            ("kv99", "KV p99 ms", None),
            ("q", "max queueing µs", None),
            ("util", "max offered util", None),
            ("verdict", "fidelity", None),
        ],
    )
    for lab, f in metrics.get("fabrics", {}).items():
        print_draws(lab, f["summary"].get("draws"))
    c = metrics.get("comparison")
    if c:
        k = c["kv_p99_real_s"]
        print(
            f"[zlab] {c['a']}/{c['b']} KV p99 ratio {_ci_ms(k['ratio'], 1)}; {c['a']} better in {k['a_better']} of {k['n']}"
        )
    print(f"[zlab] report: {root}/report.md  (real-cluster ms and µs, mean ± 95 % CI over repeats)")


def print_draws(label: str, d: dict | None) -> None:
    """A fabric whose draws fall into two modes: the mean ± CI above mixes them, so say how often
    each occurs and what each gives (the report's "What a draw does" has the intervals)."""
    if not d or not d.get("bimodal"):
        return
    lo, hi = d["interval"]
    modes = ", ".join(
        f"{mode} {len(v['repeats'])} draw(s) KV p50 median {1e3 * v['kv_p50_real_s']['median']:.2f} ms"
        for mode, v in d["modes"].items()
        if v["kv_p50_real_s"]["median"] is not None
    )
    print(
        f"[zlab] {label}: bimodal draws, {d['collisions']} of {d['draws']} with an ECMP collision "
        f"({100 * d['share']:.0f} %, 95 % interval {100 * lo:.0f}–{100 * hi:.0f} %): {modes}; "
        'its mean ± CI mixes the two modes (report: "What a draw does")'
    )


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
            rows.append(
                {
                    "run": r.name,
                    "fabric": lab,
                    "mapping": spec["deployment"]["mapping"],
                    "offered_load": spec["workload"].get("offered_load"),
                    "repeats": s["repeats"],
                    "kv_p50_real_ms": ms(s["kv_p50_real_s"]),
                    "kv_p99_real_ms": ms(s["kv_p99_real_s"]),
                    "ttft_p99_real_ms": ms(s["ttft_p99_real_s"]),
                    "queue_delay_max_real_us": None
                    if s["queue_delay_max_real_s"]["mean"] is None
                    else 1e6 * s["queue_delay_max_real_s"]["mean"],
                    "max_offered_util": s["max_offered_util"]["mean"],
                    "valid": s["fidelity"]["valid"],
                }
            )
    if as_json:
        print_json(rows)
        return 0
    print_table(
        rows,
        [
            ("run", "run", None),
            ("fabric", "fabric", None),
            ("mapping", "mapping", None),
            ("kv_p50_real_ms", "KV p50 ms", None),
            ("kv_p99_real_ms", "KV p99 ms", None),
            ("ttft_p99_real_ms", "TTFT p99 ms", None),
            ("queue_delay_max_real_us", "max queueing µs", lambda v: fmt(v, "{:.0f}")),
            ("max_offered_util", "max util", None),
            ("valid", "valid", None),
        ],
    )
    return 0
