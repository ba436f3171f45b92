"""Producers of docs/referee.md's measured figures: each runs the referee and prints a Markdown table.

    .venv/bin/python scripts/docsgen/referee_figures.py oracles      # zlab referee --oracles [--debug-no-pacing] --json
    .venv/bin/python scripts/docsgen/referee_figures.py link-model   # the mini-run, bucket vs serialiser links
    .venv/bin/python scripts/docsgen/referee_figures.py baseline     # the mini-run, ns-3 TCP beside zlab's transport
    .venv/bin/python scripts/docsgen/referee_figures.py routing      # the routing oracle, passing and broken tables

Each needs the compiled referee (`bash scripts/provision.sh --referee`), no root, and a few seconds to a minute.
The mini-run is copied to a temporary folder first: the referee writes its outputs into the run folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
ZLAB = str(ROOT / ".venv/bin/zlab")
MINI = ROOT / "tests/data/mini-run"
NAMES = {"zcube": "ZCube", "roft": "ROFT"}


def zlab_json(*args: str) -> dict:
    """zlab's --json output; exit 3 (a band or an oracle failed) is an answer, anything else an error."""
    r = subprocess.run([ZLAB, *args, "--json"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode not in (0, 3):
        raise SystemExit(f"zlab {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def oracles() -> None:
    ok, broken = zlab_json("referee", "--oracles"), zlab_json("referee", "--oracles", "--debug-no-pacing")
    print(
        "| oracle | ns-3 links | expected (closed form) | ns-3 measured | tolerance | verdict "
        "| pacer removed (`--debug-no-pacing`) |"
    )
    print("|---|---|---|---|---|---|---|")
    for tail in ("", "_bucket"):
        d, m, f = ok["dd1" + tail], ok["md1" + tail], ok["fair_share" + tail]
        bd, bm, bf = broken["dd1" + tail], broken["md1" + tail], broken["fair_share" + tail]
        links = d["link_model"]
        print(
            f"| D/D/1: {d['messages']} messages at rho {d['rho']} | {links} | every wait {d['expected_wait_us']:g} µs "
            f"| max wait {d['max_abs_wait_us']:.3g} µs | {d['tolerance_us']:g} µs | {verdict(d['ok'])} "
            f"| max wait {bd['max_abs_wait_us']:.3g} µs, {bd['nic_drops']} NIC drops: {verdict(bd['ok'])} |"
        )
        print(
            f"| M/D/1 mean wait: {m['messages']} Poisson messages at rho {m['rho']}, seed {m['seed']} | {links} "
            f"| Pollaczek–Khinchine {m['pollaczek_khinchine_us'] / 1e3:.4g} ms | {m['mean_wait_us'] / 1e3:.4g} ms "
            f"({pct(m['mean_gap'])}) | {100 * m['tolerance']['mean']:.0f} % | {verdict(m['ok'])} "
            f"| {bm['mean_wait_us'] / 1e3:.3g} ms: {verdict(bm['ok'])} |"
        )
        print(
            f"| M/D/1 p99 wait | {links} | Erlang's exact distribution {m['exact_p99_us'] / 1e3:.4g} ms "
            f"| {m['p99_wait_us'] / 1e3:.4g} ms ({pct(m['p99_gap'])}) | {100 * m['tolerance']['p99']:.0f} % "
            f"| {verdict(m['ok'])} | {bm['p99_wait_us'] / 1e3:.3g} ms |"
        )
        print(
            f"| M/D/1 each message's wait | {links} | Lindley's recursion on the same releases "
            f"| off by at most {m['max_off_lindley_us']:.2g} µs | {m['tolerance']['lindley_us']:g} µs "
            f"| {verdict(m['ok'])} | off by {bm['max_off_lindley_us']:.3g} µs |"
        )
        sizes = "/".join(map(str, f["sizes_frames"]))
        print(
            f"| fair share: {f['flows']} senders of {sizes} frames into one port | {links} "
            f"| processor sharing {'/'.join(f'{x / 1e6:.2f}' for x in f['processor_sharing_us'])} s "
            f"| {'/'.join(f'{x / 1e6:.2f}' for x in f['completion_us'])} s (at most {pct(f['max_gap'])} off) "
            f"| {100 * f['tolerance']:.0f} % | {verdict(f['ok'])} "
            f"| at most {100 * bf['max_gap']:.0f} % off, {bf['nic_drops']} NIC drops: {verdict(bf['ok'])} |"
        )
    print(f"\nAll oracles: {verdict(ok['ok'])}; with the pacer removed: {verdict(broken['ok'])} (must be FAIL).")


def mini_copy(tmp: str) -> str:
    dst = Path(tmp) / "mini-run"
    shutil.copytree(MINI, dst)
    return str(dst)


def link_model() -> None:
    print(
        "| ns-3 links | fabric | KV p50 gap | KV p99 gap | per message, emulation less ns-3 (median, 5–95 %) "
        "| messages within one frame | ZCube/ROFT p99 ratio gap | raw verdict |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        run = mini_copy(tmp)
        for model in ("serialiser", "bucket"):
            s = zlab_json("referee", run, "--scale", "same", "--link-model", model)["same"]
            for i, (label, f) in enumerate(s["fabrics"].items()):
                o = f["msg_offset_frames"]
                first = i == 0
                print(
                    f"| {model if first else ''} | {NAMES.get(label, label)} | {pct(f['kv_p50']['gap'])} "
                    f"| {pct(f['kv_p99']['gap'])} | {o['median']:+.2f} frames ({o['p5']:+.2f} to {o['p95']:+.2f}) "
                    f"| {100 * o['within_one_frame']:.0f} % of {o['messages']} "
                    f"| {pct(s['kv_p99_ratio']['gap']) if first else ''} "
                    f"| {('agree' if s['verdict']['agree'] else 'DISAGREE') if first else ''} |"
                )


def baseline() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        res = zlab_json("referee", mini_copy(tmp), "--baseline")
    print(
        "| fabric | repeat | data-carrying ports | bytes, TCP vs zlab, worst port | KV p50 zlab / TCP | "
        "KV p99 zlab / TCP | TCP messages incomplete |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in res["repeats"]:
        print(
            f"| {NAMES.get(r['label'], r['label'])} | {r['repeat']} | {r['data_ports']} "
            f"| {pct(r['data_bytes_max_error'] or 0)} | {r['kv_p50_s']['zlab']:.4f} / {r['kv_p50_s']['tcp']:.4f} s "
            f"| {r['kv_p99_s']['zlab']:.4f} / {r['kv_p99_s']['tcp']:.4f} s | {r['tcp_incomplete']} |"
        )
    print(
        f"\nSame bytes per data-carrying port within {100 * res['bytes_band']:.0f} %: "
        f"{'yes' if res['same_bytes'] else 'NO'}."
    )


def routing_rows() -> None:
    """The routing oracle on the shipped mini-run, and on a three-tier ROFT with today's tables, the old XOR hash
    and a shuffled table (the broken tables as tests/unit/test_referee_routing.py builds them)."""
    import numpy as np

    from testbed.emulation.runfolder import flows_document
    from testbed.fabric import build_fabric
    from testbed.referee import routing
    from tests.unit.test_referee_routing import old_xor_entries

    def row(what: str, r: dict) -> None:
        share = "no ECMP" if not r["ecmp_checks"] else pct(r["max_share_deviation"])
        least = "—" if not r["ecmp_checks"] else f"{r['min_member_share']:.2f}"
        starved = f" ({r['starved']} arrivals starved)" if r["starved"] else ""
        print(
            f"| {what} | {r['routed']} ({r['unrouted']} not served) | {r['unique_pairs']} | {share} "
            f"| {least}{starved} | {len(r['misdelivered']) + len(r['not_shortest'])} | {verdict(r['ok'])} |"
        )

    print(
        "| flows.json | pairs routed | unique shortest paths followed | worst switch share off uniform "
        "| least-served member (of its fair share) | misdelivered or not shortest (first 5) | verdict |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, r in routing.check_run(MINI).items():
        row(f"mini-run {NAMES.get(label, label)}", r)
    with tempfile.TemporaryDirectory() as tmp:
        for spec, sources in (
            ("roft:gpus=64,tiers=3,gpus_per_server=8,radix=8", None),
            ("roft:gpus=256,tiers=3,gpus_per_server=8,radix=16", 4),
        ):
            fab = build_fabric(spec)
            d = Path(tmp)
            (d / "fabric.json").write_text(fab.to_json())
            doc = flows_document(fab)
            g = routing.Graph.load(d / "fabric.json")
            nics = g.nic_ports()
            src = nics if sources is None else nics[:: len(nics) // sources][:sources]
            pairs = [(g.port_name[a], g.port_name[b]) for a in src for b in nics if g.port_node[a] != g.port_node[b]]
            who = "every NIC" if sources is None else ", ".join(g.port_name[a] for a in src)
            variants = [("today's hash", doc)]
            if sources is None:
                xor = json.loads(json.dumps(doc))
                for sw in xor["switches"].values():
                    sw["entries"] = old_xor_entries(sw["entries"], sw["dpid"])
                shuffled = json.loads(json.dumps(doc))
                rng = np.random.default_rng(7)
                for sw in shuffled["switches"].values():
                    outs = [e["out_port"] for e in sw["entries"]]
                    for e, o in zip(sw["entries"], rng.permutation(outs)):
                        e["out_port"] = int(o)
                variants += [("the old XOR hash", xor), ("a shuffled table", shuffled)]
            for what, flows in variants:
                (d / "flows.json").write_text(json.dumps(flows))
                r = routing.check(d / "fabric.json", d / "flows.json", pairs).as_dict()
                row(f"`{spec}` from {who} to every NIC, {what}", r)


def main(argv: list[str]) -> int:
    jobs = {"oracles": oracles, "link-model": link_model, "baseline": baseline, "routing": routing_rows}
    if len(argv) != 1 or argv[0] not in jobs:
        print(f"usage: referee_figures.py {'|'.join(jobs)}", file=sys.stderr)
        return 2
    jobs[argv[0]]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
