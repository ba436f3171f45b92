"""The run's report.md: the side-by-side table, the setup with its scale factors, the
published reference numbers and the plots."""

from __future__ import annotations

# spec §5, production figures (not comparable one-to-one with a 16-GPU emulation)
PUBLISHED = [
    ("GPU inference throughput", "> +15 %", "ZCube vs ROFT, ~1,000-GPU GLM-5.1 coding cluster"),
    ("TTFT P99", "-40.6 %", "same"),
    ("switch + optics capex", "-33 %", "same"),
    ("NIC cap 100G -> 200G", "throughput +19 %, TTFT -22 %", "32-GPU inference service"),
    ("queue depths, PFC counts, link loads, KV completion times", "not published", "what this testbed measures"),
]


def _ms(x):
    return "—" if x is None else f"{1e3 * x:.2f}"


def _fmt(x, f="{:.2f}"):
    return "—" if x is None else f.format(x)


def markdown(run: dict, spec: dict, metrics: dict, plots: list[str], plan_summary: dict) -> str:
    labels = list(metrics)
    L = [f"# zlab run `{run['run_id']}`", "",
         f"Status: **{run.get('status')}**" + (" — INCOMPLETE: numbers cover only what was recorded"
                                               if run.get("status") != "complete" else "")
         + (f" (cause: {run['cause']})" if run.get("cause") else ""), ""]
    L.append("Fidelity: " + "; ".join(
        f"{lab} **{'valid' if m['fidelity']['valid'] else 'INVALID'}**"
        + ("" if m["fidelity"]["valid"] else f" ({', '.join(m['fidelity']['reasons'])})") for lab, m in metrics.items()))
    L += ["", "| metric | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]

    def row(name, fn):
        L.append(f"| {name} | " + " | ".join(fn(metrics[lab]) for lab in labels) + " |")

    for key, title in (("kv_transfer_real_s", "KV-transfer completion"), ("ttft_real_s", "TTFT")):
        for q in ("p50", "p99", "p999"):
            row(f"{title} {q} (real ms)", lambda m, k=key, q=q: f"{_ms(m[k][q])} (n={m[k]['n']})")
    row("max egress queue (KiB)", lambda m: _fmt(m["queue_max_bytes"] and m["queue_max_bytes"] / 1024, "{:.1f}"))
    row("p99 egress queue, loaded ports (KiB)", lambda m: _fmt(m["queue_p99_bytes"] and m["queue_p99_bytes"] / 1024, "{:.1f}"))
    row("PFC stand-in: episodes above XOFF / total s", lambda m: f"{m['pfc_standin_events']} / {m['pfc_standin_total_s']:.2f}")
    row("max offered link utilisation", lambda m: _fmt(m["max_offered_link_util"]))
    row("max carried link utilisation", lambda m: _fmt(m["max_carried_link_util"]))
    row("throughput (requests/s, real)", lambda m: _fmt(m["throughput_req_per_s_real"], "{:.1f}"))
    row("KV throughput (Gb/s, real)", lambda m: _fmt(m["kv_gbps_real"], "{:.1f}"))
    row("messages completed / posted", lambda m: f"{m['messages_completed']} / {m['messages_posted']}")
    row("retransmits / queue drops", lambda m: f"{m['retransmits']} / {m['queue_drops']}")
    row("max CPU: ovs-vswitchd / agent", lambda m: " / ".join(
        f"{100 * m['cpu_fraction'][k]['max']:.0f} %" if k in m["cpu_fraction"] else "—" for k in ("ovs", "agent")))
    row("calibration (iperf3 / configured)", lambda m: f"{100 * m['calibration']['ratio']:.1f} %" if m["calibration"] else "—")
    s = plan_summary
    d, w, em = spec["deployment"], spec["workload"], spec["emulation"]
    L += ["", "## Setup", "",
          *[f"- `{lab}`: `{spec['fabrics'][lab]}`" for lab in labels],
          f"- workload: trace `{w['trace']}` requests {w['start_index']}…{w['start_index'] + w['requests'] - 1}, model "
          f"`{w['model']}` ({s['kv_bytes_per_token']:,} KV bytes/token), offered load {100 * s['offered_load']:.1f} % of the "
          f"prefill side's NIC capacity (the trace alone: {100 * s['natural_load']:.3f} %; load factor "
          f"{s['scaling']['load_factor']:.1f}), prefill utilisation {100 * s['prefill_utilisation']:.0f} %",
          f"- deployment: {d['prefill_instances']} P + {d['decode_instances']} D instances of TP {d['tp']}, mapping "
          f"`{d['mapping']}`, scheduler `{d['scheduler']}`, ZCube split `{d['split']}`, RoCE path MTU {d['path_mtu']}",
          f"- scaling: rate_scale {em['rate_scale']:g} (link rates), size_scale {w['size_scale']:g} (bytes), time dilation "
          f"{s['dilation']:g} (emulated s per real s). Times above are real-cluster units: emulated / {s['dilation']:g}.",
          f"- measurement: every switch egress queue sampled every {spec['measurement']['queue_sample_ms']} ms; PFC "
          f"stand-in threshold (XOFF) {spec['measurement']['xoff_bytes']} bytes — this kernel cannot emulate PFC pauses, "
          "so episodes of backlog above XOFF are counted instead; utilisation windows "
          f"{spec['measurement']['util_window_ms']} ms; offered utilisation = (sent + backlog growth + drops) / capacity.",
          "", "## Published reference numbers (spec §5)", "",
          "Production-scale figures, listed for orientation; a 16-GPU emulation does not reproduce them one to one.", "",
          "| what | value | context |", "|---|---|---|",
          *[f"| {a} | {b} | {c} |" for a, b, c in PUBLISHED], "", "## Plots", ""]
    L += [f"![{p}](plots/{p})" for p in plots]
    L += ["", "Raw records (`<fabric>/raw/*.jsonl`) and tables (`tables/*.parquet`) hold everything these numbers "
          "come from; `zlab report RUN` recomputes them.", ""]
    return "\n".join(L)
