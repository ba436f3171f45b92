"""`zlab referee RUN`: replay every fabric's repeats of a recorded run in ns-3, compare, and
write RUN/referee/<scale>.json, RUN/referee/<scale>/<fabric>/rep<k>/ (scenario and ns-3 output)
and RUN/referee/report.md, which the run's report.md includes as its "emulation vs ns-3" section."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import UserInputError
from ..measure.markdown import ci_text
from ..measure.tables import FabricData
from ..records import read_json, write_json
from . import compare, routing, scenario, simulate

SECTION = "report.md"


def gate(s: dict) -> str:
    """The verdict that decides `zlab referee`'s exit code (the raw one is always printed first):
    raw, unless ns-3 ran its serialising links at the emulation's scale; then the emulation must
    fall between ns-3 less the link-model term and ns-3 as it ran."""
    return "verdict_link_model" if s.get("scale") == "same" and s.get("link_model") == "serialiser" else "verdict"


def fabric_labels(root: Path, exp: dict) -> list[str]:
    return [label for label in exp["fabrics"] if (root / label / "fabric.json").exists()]


def referee(
    root: Path,
    scale: str,
    requests: int | None = None,
    repeats: int | None = None,
    hop_delay_ns: int = 0,
    log=print,
    what_if: dict | None = None,
    link_model: str | None = None,
) -> dict:
    """Replay, compare, write; return the summary (see compare.summarise). A what-if replay
    (changed window or packet size) goes to referee/<scale>-whatif.json, never over the real one."""
    root = Path(root)
    if not (root / "experiment.json").exists():
        raise UserInputError(f"{root}: not a zlab run folder (no experiment.json)")
    exp = read_json(root / "experiment.json")
    labels = fabric_labels(root, exp)
    if not labels:
        raise UserInputError(f"{root}: no fabric folders with fabric.json")
    if hop_delay_ns < 0:
        raise UserInputError(f"hop delay must be >= 0 ns (got {hop_delay_ns})")
    if repeats is not None and repeats < 1:
        raise UserInputError(f"repeats must be >= 1 (got {repeats})")
    name = f"{scale}-whatif" if what_if else scale
    metrics = read_json(root / "metrics.json") if (root / "metrics.json").exists() else {"fabrics": {}}
    pairs, excluded, t0 = [], [], time.monotonic()
    used_model = link_model or ("serialiser" if scale == "real" else "bucket")
    for label in labels:
        n_rep = len(exp["fabrics"][label]["repeats"])
        reps = range(n_rep if repeats is None else min(repeats, n_rep))
        for rep in reps:
            if not (root / label / "raw" / f"rep{rep}" / "plan.json").exists():
                log(f"[zlab] referee: {label} rep {rep} has no raw records; skipped")
                continue
            verdict = next(
                (r["fidelity"] for r in metrics["fabrics"].get(label, {}).get("repeats", []) if r["repeat"] == rep),
                None,
            )
            valid = verdict["valid"] if verdict else None
            if valid is False:  # the emulation voided this repeat itself: not evidence either way
                excluded.append({"label": label, "repeat": rep, "reasons": list(verdict.get("reasons", []))})
                log(f"[zlab] referee: {label} rep {rep} is INVALID in the emulation; left out of the verdicts")
                continue
            sc = scenario.build(
                root / label,
                exp,
                rep,
                scale,
                requests=requests,
                hop_delay_ns=hop_delay_ns,
                what_if=what_if,
                link_model=link_model,
            )
            used_model = sc.link_model
            res = simulate.run(sc, root / "referee" / name / label / f"rep{rep}", log=log)
            fd = FabricData(root / label, exp["fabrics"][label], rep)
            pairs.append(compare.pair(fd, res, exp["spec"]["measurement"]["xoff_real_bytes"], valid))
            done = res.messages["t_complete_ns"].notna().sum()
            log(
                f"[zlab] referee ({scale} scale): {label} rep {rep}: {done}/{len(res.messages)} messages, "
                f"{res.summary['end_ns'] / 1e9:.4g} s simulated in {res.wall_s:.1f} s wall"
            )
            if pairs[-1].missing:
                log(
                    f"[zlab] referee: ns-3 left {len(pairs[-1].missing)} message(s) incomplete in {label} rep {rep}: "
                    + missing_text(pairs[-1].missing)
                )
    if not pairs and not excluded:
        raise UserInputError(f"{root}: no repeat with raw records to referee")
    # the flow entries against the cabling alone, on the pairs the schedule uses: what both engines executed
    oracle = {
        label: routing.check(
            root / label / "fabric.json", root / label / "flows.json", routing.scheduled_pairs(root / label) or None
        ).as_dict()
        for label in labels
    }
    summary = compare.summarise(pairs, excluded, labels, routing=oracle)
    summary.update(
        {
            "scale": scale,
            "link_model": used_model,
            "requests": requests,
            "hop_delay_ns": hop_delay_ns,
            "what_if": what_if or {},
            "wall_s": time.monotonic() - t0,
            "notes": sorted({n for p in pairs for n in p.notes}),
            "dilation": {label: exp["fabrics"][label]["scaling"]["dilation"] for label in labels},
            "size_scale": {label: exp["fabrics"][label]["scaling"]["size_scale"] for label in labels},
        }
    )
    write_json(root / "referee" / f"{name}.json", summary)
    if not what_if:
        section = markdown(root)
        (root / "referee" / SECTION).write_text(section)
        _include_in_report(root, section)
    return summary


def missing_text(missing: list[dict], most: int = 8) -> str:
    """Incomplete messages by id (and request), the first few."""
    head = ", ".join(f"msg {m['msg']} (req {m['req']}, {m['src_port']} -> {m['dst_port']})" for m in missing[:most])
    return head + (f" and {len(missing) - most} more" if len(missing) > most else "")


def routing_text(label: str, r: dict) -> str:
    """The routing oracle's finding for one fabric, in one line."""
    bad = [
        f"{len(r[k]) if isinstance(r[k], list) else r[k]} {k.replace('_', ' ')}"
        for k in ("misdelivered", "not_shortest", "not_the_unique_path", "share_failures", "starved")
        if r[k]
    ]
    return (
        f"routing oracle, {label}: {'ok' if r['ok'] else 'FAILED (' + ', '.join(bad or ['nothing routed']) + ')'} — "
        f"{r['routed']} of {r['pairs']} NIC pairs routed (the rest get no entry at their first switch), "
        f"{r['unique_pairs']} with a unique shortest path; ECMP: worst switch share {100 * r['max_share_deviation']:.0f} % off uniform "
        f"(tolerance {100 * r['share_tolerance']:.0f} %), least-served member {r['min_member_share']:.2f} "
        f"of its fair share (floor {r['starve_floor']:.2f})"
    )


def offset_text(o: dict) -> str:
    """Message by message, how far the emulation is from ns-3's link model."""
    return (
        f"per message, emulation less ns-3: median {o['median']:+.2f} frames (5-95 %: {o['p5']:+.2f} to "
        f"{o['p95']:+.2f}), {100 * o['within_one_frame']:.0f} % of {o['messages']} within one frame"
    )


def verdict_text(v: dict) -> str:
    return f"**{'agree' if v['agree'] else 'DISAGREE'}** — " + "; ".join(
        f"{k} {'ok' if ok else 'FAILED'}" for k, ok in v["checks"].items()
    )


def ratio_name(r: dict) -> str:
    """The p99 ratio's label; summaries written before the pair was recorded were ZCube/ROFT."""
    return f"{r.get('a', 'zcube')}/{r.get('b', 'roft')} KV p99 ratio"


def drops_text(n) -> str:
    return "not sampled" if n is None else str(n)


def incomplete_text(s: dict) -> str:
    """Messages ns-3 did not complete, per fabric, named."""
    parts = [f"{label}: " + missing_text(f["incomplete"]) for label, f in s["fabrics"].items() if f.get("incomplete")]
    return ("ns-3 left messages incomplete (no passing verdict): " + "; ".join(parts)) if parts else ""


def excluded_text(s: dict) -> str:
    """The repeats left out of the verdicts, named."""
    ex = s.get("excluded", [])
    if not ex:
        return ""
    return (
        "Left out of the verdicts (emulation INVALID): "
        + "; ".join(
            f"{e['label']} rep {e['repeat']}" + (f" ({e['reasons'][0]})" if e.get("reasons") else "") for e in ex
        )
        + "."
    )


def _include_in_report(root: Path, section: str) -> None:
    """Put the section into the run's report.md now (report rebuilds include it themselves)."""
    report = root / "report.md"
    if not report.exists():
        return
    text = report.read_text()
    head = "## Emulation vs ns-3 (independent referee)"
    if head in text:
        text = text[: text.index(head)].rstrip("\n") + "\n"
    report.write_text(text + "\n" + section)


def markdown(root: Path) -> str:
    """The report section from whatever scales have been refereed."""
    out = [
        "## Emulation vs ns-3 (independent referee)",
        "",
        "The same fabric, flow entries, QP source ports and message schedule replayed in ns-3 3.37 "
        "(point-to-point links and drop-tail queues of the emulation's rates and limits; the transport's rules "
        "re-implemented in C++). `zlab referee` wrote this section.",
        "",
    ]
    same = root / "referee" / "same.json"
    real = root / "referee" / "real.json"
    if same.exists():
        out += _same_section(read_json(same))
    if real.exists():
        out += _real_section(read_json(real))
    return "\n".join(out) + "\n"


def links_text(lk: dict) -> str:
    if not lk["compared"]:
        return "not compared (a subset of the requests was replayed)"
    return (
        f"worst of {lk['compared']} port-repeats {100 * lk['max_error']:.2f} % "
        f"({100 * lk['max_error_beyond_frame']:.2f} % beyond one frame)"
    )


def _validity(f: dict) -> str:
    bad = [i for i, v in enumerate(f.get("emu_valid", [])) if v is False]
    return f"emulation INVALID in repeat(s) {', '.join(map(str, bad))}" if bad else "emulation valid in every repeat"


def _same_section(s: dict) -> list[str]:
    """Same scale. With the emulation's link model in ns-3 (bucket) the raw verdict is the verdict;
    with serialising links (summaries written before, or --link-model serialiser) the term's columns."""
    serialiser = s.get("link_model", "serialiser") == "serialiser"
    out = ["### Same scale (emulated units)", ""]
    verdicts = [("verdict", "ns-3 as it ran (raw)")]
    if serialiser:
        verdicts.append(("verdict_link_model", "between ns-3 less the link-model term and ns-3 as it ran"))
    for key, what in verdicts:
        out.append(f"- Verdict, {what}: " + verdict_text(s[key]))
    out += [f"- {t}" for t in (excluded_text(s), incomplete_text(s)) if t]
    out += [f"- {routing_text(label, r)}" for label, r in s.get("routing", {}).items()]
    out += [
        f"- {label}: {offset_text(f['msg_offset_frames'])}"
        for label, f in s["fabrics"].items()
        if f.get("msg_offset_frames", {}).get("median") is not None
    ]
    if serialiser:
        out += [
            "",
            "ns-3's links serialise here. The link-model term (`testbed/referee/compare.py: shaper_term`) is "
            "what ns-3's serialising, store-and-forward links add over the emulation's htb-shaped veths on "
            "an idle path: the last frame's serialisation at the sender, the first frame's at each switch "
            "and the ACK's on the way back. It is neither a bound nor exact, so the second verdict asks the "
            "emulation to fall between the two link models (± the band), not onto the corrected figure.",
            "",
            "| mean ± 95 % CI over repeats | emulation | ns-3 | gap | ns-3 less link-model term | gap | "
            "outside the interval | band |",
            "|---|---|---|---|---|---|---|---|",
        ]
    else:
        out += [
            "",
            "ns-3's links here are the emulation's link model: a drop-tail queue ahead of a token bucket "
            "of one frame (htb's burst) over a wire that does not serialise, so no correction is applied "
            "and the verdict is the raw one.",
            "",
            "| mean ± 95 % CI over repeats | emulation | ns-3 | gap | band |",
            "|---|---|---|---|---|",
        ]
    pad = " | | |" if serialiser else ""
    pad2 = " | | | | |" if serialiser else " | |"
    for label, f in s["fabrics"].items():
        for key, name in (("kv_p50", "KV completion p50 (emulated s)"), ("kv_p99", "KV completion p99 (emulated s)")):
            row = (
                f"| {label} {name} | {ci_text(f[key]['emu_s'], 1, '{:.3f}')} | {ci_text(f[key]['ns3_s'], 1, '{:.3f}')} "
                f"| {100 * f[key]['gap']:.1f} % |"
            )
            if serialiser:
                a = f[key + "_link_model"]
                row += (
                    f" {ci_text(a['ns3_s'], 1, '{:.3f}')} | {100 * a['gap']:.1f} % "
                    f"| {100 * a.get('interval_gap', a['gap']):.1f} % |"
                )
            out.append(row + f" {100 * s['bands'][key]:.0f} % |")
        out.append(
            f"| {label} link bytes | | | {links_text(f['links'])} |{pad} {100 * s['bands']['link_bytes']:.0f} % |"
        )
        q = f["queues"]
        out.append(
            f"| {label} max queue, any port (bytes) | {q['emu_max_bytes']:.0f} | {q['ns3_max_bytes']:.0f} | "
            f"median per-port gap {100 * q['max_gap_median']:.0f} % |{pad} — |"
        )
        out.append(f"| {label} switch-queue drops | {drops_text(f['drops']['emu'])} | {f['drops']['ns3']} |{pad2}")
    if "kv_p99_ratio" in s:
        r = s["kv_p99_ratio"]
        row = f"| {ratio_name(r)} | {r['emu']:.3f} | {r['ns3']:.3f} | {100 * r['gap']:.1f} % |"
        if serialiser:
            a = s["kv_p99_ratio_link_model"]
            row += f" {a['ns3']:.3f} | {100 * a['gap']:.1f} % | {100 * a.get('interval_gap', a['gap']):.1f} % |"
        out.append(row + f" {100 * s['bands']['kv_p99_ratio']:.0f} % |")
    out += [
        "",
        "; ".join(f"{label}: {_validity(f)}" for label, f in s["fabrics"].items()) + ". "
        f"ns-3 wall time: {sum(sum(f['ns3_wall_s']) for f in s['fabrics'].values()):.1f} s for "
        f"{sum(f['repeats'] for f in s['fabrics'].values())} replays. " + " ".join(s.get("notes", [])),
        "",
    ]
    return out


def _real_section(s: dict) -> list[str]:
    out = [
        "### Real scale (sigma = 1: real rates and sizes, vs the emulation converted to real units)",
        "",
        "- Verdict: " + verdict_text(s["verdict"]),
    ]
    out += [f"- {t}" for t in (excluded_text(s), incomplete_text(s)) if t]
    out += ["", "| mean ± 95 % CI over repeats | emulation → real | ns-3 real | gap |", "|---|---|---|---|"]
    for label, f in s["fabrics"].items():
        for key, name in (("kv_p50", "KV completion p50 (real ms)"), ("kv_p99", "KV completion p99 (real ms)")):
            out.append(
                f"| {label} {name} | {ci_text(f[key]['emu_s'], 1e3)} | {ci_text(f[key]['ns3_s'], 1e3)} | "
                f"{100 * f[key]['gap']:.1f} % |"
            )
        lk = f["links"]
        if lk["compared"]:
            out.append(
                f"| {label} link bytes (real) | {lk['total_emu_bytes']:.4g} | {lk['total_ns3_bytes']:.4g} | "
                f"{links_text(lk)} |"
            )
        q = f["queues"]
        out.append(
            f"| {label} max queue, any port (real bytes) | {q['emu_max_bytes']:.4g} | {q['ns3_max_bytes']:.4g} | "
            f"median per-port gap {100 * q['max_gap_median']:.0f} % |"
        )
        out.append(
            f"| {label} max queueing delay (real µs) | {1e6 * q['emu_max_delay_real_s']:.1f} | "
            f"{1e6 * q['ns3_max_delay_real_s']:.1f} | |"
        )
        x = f["xoff"]
        out.append(
            f"| {label} port-samples above the {x['xoff_real_bytes'] / 1e3:.0f} KB XOFF | "
            f"{100 * x['emu_fraction']:.3f} % | {100 * x['ns3_fraction']:.3f} % | |"
        )
    if "kv_p99_ratio" in s:
        r = s["kv_p99_ratio"]
        out.append(f"| {ratio_name(r)} | {r['emu']:.3f} | {r['ns3']:.3f} | {100 * r['gap']:.1f} % |")
    walls = [w for f in s["fabrics"].values() for w in f["ns3_wall_s"]] or [0.0]
    out += [
        "",
        "; ".join(f"{label}: {_validity(f)}" for label, f in s["fabrics"].items()) + ".",
        "",
        f"ns-3 at real scale: {len(walls)} replays, {sum(walls):.0f} s wall (max {max(walls):.0f} s). "
        + " ".join(s.get("notes", [])),
        "",
    ]
    return out
