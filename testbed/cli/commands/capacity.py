"""`zlab capacity`: the highest per-GPU request rate each fabric serves within TTFT/TPOT SLOs (DistServe's goodput)."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack

from ...errors import UserInputError
from .. import options
from ..output import fmt, print_json, print_table

# Vidur's capacity filter (P90 TTFT <= 2 s, P99 TBT <= 0.2 s), applied with DistServe's 90 % attainment
DEFAULT_SLO_S = {"ttft": 2.0, "tpot": 0.2}


def _slos(items: list[str] | None) -> dict[str, float]:
    from ...serving.metrics import SLO_METRICS

    slo = dict(DEFAULT_SLO_S)
    for item in items or []:
        key, eq, value = item.partition("=")
        if key not in SLO_METRICS:
            raise UserInputError(f"--slo {item!r}: unknown metric {key!r}; metrics: {', '.join(SLO_METRICS)}")
        try:
            slo[key] = float(value) if eq else float("nan")
        except ValueError:
            raise UserInputError(f"--slo {item!r}: {value!r} is not a number of seconds") from None
        if not slo[key] > 0:
            raise UserInputError(f"--slo {item!r}: give METRIC=SECONDS with SECONDS > 0")
    return slo


def _whole(flag: str, value: str, least: int, what: str) -> int:
    """A count flag as given (a string, so that a bad value is one line and exit 2, not argparse's usage)."""
    try:
        n = int(value)
    except ValueError:
        n = least - 1
    if n < least:
        raise UserInputError(f"{flag} {value!r}: give a whole number of {what} >= {least}")
    return n


def _prepare(args):
    """Everything checked before anything runs or is written: spec, SLOs, load range, presets, engines."""
    from ...experiment import spec as especs
    from ...serving import capacity, engines, setup

    spec = especs.load(args.spec, args.set)
    slo = _slos(args.slo)
    if not 0 < args.rate_min < args.rate_max:
        raise UserInputError(
            f"empty load range: need 0 < --rate-min < --rate-max (got {args.rate_min:g}..{args.rate_max:g})"
        )
    if args.iterations < 1 or (args.repeats is not None and args.repeats < 1):
        raise UserInputError("--iterations and --repeats must be >= 1")
    jobs = _whole("--jobs", args.jobs, 1, "worker processes")
    retakes = _whole("--retakes", args.retakes, 0, "retakes")
    scenarios = {}
    for label in spec["fabrics"]:
        try:
            scenarios[label] = setup.scenario(spec, label, args.gpu)
        except (ValueError, UserInputError) as exc:
            raise UserInputError(f"fabrics.{label}: {exc}") from None
    names = tuple(dict.fromkeys(args.network or ["fixed-rate"]))
    if jobs > 1 and any(n in engines.LIVE for n in names):
        raise UserInputError(
            "--jobs: --network emulation shares one live fabric and needs the CPU to itself: run it with --jobs 1"
        )
    if any(n in engines.LIVE for n in names) and os.geteuid() != 0:
        raise UserInputError("--network emulation brings up the emulated fabric: run as root (sudo)")
    for engine in names:
        if engine in engines.LIVE:
            continue
        for sc in scenarios.values():
            try:
                engines.make_engine(engine, sc)
            except LookupError as exc:
                raise UserInputError(f"--network {engine}: {exc}") from None
    w = spec["workload"]
    requests = args.requests or w["requests"]
    if requests < 1 or not args.window_slos > 0:
        raise UserInputError("--requests must be >= 1 and --window-slos > 0")
    for sc in scenarios.values():  # every request must fit a P and a D instance (rows are reused past the end)
        try:
            for r in sc.requests(1.0, len(sc.trace), 0, 0):
                if r.input_tokens + r.output_tokens > sc.deployment.decode_kv_tokens:
                    raise ValueError(
                        f"request {r.id} needs {r.input_tokens + r.output_tokens} KV tokens; a decode "
                        f"instance holds {sc.deployment.decode_kv_tokens}"
                    )
        except ValueError as exc:
            raise UserInputError(f"workload: {exc}") from None
    opts = capacity.Options(
        names,
        args.gpu,
        slo,
        args.rate_min,
        args.rate_max,
        args.iterations,
        args.repeats or spec["repeats"],
        requests,
        w["start_index"],
        spec["seed"],
        args.window_slos,
        jobs,
        retakes,
    )
    return spec, scenarios, opts


def run(args) -> int:
    import json
    from dataclasses import asdict
    from pathlib import Path

    from ...emulation.runfolder import git_sha, new_run_id
    from ...serving import capacity, plots, presets

    spec, scenarios, opts = _prepare(args)

    def progress(line: str) -> None:
        if not args.no_progress:
            print(f"[zlab] capacity {line}", file=sys.stderr, flush=True)

    from ...serving import emulated, engines

    folder = Path(args.results) / new_run_id("capacity")
    with ExitStack() as stack:
        make = engines.make_engine
        if any(n in engines.LIVE for n in opts.engines):
            from ...experiment.runner import AGENT_NICE, _priority

            folder.mkdir(parents=True)
            live = stack.enter_context(emulated.LiveFabrics(spec, str(folder), log=lambda m: progress(m)))
            stack.enter_context(_priority(AGENT_NICE))

            def make(name, sc):
                return live.engine(sc) if name in engines.LIVE else engines.make_engine(name, sc)

        result = capacity.search(scenarios, opts, progress, make)
    some = next(iter(scenarios.values()))
    doc = {
        "schema": "zlab.capacity/1",
        "git": git_sha(),
        "spec": spec,
        "settings": {
            **asdict(opts),
            "goodput": "DistServe: >= 90 % of requests within the TTFT SLO and >= 90 % within the TPOT SLO",
            "rates": "offered requests/s per serving GPU ((P + D) x tp), Poisson arrivals",
            "window": (
                f"each load's arrivals span at least {opts.window_slos:g} TTFT SLOs (requests per point in "
                f"'points'); overloads above {capacity.overload_resolution(opts):.1%} fail, smaller ones may pass"
            ),
            "trace_rows": {label: len(sc.trace) for label, sc in scenarios.items()},
            "gpu": asdict(presets.gpu(opts.gpu)),
            "model": asdict(some.compute.model),
            "efficiency": asdict(some.compute.eff),
            "deployments": {label: asdict(sc.deployment) for label, sc in scenarios.items()},
            "measured": "KV transfer time (the network engine)",
            "modelled": "prefill and decode step times, prefill queueing, decode memory and batch-slot waits",
        },
        **result,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "capacity.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    figures = plots.write(doc, folder)
    if args.json:
        print_json({"folder": str(folder), "summaries": doc["summaries"], "figures": figures})
        return _exit_code(doc, opts)
    rows = []
    for s in doc["summaries"]:
        for label, c in s["capacity_per_gpu_rps"].items():
            t = s["ttft_p99_at_capacity_s"][label]
            bounds = {r["bound"] for r in doc["runs"] if r["engine"] == s["engine"] and r["fabric"] == label}
            rows.append(
                {
                    "engine": s["engine"],
                    "fabric": label,
                    "capacity": c["mean"],
                    "ci95": c["ci95"],
                    "ttft_p99": t["mean"],
                    "bound": ",".join(sorted(bounds)),
                }
            )
    print_table(
        rows,
        [
            ("engine", "engine", None),
            ("fabric", "fabric", None),
            ("capacity", "req/s/GPU", lambda v: fmt(v, "{:.4g}")),
            ("ci95", "±95%", lambda v: fmt(v, "{:.2g}")),
            ("ttft_p99", "TTFT P99 (s)", lambda v: fmt(v, "{:.3g}")),
            ("bound", "search", None),
        ],
    )
    for s in doc["summaries"]:
        if "ratio" in s:
            r = s["ratio"]
            print(f"{s['engine']}: capacity {r['of']} = {fmt(r['mean'], '{:.3f}')} ± {fmt(r['ci95'], '{:.3f}')}")
    print(
        f"window {opts.window_slos:g} TTFT SLOs per load: capacities may exceed the sustainable rate by up to "
        f"{capacity.overload_resolution(opts):.1%}"
    )
    print(f"[zlab] wrote {folder}")
    return _exit_code(doc, opts)


def _exit_code(doc: dict, opts) -> int:
    """0, or 3 (as `zlab run` for an INVALID fabric) when an engine kept void points after the retakes."""
    void = [s for s in doc["summaries"] if not s["valid"]]
    for s in void:
        print(
            f"INVALID {s['engine']}: {s['void_points']} point(s) stayed void after {opts.retakes} retake(s) (the "
            "model fell behind the wall clock, so a verdict may be the host's, not the fabric's): give the run the "
            "CPU to itself, raise --retakes, or lower emulation.rate_scale",
            file=sys.stderr,
        )
    return 3 if void else 0


def register(sub) -> None:
    from ...serving.engines import ENGINES
    from ...serving.presets import GPUS

    p = sub.add_parser(
        "capacity",
        parents=[options.JSON, options.EXPERIMENT],
        help="highest per-GPU request rate meeting TTFT/TPOT SLOs, per fabric, with a closed-loop serving model",
    )
    p.add_argument("spec", nargs="?", help="YAML experiment spec (default: the built-in one)")
    p.add_argument(
        "--network",
        action="append",
        choices=ENGINES,
        help="engine that moves the KV (repeatable; default fixed-rate: bytes / NIC rate, no contention)",
    )
    p.add_argument("--gpu", choices=sorted(GPUS), default="h100", help="GPU preset (default h100)")
    p.add_argument(
        "--slo",
        action="append",
        metavar="METRIC=SECONDS",
        help="ttft=2 or tpot=0.2 (the defaults, Vidur's capacity filter); repeatable",
    )
    p.add_argument("--rate-min", type=float, default=0.02, help="lowest offered requests/s per GPU (default 0.02)")
    p.add_argument("--rate-max", type=float, default=4.0, help="highest offered requests/s per GPU (default 4)")
    p.add_argument("--iterations", type=int, default=7, help="bisection steps after the two ends (default 7)")
    p.add_argument("--repeats", type=int, help="independent seeds per fabric (default: the spec's repeats)")
    p.add_argument(
        "--requests",
        type=int,
        help="fewest requests per simulation (default: the spec's workload.requests); a load gets more when "
        "--window-slos needs them",
    )
    p.add_argument(
        "--window-slos",
        type=float,
        default=20.0,
        help="each load's arrivals span at least this many TTFT SLOs, so that a load above capacity by more "
        "than 1/(0.9 x this) fails (default 20: 5.6 %%); past the trace's end its rows are reused in order",
    )
    p.add_argument(
        "--retakes",
        default="2",
        metavar="N",
        help="--network emulation: simulate a void point (its model fell behind the wall clock) again with the "
        "same seed, up to this many times (default 2); a point still void makes the run INVALID (exit 3)",
    )
    p.add_argument(
        "--jobs",
        default="1",
        metavar="N",
        help="run the (engine, fabric, repeat) bisections in N worker processes (default 1: in this "
        "process); each worker holds its own fabric model and engine, so memory grows with N; the results "
        "are the same as with 1; not with --network emulation",
    )
    p.set_defaults(func=run)
