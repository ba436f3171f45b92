"""The article's serving experiments on zlab's closed-loop model, beside the article's figures.

    .venv/bin/python scripts/bench/article_serving.py 32gpu [--repeats 5] [--network flow] [--jobs N]
    .venv/bin/python scripts/bench/article_serving.py 1024gpu [--repeats 3] [--trace code|conversation] [--jobs N]

32gpu: a 32-GPU service at 100 and at 200 Gb/s per GPU (`gpu_gbps`, the NIC, not the rate scale),
on both fabrics; the article reports about +19 % throughput and -22 % TTFT from the faster NIC.
1024gpu: ROFT against ZCube at 1,024 GPUs; the article reports +15 % throughput and -40.6 % TTFT
P99 after its ROFT -> ZCube move (GLM-5.1 coding cluster).

Why a script around `zlab capacity` and not a new command: each experiment is a fixed set of
`zlab capacity` runs whose folders stay as they are (self-describing, in --results); this only
pairs their repeats (same seed per repeat index in every run) into gains with 95 % intervals, and
prints the curves of repeat 0 (offered load -> served requests/s/GPU, TTFT P99) so the docs can
show them. --jobs N is passed to every `zlab capacity` run (its (engine, fabric, repeat) bisections in N
worker processes; the same results as with 1). `zlab capacity` runs as `python -m testbed.cli` under
this interpreter with this checkout first on PYTHONPATH, so the script works from any checkout.
The published figures are quoted from the article with their context; what is and is
not comparable is in docs/serving-capacity.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from testbed.measure.stats import ci95  # noqa: E402

ZLAB = [sys.executable, "-m", "testbed.cli"]  # `zlab`, from this checkout (a worktree has no .venv of its own)
SERVING = ("--set", "deployment.tp=8", "--set", "workload.model=glm-4.5")  # the article's 32-GPU service: GLM at tp=8
TRACES = {"code": "azure-code", "conversation": "azure-conv"}
PUBLISHED = {
    "32gpu": "article, 32 GPUs, 100 -> 200 Gb/s per GPU: about +19 % throughput, -22 % TTFT",
    "1024gpu": "article, ~1,000 GPUs (GLM-5.1 coding), ROFT -> ZCube: +15 % throughput, -40.6 % TTFT P99",
}


def fabrics_32(gbps: int) -> tuple[str, ...]:
    return (
        "--set",
        f"fabrics.zcube=zcube:n=8,gpus=32,gpus_per_server=8,links_per_pair=2,gpu_gbps={gbps}",
        "--set",
        f"fabrics.roft=roft:gpus=32,gpus_per_server=8,gpu_gbps={gbps}",
    )


FABRICS_1024 = (  # the spec's instance counts do not grow with the fabric: 64 P + 64 D of tp=8 serve every GPU
    "--set",
    "deployment.prefill_instances=64",
    "--set",
    "deployment.decode_instances=64",
    "--set",
    "fabrics.zcube=zcube:n=32,gpus_per_server=8",
    "--set",
    "fabrics.roft=roft:gpus=1024,gpus_per_server=8,radix=32,tiers=3",
)


def capacity(args: list[str], results: str) -> dict:
    """One `zlab capacity` run; its capacity.json (the run folder is kept in `results`)."""
    cmd = [*ZLAB, "capacity", "--json", "--no-progress", "--results", results, *args]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads((Path(json.loads(out)["folder"]) / "capacity.json").read_text())


def values(run: dict, engine: str, fabric: str, key: str) -> list[float]:
    """Per repeat, in repeat order (the pairing key across runs)."""
    rows = sorted(
        (r for r in run["runs"] if r["engine"] == engine and r["fabric"] == fabric), key=lambda r: r["repeat"]
    )
    return [float(r[key]) for r in rows]


def fmt(s: dict, digits: int = 3) -> str:
    return f"{s['mean']:.{digits}f} ± {s['ci95']:.{digits}f}"


def pct(s: dict) -> str:
    return f"{s['mean'] * 100:+.1f} % ± {s['ci95'] * 100:.1f}"


def gain(new: list[float], old: list[float]) -> dict:
    """Paired relative change new/old - 1 per repeat, with its 95 % interval."""
    return ci95([n / o - 1 for n, o in zip(new, old, strict=True)])


def curves(run: dict, engine: str, label: str) -> list[str]:
    """Repeat 0's evaluated loads in increasing order: offered load, TTFT P99, the shares within
    each SLO (what the verdict reads), the mean KV transfer, verdict."""
    out = []
    for r in run["runs"]:
        if r["engine"] != engine or r["repeat"] != 0:
            continue
        for p in sorted(r["points"], key=lambda p: p["rate_per_gpu"]):
            out.append(
                f"{label:<14} {r['fabric']:<6} {p['rate_per_gpu']:>9.3f} {p['ttft_s']['p99']:>10.3f} "
                f"{p['within_slo']['ttft']:>8.1%} {p['within_slo']['tpot']:>8.1%} "
                f"{p['kv_wait_s']['measured_transfer_mean'] * 1e3:>8.2f} "
                f"{'meets' if p['meets_slo'] else 'fails'}"
            )
    return out


def report(runs: dict[str, dict], engine: str, experiment: str) -> list[str]:
    lines = [
        f"engine {engine}; capacity in requests/s per GPU at TTFT <= 2 s and TPOT <= 0.2 s (90 % each), "
        f"TTFT P99 in s at that capacity; mean ± 95 % interval over repeats"
    ]
    lines.append(f"{'run':<14} {'fabric':<6} {'capacity':>15} {'TTFT P99':>15}")
    for label, run in runs.items():
        for fab in ("zcube", "roft"):
            cap = ci95(values(run, engine, fab, "capacity_per_gpu_rps"))
            p99 = ci95(values(run, engine, fab, "ttft_p99_at_capacity_s"))
            lines.append(f"{label:<14} {fab:<6} {fmt(cap):>15} {fmt(p99):>15}")
    lines.append("")
    for label, run in runs.items():
        z, r = (values(run, engine, f, "capacity_per_gpu_rps") for f in ("zcube", "roft"))
        lines.append(f"{label}: capacity ZCube vs ROFT {pct(gain(z, r))} (paired by repeat)")
        if experiment == "1024gpu":  # the article's second figure: TTFT P99, each fabric at its own capacity
            z, r = (values(run, engine, f, "ttft_p99_at_capacity_s") for f in ("zcube", "roft"))
            lines.append(f"{label}: TTFT P99 at capacity ZCube vs ROFT {pct(gain(z, r))} (paired by repeat)")
    if experiment == "32gpu":
        for fab in ("zcube", "roft"):
            new = values(runs["200 Gb/s"], engine, fab, "capacity_per_gpu_rps")
            old = values(runs["100 Gb/s"], engine, fab, "capacity_per_gpu_rps")
            p_new = values(runs["200 Gb/s"], engine, fab, "ttft_p99_at_capacity_s")
            p_old = values(runs["100 Gb/s"], engine, fab, "ttft_p99_at_capacity_s")
            lines.append(
                f"{fab}: 100 -> 200 Gb/s capacity {pct(gain(new, old))}, TTFT P99 at capacity {pct(gain(p_new, p_old))}"
            )
    lines.append(PUBLISHED[experiment])
    lines.append("")
    lines.append(
        "curves, repeat 0 (offered load in requests/s per GPU; shares of requests within each SLO; KV = mean "
        "measured transfer in ms):"
    )
    lines.append(
        f"{'run':<14} {'fabric':<6} {'offered':>9} {'TTFT P99 s':>10} {'TTFT ok':>8} {'TPOT ok':>8} {'KV ms':>8} verdict"
    )
    for label, run in runs.items():
        lines += curves(run, engine, label)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("experiment", choices=("32gpu", "1024gpu"))
    ap.add_argument("--repeats", type=int, required=True, help="independent seeds per fabric and run")
    ap.add_argument("--network", default="flow", choices=("flow", "fixed-rate", "ns3"), help="engine (default flow)")
    ap.add_argument("--trace", default="code", choices=tuple(TRACES), help="1024gpu only: Azure trace (default code)")
    ap.add_argument("--results", default=str(ROOT / "results"), help="where the capacity run folders go")
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="passed to each `zlab capacity --jobs N`: its bisections in N worker processes (default 1)",
    )
    a = ap.parse_args(argv)
    if a.repeats < 2:
        ap.error("--repeats must be at least 2 (an interval needs two draws)")
    if a.jobs < 1:
        ap.error("--jobs must be at least 1")
    t0 = time.monotonic()
    common = [*SERVING, "--network", a.network, "--repeats", str(a.repeats), "--jobs", str(a.jobs)]
    if a.experiment == "32gpu":
        runs = {f"{g} Gb/s": capacity([*common, *fabrics_32(g)], a.results) for g in (100, 200)}
    else:
        runs = {a.trace: capacity([*common, *FABRICS_1024, "--set", f"workload.trace={TRACES[a.trace]}"], a.results)}
    for line in report(runs, a.network, a.experiment):
        print(line)
    print(f"wall {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
