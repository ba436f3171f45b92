"""The run's report.md: the side-by-side comparison as mean +- 95 % CI over repeats with ZCube/ROFT
ratios, TTFT decomposed into modelled and measured parts, every fidelity check, the setup with
its scale factors and what one frame stands for, and which published numbers are comparable."""

from __future__ import annotations

from . import congestion, emcongestion

# spec §5, production figures, and whether this run measures anything comparable
PUBLISHED = [
    (
        "GPU inference throughput",
        "> +15 %",
        "ZCube vs ROFT, ~1,000-GPU GLM-5.1 coding cluster",
        "no: throughput here is the open-loop arrival rate (no serving-capacity model)",
    ),
    (
        "TTFT P99",
        "-40.6 %",
        "same",
        "not directly: TTFT here is mostly modelled (see the decomposition); "
        "compare the measured KV-transfer p99 instead",
    ),
    ("switch + optics capex", "-33 %", "same", "not from a run: `zlab cost` reproduces it from the models"),
    (
        "NIC cap 100G -> 200G",
        "throughput +19 %, TTFT -22 %",
        "32-GPU inference service",
        "no: needs a serving-capacity model (a rate_scale sweep changes only the network)",
    ),
    (
        "queue depths, PFC counts, link loads, KV completion times",
        "not published",
        "what this testbed measures",
        "measured here (emulated, in real-equivalent units)",
    ),
]
ROWS = [  # (headline key, label, scale, format)
    ("kv_p50_real_s", "KV-transfer completion p50 (real ms)", 1e3, "{:.2f}"),
    ("kv_p99_real_s", "KV-transfer completion p99 (real ms)", 1e3, "{:.2f}"),
    ("queue_delay_max_real_s", "max queueing delay, any port (real-equivalent µs)", 1e6, "{:.0f}"),
    ("queue_delay_p99_real_s", "p99 queueing delay, loaded ports (real-equivalent µs)", 1e6, "{:.0f}"),
    ("max_offered_util", "max offered link utilisation, loaded ports", 1, "{:.2f}"),
    ("max_carried_util", "max carried link utilisation, loaded ports", 1, "{:.3f}"),
    ("backlog_episodes", "backlog episodes above XOFF (PFC stand-in)", 1, "{:.1f}"),
    ("retransmits", "retransmitted packets", 1, "{:.1f}"),
    ("ttft_p50_real_s", "TTFT p50 (real ms; mostly modelled)", 1e3, "{:.1f}"),
    ("ttft_p99_real_s", "TTFT p99 (real ms; mostly modelled)", 1e3, "{:.1f}"),
]
COMPONENTS = [
    ("prefill_wait", "prefill queue wait", "modelled (FIFO over planned prefill times)"),
    ("prefill", "prefill compute", "modelled (overhead + tokens / rate)"),
    ("kv_transfer", "KV transfer", "measured (emulated fabric)"),
    ("first_decode_step", "first decode step", "modelled (constant)"),
]


def ci_text(c: dict, scale: float, fmt: str = "{:.2f}") -> str:
    """A {mean, ci95} summary as "mean ± half-width" in `scale` units ("—" when there is no mean)."""
    if c["mean"] is None:
        return "—"
    s = fmt.format(c["mean"] * scale)
    return s + (f" ± {fmt.format(c['ci95'] * scale)}" if c["ci95"] is not None else "")


def headline_value(r: dict, key: str):
    from .metrics import headline

    return headline(r)[key]


def _median_text(values, scale: float, fmt: str) -> str:
    """median [lo, hi] (coverage): an order-statistic interval, for draws that are not normal."""
    from .draws import median_interval

    c = median_interval(values)
    if c["median"] is None:
        return "—"
    f = lambda x: fmt.format(x * scale)  # noqa: E731
    return f"median {f(c['median'])} [{f(c['lo'])}, {f(c['hi'])}] ({100 * c['coverage']:.1f} %)"


def draw_section(fabs: dict, labels: list[str]) -> list[str]:
    """What one draw (repeat) does: the share of draws with an ECMP collision with its exact interval,
    the routing model's probability of one, and each mode's KV medians with order-statistic intervals."""
    rows = [(lab, fabs[lab]["summary"].get("draws")) for lab in labels]
    rows = [(lab, d) for lab, d in rows if d]
    if not rows:
        return []
    L = [
        "",
        "## What a draw does (ECMP)",
        "",
        "A draw is one repeat: new QP source ports, so new ECMP choices. A draw collides when two queue pairs "
        "from different NICs that are on the wire at the same time share a switch-to-switch link (the routing "
        "model's answer for the recorded source ports). Share: exact Clopper-Pearson interval; model: the same "
        "test over simulated draws of the source ports; each mode: median over its draws [order-statistic "
        "interval] (its coverage; below 95 % when there are too few draws for 95 %).",
        "",
        "| fabric | draws colliding | share (95 % interval) | model's probability | mode | draws | KV p50 (real ms) "
        "| KV p99 (real ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def ms(c):
        if c["median"] is None:
            return "—"
        if c["n"] == 1:
            return f"{1e3 * c['median']:.2f} (one draw)"
        return f"{1e3 * c['median']:.2f} [{1e3 * c['lo']:.2f}, {1e3 * c['hi']:.2f}] ({100 * c['coverage']:.1f} %)"

    for lab, d in rows:
        lo, hi = d["interval"]
        model = "—" if d["model_probability"] is None else f"{100 * d['model_probability']:.1f} %"
        head = [
            lab,
            f"{d['collisions']} of {d['draws']}",
            f"{100 * d['share']:.0f} % ({100 * lo:.0f}–{100 * hi:.0f} %)",
            model,
        ]
        for i, (mode, v) in enumerate(d["modes"].items()):
            cells = head if i == 0 else ["", "", "", ""]
            count = str(len(v["repeats"])) + (
                f" ({len(v['invalid'])} INVALID: repeat {', '.join(map(str, v['invalid']))})"
                if v.get("invalid")
                else ""
            )
            L.append("| " + " | ".join(cells + [mode, count, ms(v["kv_p50_real_s"]), ms(v["kv_p99_real_s"])]) + " |")
    return L


def _ratio(c: dict) -> str:
    r = c["ratio"]
    if r["mean"] is None:
        return "—"
    return f"{r['mean']:.2f}" + (f" ± {r['ci95']:.2f}" if r["ci95"] is not None else "")


def _mean(values) -> float | None:
    v = [x for x in values if x is not None]
    return sum(v) / len(v) if v else None


def markdown(run: dict, exp: dict, metrics: dict, plots: list[str] | None) -> str:
    """The whole report: its sections in reading order, one blank line between them."""
    fabs = metrics["fabrics"]
    sections = [
        status(run, fabs),
        headline(metrics),
        draws(fabs),
        ttft_decomposed(fabs),
        every_repeat(fabs),
        congestion.markdown(metrics["congestion"], list(fabs)) if "congestion" in metrics else [],
        emcongestion.markdown(metrics["emulation_congestion"], list(fabs), run.get("transport", TRANSPORT))
        if "emulation_congestion" in metrics
        else [],
        fidelity_checks(exp["spec"]["measurement"], fabs),
        setup(exp, list(fabs), run),
        published(),
        plot_links(plots),
        [SOURCES],
    ]
    return "\n\n".join("\n".join(lines) for lines in sections if lines) + "\n"


SOURCES = (
    "Raw records (`<fabric>/raw/rep<k>/*.jsonl`) and tables (`tables/*.parquet`) hold everything these numbers "
    "come from; `zlab report RUN` recomputes them."
)


def uncalibrated(fabs: dict) -> list[str]:
    """The fabrics with a repeat whose links' rates were never calibrated."""
    return [lab for lab, f in fabs.items() if any(not r.get("calibration") for r in f["repeats"])]


def status(run: dict, fabs: dict) -> list[str]:
    """Title, the run's status (and why it stopped), each fabric's fidelity verdict, and the
    repeats re-taken because the hypervisor stole the CPU (where their voided data is kept)."""
    L = [
        f"# zlab run `{run['run_id']}`",
        "",
        f"Status: **{run.get('status')}**"
        + (" — INCOMPLETE: numbers cover only what was recorded" if run.get("status") != "complete" else "")
        + (f" (cause: {run['cause']})" if run.get("cause") else ""),
        "",
    ]
    L.append(
        "Fidelity: "
        + "; ".join(
            f"{lab} **{'valid' if f['summary']['fidelity']['valid'] else 'INVALID'}**"
            + ("" if f["summary"]["fidelity"]["valid"] else f" ({'; '.join(f['summary']['fidelity']['reasons'][:6])})")
            for lab, f in fabs.items()
        )
    )
    uncal = uncalibrated(fabs)
    if uncal:  # the calibration rule could not run: said, not skipped silently
        L += [
            "",
            "Calibration: **uncalibrated** (" + ", ".join(uncal) + "): the links' rates were not measured against "
            "the configured rate (`measurement.calibrate` off, or no calibration recorded), so the calibration rule "
            "did not run",
        ]
    retaken = [
        f"{lab} repeat {r['repeat']} ({'; '.join(v['reason'] for v in r['voided_attempts'])}; raw data of the "
        f"voided attempt(s) kept in {', '.join(lab + '/raw/' + v['folder'] for v in r['voided_attempts'])})"
        for lab, f in fabs.items()
        for r in f["repeats"]
        if r.get("voided_attempts")
    ]
    if retaken:
        L += [
            "",
            "Re-taken repeats (voided by hypervisor steal alone, a cause outside the run, and replayed with the "
            "same seed): " + "; ".join(retaken),
        ]
    return L


def headline(metrics: dict) -> list[str]:
    """The side-by-side table: each ROWS metric as mean ± 95 % CI per fabric, and with two
    fabrics their ratio and in how many repeats the first one was better."""
    fabs = metrics["fabrics"]
    labels = list(fabs)
    cmp_ = metrics.get("comparison")
    k = max(s["summary"]["repeats"] for s in fabs.values())
    L = [
        f"All figures are from the **emulated** fabric, converted to real-cluster units where marked (real = "
        f"emulated / dilation). Each cell: mean ± 95 % confidence half-width over {k} independent repeats (new QP "
        "source ports — ECMP entropy — and scheduler seed each)"
        + (
            ", except where the draws fall into two modes (marked median, below)"
            if any((f["summary"].get("draws") or {}).get("bimodal") for f in fabs.values())
            else ""
        )
        + ".",
        "",
    ]
    head = "| metric | " + " | ".join(labels)
    sep = "|---|" + "---|" * len(labels)
    if cmp_:
        head += f" | {cmp_['a']}/{cmp_['b']} | {cmp_['a']} better in |"
        sep += "---|---|"
    L += [head if head.endswith("|") else head + " |", sep]
    bimodal = [lab for lab in labels if (fabs[lab]["summary"].get("draws") or {}).get("bimodal")]
    for key, name, scale, fmt in ROWS:
        cells = [
            _median_text([headline_value(r, key) for r in fabs[lab]["repeats"]], scale, fmt)
            if lab in bimodal
            else ci_text(fabs[lab]["summary"][key], scale, fmt)
            for lab in labels
        ]
        if cmp_:
            if key in cmp_:
                cells += [_ratio(cmp_[key]), f"{cmp_[key]['a_better']} of {cmp_[key]['n']}"]
            else:
                cells += ["", ""]
        L.append(f"| {name} | " + " | ".join(cells) + " |")
    if bimodal:
        L += [
            "",
            f"{', '.join(bimodal)}: the draws fall into two modes (an ECMP collision or none), which a mean ± "
            "Student-t interval describes badly; those cells give the median over all repeats and its "
            'distribution-free (order-statistic) interval with its coverage. See "What a draw does".',
        ]
    return L


def draws(fabs: dict) -> list[str]:
    """What a draw (repeat) does, when any fabric's draws were classified."""
    return draw_section(fabs, list(fabs))[1:]


def ttft_decomposed(fabs: dict) -> list[str]:
    """TTFT's four components, which are modelled and which measured, and the modelled share of
    the median: the reader must see how little of TTFT the fabric decides."""
    labels = list(fabs)
    L = [
        "## TTFT, decomposed",
        "",
        "TTFT = prefill queue wait + prefill compute + KV transfer + first decode step. Only the KV transfer is "
        "measured; the rest is the workload model's (docs/experiments.md, 'Workload': these time parameters are assumptions). "
        "Medians and p99 (real ms), mean over repeats:",
        "",
        "| component | how it is obtained | " + " | ".join(f"{lab} p50 | {lab} p99" for lab in labels) + " |",
        "|---|---|" + "---|---|" * len(labels),
    ]
    for comp, name, how in COMPONENTS:
        cells = []
        for lab in labels:
            reps = fabs[lab]["repeats"]
            for q in ("p50", "p99"):
                v = _mean([r["ttft_components_real_s"][comp][q] for r in reps])
                cells.append("—" if v is None else f"{1e3 * v:.2f}")
        L.append(f"| {name} | {how} | " + " | ".join(cells) + " |")
    shares = []
    for lab in labels:
        reps = fabs[lab]["repeats"]
        tt = _mean([r["ttft_real_s"]["p50"] for r in reps])
        kv = _mean([r["ttft_components_real_s"]["kv_transfer"]["p50"] for r in reps])
        if tt and kv is not None:
            shares.append(f"{lab} {100 * max(0.0, 1 - kv / tt):.0f} %")
    L += ["", "Modelled share of the median TTFT (1 − median KV / median TTFT): " + ", ".join(shares) + "."]
    return L


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{1e3 * x:.2f}"


def every_repeat(fabs: dict) -> list[str]:
    """One row per fabric and repeat, with its own verdict: the spread behind each mean ± CI."""
    L = [
        "## Every repeat",
        "",
        "| fabric | repeat | KV p50 / p99 (real ms) | max queueing delay (real µs) | "
        "max offered util | retransmits | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for lab, f in fabs.items():
        for r in f["repeats"]:
            kv = r["kv_transfer_real_s"]
            verdict = "valid" if r["fidelity"]["valid"] else "INVALID: " + "; ".join(r["fidelity"]["reasons"])
            qd, ou = r["queue_delay_max_real_s"], r["max_offered_util"]
            L.append(
                f"| {lab} | {r['repeat']} | {_ms(kv['p50'])} / {_ms(kv['p99'])} | "
                f"{'—' if qd is None else f'{1e6 * qd:.0f}'} | {'—' if ou is None else f'{ou:.2f}'} | "
                f"{r['retransmits']} | {verdict} |"
            )
    return L


def _cpu(who: str):
    return lambda r: r["cpu_fraction"].get(who, {}).get("max")


def _checks(m: dict) -> list[tuple]:
    """(check, limit as text, value of one repeat's metrics, format) for every fidelity check;
    `m` is the spec's measurement section, which holds the limits."""
    return [
        (
            "ovs-vswitchd CPU, max over ~250 ms intervals",
            f"{100 * m['max_cpu_fraction']:.0f} % of a core",
            _cpu("ovs"),
            "{:.0%}",
        ),
        ("agent CPU, same", f"{100 * m['max_cpu_fraction']:.0f} % of a core", _cpu("agent"), "{:.0%}"),
        (
            "whole machine CPU, same",
            f"{100 * m['max_machine_cpu_fraction']:.0f} % of all cores",
            _cpu("machine"),
            "{:.0%}",
        ),
        (
            "of which stolen by the hypervisor, same",
            f"{100 * m['max_steal_fraction']:.0f} % of all cores",
            _cpu("steal"),
            "{:.0%}",
        ),
        (
            "queue sample periods missed",
            f"{100 * m['max_late_sample_fraction']:.0f} %",
            lambda r: r["late_sample_fraction"],
            "{:.1%}",
        ),
        ("messages faster than their serialisation floor", "0", lambda r: r["below_floor_messages"], "{}"),
        (
            "max carried utilisation (beyond a one-frame bucket's two frames; windows of ten times them at the slowest loaded port, at least the report's window)",
            f"{m['max_carried_util']}",
            lambda r: r["max_carried_util"],
            "{:.3f}",
        ),
        (
            "KV p50/p99 moved by the agent's late releases",
            f"{100 * m['max_lateness_shift']:.0f} %",
            lambda r: r["lateness_shift"],
            "{:.1%}",
        ),
        (
            "agent release lateness p99 (emulated ms)",
            "(reported)",
            lambda r: None if r["release_lateness_p99_s"] is None else 1e3 * r["release_lateness_p99_s"],
            "{:.1f}",
        ),
        ("agent sends blocked by a full host queue", "0", lambda r: r["blocked_sends"], "{}"),
        (
            "frames dropped in switch egress queues (the fabric's own loss)",
            "(reported)",
            lambda r: (r["drops"] or {}).get("switch_queues"),
            "{}",
        ),
        (
            "frames dropped anywhere else (emulator loss)",
            "0",
            lambda r: None if r["drops"] is None else sum(r.get("drops_outside", {}).values()),
            "{}",
        ),
        (
            "retransmissions, NAKs and timeouts",
            "(reported; one no drop on its QP's own path explains voids the run)",
            lambda r: r["transport_loss_events"],
            "{}",
        ),
        (
            "frames lost on failed elements (excused, counted)",
            "(reported)",
            lambda r: sum((r.get("drops_excused") or {}).values()) if r.get("failures_injected") else None,
            "{}",
        ),
        (
            "link bytes vs the model, max error beyond one frame, loaded ports",
            f"{100 * m['max_link_bytes_error']:.0f} %",
            lambda r: r["link_bytes_max_error"],
            "{:.2%}",
        ),
        (
            "calibration (iperf3 / configured)",
            f"{100 * m['min_calibration_ratio']:.0f} %",
            lambda r: (r["calibration"] or {}).get("ratio"),
            "{:.1%}",
        ),
    ]


def _worst(repeats: list[dict], fn, agg=max):
    """The worst of one value over the repeats that have it (None when none has)."""
    vals = [v for v in (fn(r) for r in repeats) if v is not None]
    return agg(vals) if vals else None


# the checks that read what ns-3 records (the network's own loss); the rest judge the emulating machine
NS3_CHECKS = ("frames dropped in switch egress queues (the fabric's own loss)", "retransmissions, NAKs and timeouts")


def _engine(fab: dict) -> str:
    """The engine that recorded a fabric's repeats (runs from before engines existed: emulation)."""
    return next((r.get("engine", "emulation") for r in fab["repeats"]), "emulation")


def fidelity_checks(m: dict, fabs: dict) -> list[str]:
    """Every fidelity check beside its limit, the worst repeat per fabric (the lowest for the
    calibration ratio, the highest for everything else)."""
    labels = list(fabs)
    L = [
        "## Fidelity checks (worst repeat)",
        "",
        "| check | limit | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    uncal = uncalibrated(fabs)
    for name, limit, fn, fmt in _checks(m):
        agg = min if name.startswith("calibration") else max
        cells = []
        for lab in labels:
            if _engine(fabs[lab]) == "ns3" and name not in NS3_CHECKS:
                cells.append("not applicable to ns3")
                continue
            v = _worst(fabs[lab]["repeats"], fn, agg)
            if name.startswith("calibration") and lab in uncal:
                cells.append("uncalibrated")
                continue
            cells.append("—" if v is None else fmt.format(v))
        L.append(f"| {name} | {limit} | " + " | ".join(cells) + " |")
    return L


ENGINE_LINES = {
    "emulation": "emulation (Mininet/OVS switches, the agent's RoCE transport, time-dilated, scaled sizes)",
    "ns3": "ns3 (ns-3 3.37 packet simulation at real rates and sizes, 4 KB packets, serialising links; "
    "no emulating machine, so its fidelity rules do not apply)",
}


# the transport both engines run today (the agent's rules, which ns-3 restates); a run's run.json names
# its own when it differs (engine ns3 with extra params)
TRANSPORT = "window 64 packets, no congestion control"


def setup(exp: dict, labels: list[str], run: dict | None = None) -> list[str]:
    """What ran: the fabrics, workload, deployment, the scale factors with what one frame stands
    for, and whether the XOFF threshold is representable at this scale."""
    spec = exp["spec"]
    w, d, em, m = spec["workload"], spec["deployment"], spec["emulation"], spec["measurement"]
    first = exp["fabrics"][labels[0]]
    s, sc = first["plan"], first["scaling"]
    burst = first["emulation"]["burst_bytes"] or em["mtu_bytes"] + 14
    xoff_emu = m["xoff_real_bytes"] * sc["size_scale"]
    frames = xoff_emu / burst
    engine = spec.get("engine", "emulation")
    return [
        "## Setup",
        "",
        f"- engine: {ENGINE_LINES.get(engine, engine)}; transport: {(run or {}).get('transport', TRANSPORT)}",
        *[f"- `{lab}`: `{exp['fabrics'][lab]['fabric']}`" for lab in labels],
        f"- workload: trace `{w['trace']}` requests {w['start_index']}…{w['start_index'] + w['requests'] - 1}, "
        f"model `{w['model']}` ({s['kv_bytes_per_token']:,} KV bytes/token), offered load "
        f"{100 * s['offered_load']:.1f} % of the prefill side's NIC capacity, counting the bytes actually moved "
        f"(the trace alone: {100 * s['natural_load']:.3f} %; load factor {sc['load_factor']:.1f}), prefill "
        f"utilisation {100 * s['prefill_utilisation']:.0f} %",
        f"- deployment: {d['prefill_instances']} P + {d['decode_instances']} D instances of TP {d['tp']}, mapping "
        f"`{d['mapping']}`, scheduler `{d['scheduler']}`, ZCube split `{d['split']}`, RoCE path MTU {d['path_mtu']}",
        *(_ns3_scale_lines(m) if engine == "ns3" else _scale_lines(sc, m, burst, xoff_emu, frames)),
    ]


def _ns3_scale_lines(m: dict) -> list[str]:
    """ns-3 runs at real scale: nothing to convert, and a queue is real bytes."""
    return [
        "- scaling: none (ns-3 at real rates and sizes: rate_scale 1, size_scale 1, dilation 1)",
        f"- queues: real bytes; XOFF {m['xoff_real_bytes']:,} bytes for the backlog episodes (the report's "
        f"threshold; the congestion section's PFC, when on, uses its own buffer model); every switch egress queue sampled every {m['queue_sample_ms']} ms of simulated time; "
        "ns-3 counts sent bytes only per run, so no utilisation windows.",
    ]


def _scale_lines(sc: dict, m: dict, burst: int, xoff_emu: float, frames: float) -> list[str]:
    """The emulation's scale factors, what one frame stands for and whether the XOFF is representable."""
    return [
        f"- scaling: rate_scale {sc['rate_scale']:g} (link rates), size_scale {sc['size_scale']:g} (bytes), dilation "
        f"{sc['dilation']:g} (emulated s per real s). One {burst}-byte frame stands for "
        f"{burst / sc['size_scale'] / 2**20:,.1f} MiB of real data. Shapers and pacers hold one frame of burst.",
        f"- queues: XOFF {m['xoff_real_bytes']:,} real bytes = {xoff_emu:,.0f} emulated bytes = {frames:.2f} frames: "
        + (
            "representable (≥ 4 frames)"
            if frames >= 4
            else "**not representable at this scale** (< 4 frames): "
            "backlog episodes and byte-sized queue figures are qualitative"
        )
        + ". Whatever the scale, the ns-3 referee found that a real network running this transport queues far "
        "less than the emulation's real-equivalent figures (its window is 64 packets, and a scaled packet "
        "stands for 1/size_scale real bytes): read queue figures, delays included, as qualitative; completion "
        "times hold" + f"; every switch egress queue sampled every {m['queue_sample_ms']} ms; utilisation windows "
        f"{m['util_window_ms']} ms emulated; offered = (sent + backlog growth + drops) / capacity.",
    ]


def published() -> list[str]:
    """The spec's published figures and, for each, whether this run measures anything comparable."""
    return [
        "## Published reference numbers (spec §5): what is comparable",
        "",
        "| what | value | context | comparable with this run? |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {x} |" for a, b, c, x in PUBLISHED],
    ]


def plot_links(plots: list[str] | None) -> list[str]:
    """The plots, as images relative to report.md (they live in plots/); None: not drawn."""
    if plots is None:
        return ["## Plots", "", "Not drawn in this rebuild (`zlab report --no-plots`); `zlab report RUN` draws them."]
    return ["## Plots", "", *[f"![{p}](plots/{p})" for p in plots]]
