"""Tables of a finished zlab run folder (metrics.json, experiment.json, run.json), for the docs."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.measure import markdown as md

ROWS = [
    ("kv_p50_real_s", "KV-transfer completion p50 (real ms)", 1e3, "{:.2f}"),
    ("kv_p99_real_s", "KV-transfer completion p99 (real ms)", 1e3, "{:.2f}"),
    ("queue_delay_max_real_s", "max queueing delay (real-equivalent µs, qualitative)", 1e6, "{:.0f}"),
    ("max_offered_util", "max offered link utilisation", 1, "{:.2f}"),
    ("max_carried_util", "max carried link utilisation", 1, "{:.3f}"),
    ("retransmits", "retransmitted packets", 1, "{:.1f}"),
    ("ttft_p99_real_s", "TTFT p99 (real ms, mostly modelled)", 1e3, "{:.1f}"),
]
HEADLINE = ("kv_p50_real_s", "kv_p99_real_s", "ttft_p99_real_s")


def _ci(c: dict, k: float, f: str) -> str:
    if c["mean"] is None:
        return "—"
    return f.format(k * c["mean"]) + ("" if c["ci95"] is None else " ± " + f.format(k * c["ci95"]))


def run_table(root: Path, keys: tuple[str, ...] | None = None) -> str:
    """The comparison table, mean ± 95 % CI over repeats per fabric and the paired ratio."""
    metrics = json.loads((root / "metrics.json").read_text())
    exp = json.loads((root / "experiment.json").read_text())
    run = json.loads((root / "run.json").read_text())
    fabs, cmp_ = metrics["fabrics"], metrics.get("comparison")
    labels = list(fabs)
    k = fabs[labels[0]]["summary"]["repeats"]
    head = [
        f"Run `{run.get('run_id', root.name)}` ({run['started'][:10]}, git `{str(run.get('git_sha'))[:7]}`, "
        f"wall {run['wall_s'] / 60:.1f} min); emulated, converted to real units, mean ± 95 % CI over {k} repeats (a median where the draws are bimodal) "
        "per fabric:",
        "",
        "| | "
        + " | ".join(f"`{exp['fabrics'][lab]['fabric'].split(',')[0]} …`" for lab in labels)
        + (f" | {cmp_['a']}/{cmp_['b']}, paired | {cmp_['a']} better in |" if cmp_ else " |"),
        "|---|" + "---|" * len(labels) + ("---|---|" if cmp_ else ""),
    ]
    out = head
    # a fabric whose draws fall into two modes (ECMP collision or none): medians with distribution-free intervals
    bimodal = [lab for lab in labels if (fabs[lab]["summary"].get("draws") or {}).get("bimodal")]
    for key, name, scale, f in ROWS:
        if keys is not None and key not in keys:
            continue
        cells = [
            md._median_text([md.headline_value(r, key) for r in fabs[lab]["repeats"]], scale, f)
            if lab in bimodal
            else _ci(fabs[lab]["summary"][key], scale, f)
            for lab in labels
        ]
        if cmp_:
            c = cmp_.get(key)
            cells += [_ci(c["ratio"], 1, "{:.2f}"), f"{c['a_better']} of {c['n']}"] if c else ["", ""]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append(
        "| fidelity | "
        + " | ".join("valid" if fabs[lab]["summary"]["fidelity"]["valid"] else "INVALID" for lab in labels)
        + (" | | |" if cmp_ else " |")
    )
    if bimodal:
        out += [
            "",
            f"{', '.join(bimodal)}: the draws fall into two modes, so those cells are the median over all "
            "repeats [order-statistic interval] (its coverage). What a draw does:",
        ]
        out += [""] + md.draw_section(fabs, labels)[5:]  # the table, without its heading and explanation
    return "\n".join(out)


def draws_table(root: Path) -> str:
    """What a draw does per fabric (the report's section), from a shipped run folder's metrics."""
    fabs = json.loads((root / "metrics.json").read_text())["fabrics"]
    return "\n".join(md.draw_section(fabs, list(fabs))[5:])
