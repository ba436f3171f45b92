#!/usr/bin/env python3
"""Benchmark the fabric model (not a test): build + validate + load estimate at 16,384 GPUs
for both fabrics, each in a fresh process so peak memory is its own; then the model against
a straightforward networkx all-pairs shortest-path approach at 1,024 GPUs.

    .venv/bin/python scripts/bench/fabric_model.py [--json]
Targets (issue #3): < 10 s and < 2 GiB per fabric at 16,384 GPUs; >= 20x faster than networkx.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

LARGE = ("zcube:n=128", "roft:gpus=16384,radix=128")
MEDIUM = ("zcube:n=32", "roft:gpus=1024,radix=32")


def one(spec: str) -> dict:
    """Runs inside a child process."""
    from testbed.fabric import build_fabric
    from testbed.fabric.load import estimate, pattern
    from testbed.fabric.validate import validate

    t0 = time.perf_counter()
    fab = build_fabric(spec)
    t1 = time.perf_counter()
    rep = validate(fab)
    t2 = time.perf_counter()
    res = estimate(fab, pattern(fab, "rank-shifted"))
    t3 = time.perf_counter()
    return {
        "spec": spec,
        "gpus": fab.n_gpus,
        "build_s": t1 - t0,
        "validate_s": t2 - t1,
        "load_s": t3 - t2,
        "total_s": t3 - t0,
        "valid": rep.ok,
        "max_link_util": float(res.util.max()),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def networkx_baseline(spec: str) -> dict:
    """The straightforward approach the model replaces: a networkx graph whose nodes are GPU
    ports (GPUs do not forward) and switches; all-pairs shortest paths from every GPU port;
    then reachability, diameter and average path length over GPU pairs, and the load of the
    same traffic routed along the first shortest path of each pair."""
    import networkx as nx

    from testbed.fabric import build_fabric
    from testbed.fabric.load import pattern

    fab = build_fabric(spec)
    t0 = time.perf_counter()
    G = nx.Graph()

    def name(p):
        return fab.ports[p].name if fab.ports[p].node < fab.n_gpus else fab.nodes[fab.ports[p].node].name

    for l in fab.links:
        G.add_edge(name(l.a), name(l.b))
    gpu_ports = [[p.name for p in fab.ports if p.node == g] for g in range(fab.n_gpus)]
    sources = [p for ports in gpu_ports for p in ports]
    paths = {src: nx.single_source_shortest_path(G, src) for src in sources}
    diameter, total, pairs, best = 0, 0, 0, {}
    for a in range(fab.n_gpus):
        for b in range(fab.n_gpus):
            if a == b:
                continue
            cands = [paths[pa][pb] for pa in gpu_ports[a] for pb in gpu_ports[b] if pb in paths[pa]]
            if not cands:
                raise RuntimeError(f"{a}->{b} unreachable")
            p = min(cands, key=len)
            best[(a, b)] = p
            diameter = max(diameter, len(p) - 2)
            total += len(p) - 1
            pairs += 1
    t = pattern(fab, "rank-shifted")
    load = {}
    for a, b in zip(t.src.tolist(), t.dst.tolist()):
        p = best[(a, b)]
        for u, v in zip(p, p[1:]):
            load[(u, v)] = load.get((u, v), 0) + 1
    return {
        "spec": spec,
        "networkx_s": time.perf_counter() - t0,
        "diameter_switches": diameter,
        "avg_path_links": total / pairs,
    }


def child(spec: str, fn: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", fn, spec], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        fn, spec = args.child
        print(json.dumps({"one": one, "nx": networkx_baseline}[fn](spec)))
        return
    rows = [child(spec, "one") for spec in LARGE]
    cmp = []
    for spec in MEDIUM:
        model, nxr = child(spec, "one"), child(spec, "nx")
        cmp.append(
            {
                "spec": spec,
                "model_s": model["total_s"],
                "networkx_s": nxr["networkx_s"],
                "speedup": nxr["networkx_s"] / model["total_s"],
            }
        )
    if args.json:
        print(json.dumps({"large": rows, "vs_networkx": cmp}, indent=2))
        return
    print(
        f"{'spec':<28} {'GPUs':>6} {'build s':>8} {'validate s':>10} {'load s':>7} {'total s':>8} {'peak MiB':>9}  target <10 s, <2048 MiB"
    )
    for r in rows:
        ok = r["total_s"] < 10 and r["peak_rss_mib"] < 2048 and r["valid"]
        print(
            f"{r['spec']:<28} {r['gpus']:>6} {r['build_s']:>8.2f} {r['validate_s']:>10.2f} {r['load_s']:>7.2f}"
            f" {r['total_s']:>8.2f} {r['peak_rss_mib']:>9.0f}  {'met' if ok else 'MISSED'}"
        )
    print()
    print(f"{'spec':<28} {'model s':>8} {'networkx s':>10} {'speedup':>8}  target >= 20x")
    for c in cmp:
        print(
            f"{c['spec']:<28} {c['model_s']:>8.2f} {c['networkx_s']:>10.2f} {c['speedup']:>7.1f}x  "
            f"{'met' if c['speedup'] >= 20 else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
