"""Every generated figure: where its numbers come from and how it is rendered.

Two sources. A *record* (results/reference/records/NAME.json) holds what a producing command printed;
``scripts/docs_figures.py measure NAME`` runs the command and rewrites it. A *run* figure is computed
from a run folder shipped under results/reference/. Rendering reads files only, so ``check`` is fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import records
from .referee_tables import TABLES
from .runtable import HEADLINE, draws_table, run_table

ZLAB = ".venv/bin/zlab"
PY = ".venv/bin/python"
# docs/serving-capacity.md's emulation examples, tests/root/test_serving_capacity_e2e.py's two cases: a
# pattern the network binds (25 Gb/s per GPU, rank-shifted KV across ROFT's spines, a 1 s TTFT SLO) and a
# control where compute binds (100 Gb/s per GPU, 0.3 s); short windows keep the wall time in minutes


def emu_capacity_args(gbps: int, ttft: str, rate_min: str, rate_max: str, iterations: str, repeats: str) -> tuple:
    return (
        "--set",
        "workload.model=llama3-8b",
        "--set",
        "deployment.mapping=rank-shifted",
        "--set",
        f"fabrics.roft=roft:gpus=16,gpus_per_server=4,segments=2,gpu_gbps={gbps}",
        "--set",
        f"fabrics.zcube=zcube:n=4,gpus_per_server=4,gpu_gbps={gbps}",
        "--set",
        "emulation.rate_scale=1e-4",
        "--slo",
        f"ttft={ttft}",
        "--requests",
        "30",
        "--window-slos",
        "2",
        "--repeats",
        repeats,
        "--iterations",
        iterations,
        "--rate-min",
        rate_min,
        "--rate-max",
        rate_max,
    )


def emu_capacity_command(args: tuple, results: str) -> tuple:
    """`zlab capacity` on the emulation and the flow engine with one example's arguments."""
    return (
        ZLAB,
        "capacity",
        "--network",
        "emulation",
        "--network",
        "flow",
        *args,
        "--no-progress",
        "--results",
        results,
    )


EMU_CAPACITY_ARGS = emu_capacity_args(25, "1", "2", "9", "2", "5")
EMU_CONTROL_ARGS = emu_capacity_args(100, "0.3", "1", "17", "3", "3")
LAYOUT_SPECS = [
    "zcube:n=32,gpus_per_server=8",
    "roft:gpus=1024,gpus_per_server=8,radix=64,tiers=2",
    "roft:gpus=1024,gpus_per_server=8,radix=32,tiers=3",
    "zcube:n=128,gpus_per_server=8",
    "roft:gpus=16384,gpus_per_server=8,radix=256,tiers=2",
    "roft:gpus=16384,gpus_per_server=8,radix=128,tiers=3",
]
MULTIPLANE_SPECS = [
    "zcube-planes:planes=2,n=128",
    "zcube-planes:planes=4,n=128",
    "zcube-planes:planes=8,n=128",
    "zcube-planes:planes=2,n=184,assign=nic",
]


@dataclass(frozen=True)
class Figure:
    name: str
    what: str
    argv: tuple[str, ...] = ()  # the producing command of a record figure
    root: bool = False  # needs root: measured under flock /tmp/zlab-heavy.lock
    heavy: bool = False  # no root, but minutes of CPU: measured under the same lock
    fmt: str = "text"  # how a measured record's output is shown: text (a code block) or markdown
    run: str | None = None  # a shipped run folder, for run figures
    keys: tuple[str, ...] | None = None
    table: str | None = None  # a run figure drawn by "draws" (what a draw does) or referee_tables.TABLES[table]
    timeout_s: float = 900
    exit_ok: tuple[int, ...] = (0,)  # exit codes that are results (a verdict command's "found") rather than failures

    @property
    def command(self) -> str:
        return " ".join(self.argv)


FIGURES = {
    f.name: f
    for f in [
        Figure(
            "fabric-show",
            "a fabric's counts, diameter and validation",
            (ZLAB, "fabric", "show", "zcube:n=4,gpus_per_server=4"),
        ),
        Figure(
            "cost",
            "switch, cable and optics inventory and cost at 1,024 and 16,384 GPUs",
            (ZLAB, "cost", "--gpus", "1024,16384"),
        ),
        Figure(
            "load-matrix",
            "flow-level max link utilisation per fabric and pattern over 20 draws",
            (PY, "scripts/docsgen/load_matrix.py"),
            fmt="markdown",
        ),
        Figure(
            "fabric-model-bench",
            "model build, validate and load time and memory; speed-up over networkx",
            (PY, "scripts/bench/fabric_model.py"),
        ),
        Figure(
            "deadlock",
            "cyclic buffer dependencies in ZCube and ROFT tables, healthy and after every pair of fabric cable failures",
            (
                ZLAB,
                "deadlock",
                "zcube:n=4,gpus_per_server=4",
                "roft:gpus=16,gpus_per_server=4",
                "--failures",
                "cable-pairs",
            ),
            exit_ok=(0, 3),
        ),
        Figure(
            "deadlock-64",
            "the same check on ZCube(8,2) and a 64-GPU ROFT, single cable failures and 500 sampled cable pairs",
            (
                ZLAB,
                "deadlock",
                "zcube:n=8,gpus_per_server=8",
                "roft:gpus=64,gpus_per_server=8",
                "--failures",
                "cable-pairs",
                "--sample",
                "500",
            ),
            exit_ok=(0, 3),
        ),
        Figure(
            "flowsim-1024",
            "KV completion at 1,024 GPUs on the flow-level engine, ZCube against a three-tier ROFT",
            (ZLAB, "flowsim", "zcube:n=32,gpus_per_server=8", "roft:gpus=1024,gpus_per_server=8,radix=32,tiers=3"),
        ),
        Figure(
            "flowsim-bench",
            "the flow-level engine's wall time and memory on KV schedules at 64 and 1,024 GPUs",
            (PY, "scripts/bench/flowsim.py", "--sizes", "64,1024"),
        ),
        Figure(
            "congestion-compare",
            "ZCube against ROFT in ns-3 with lossless PFC, ECN and DCQCN: pauses, marks, KV completion",
            (PY, "scripts/bench/congestion_compare.py", "--repeats", "5", "--requests", "40"),
            heavy=True,
            timeout_s=7200,
        ),
        Figure(
            "packet-engine-validations",
            "the packet engine's PFC, ECN and DCQCN against the Python references on hand-built networks",
            (PY, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/unit/test_packet_engine_cc.py"),
        ),
        Figure(
            "dcqcn-engines",
            "the same incast with ECN + DCQCN in the emulation and in ns-3, at HPCC's real parameters",
            (PY, "scripts/bench/dcqcn_engines.py", "--repeats", "3"),
            root=True,
            timeout_s=3600,
        ),
        Figure(
            "dcqcn-timing",
            "when DCQCN's cuts come on the incast, in the emulation and in ns-3",
            (PY, "scripts/bench/dcqcn_timing.py", "--repeats", "2"),
            root=True,
            timeout_s=1800,
        ),
        Figure(
            "lossless-incast",
            "an incast in the emulation's lossless mode: pauses, drops, reaction time",
            (PY, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/root/test_emulation_lossless_e2e.py"),
            root=True,
            timeout_s=1800,
        ),
        Figure(
            "lossless-engines",
            "lossless mode in the emulation and in ns-3 on the same incast and rank-shifted pair",
            (PY, "scripts/bench/lossless_engines.py", "--repeats", "3"),
            root=True,
            timeout_s=3600,
        ),
        Figure(
            "ns3-speed",
            "engine ns3's wall and CPU seconds per real GB, one repeat and repeats on every core, with and without PFC/ECN/DCQCN",
            (PY, "scripts/bench/ns3_engine.py", "--requests", "10"),
            heavy=True,
        ),
        Figure(
            "flowsim-simgrid",
            "the flow engine against SimGrid on the same schedule and routes, at 64 and 1,024 GPUs",
            (PY, "scripts/bench/flowsim_simgrid.py", "--sizes", "64,1024"),
        ),
        Figure(
            "flow-ns3",
            "the flow-level engine against ns-3 on the same 16- and 64-GPU experiments, QP-ordered",
            (PY, "scripts/bench/flow_ns3.py", "--repeats", "3", "--requests", "40"),
            heavy=True,
        ),
        Figure(
            "flowsim-bench-16384",
            "the flow-level engine at 16,384 GPUs: one KV transfer per prefill GPU",
            (PY, "scripts/bench/flowsim.py", "--sizes", "16384", "--rounds", "1"),
            heavy=True,
        ),
        Figure(
            "resilience-1024",
            "every single failure at 1,024 GPUs, per repair policy",
            (ZLAB, "resilience", "zcube:n=32,gpus_per_server=8", "roft:gpus=1024,gpus_per_server=8,radix=32,tiers=3"),
        ),
        Figure(
            "resilience-16384",
            "100 sampled single failures at 16,384 GPUs, per repair policy",
            (
                ZLAB,
                "resilience",
                "zcube:n=128,gpus_per_server=8",
                "roft:gpus=16384,gpus_per_server=8,radix=128",
                "--sample",
                "100",
                "--seed",
                "0",
            ),
        ),
        Figure(
            "layout", "machine-room layouts of three fabrics at 1,024 and 16,384 GPUs", (ZLAB, "layout", *LAYOUT_SPECS)
        ),
        Figure("multiplane", "multi-plane ZCube at 32,768 to 131,072 GPUs", (ZLAB, "multiplane", *MULTIPLANE_SPECS)),
        Figure(
            "serving-capacity",
            "serving capacity per GPU at the default SLOs, fixed-rate network, 5 repeats",
            (ZLAB, "capacity", "--no-progress", "--results", "/tmp/zlab-docs-capacity"),
        ),
        Figure(
            "serving-article-32",
            "the article's 32-GPU experiment: 100 vs 200 Gb/s per GPU, both fabrics, flow engine, 5 repeats",
            (PY, "scripts/bench/article_serving.py", "32gpu", "--repeats", "5", "--results", "/tmp/zlab-docs-article"),
            heavy=True,
            timeout_s=3000,
        ),
        *(
            Figure(
                f"serving-article-1024-{trace}",
                f"the article's 1,024-GPU experiment: ROFT against ZCube, Azure {trace} trace, flow engine, 2 repeats",
                (
                    PY,
                    "scripts/bench/article_serving.py",
                    "1024gpu",
                    "--trace",
                    trace,
                    "--repeats",
                    "2",
                    "--jobs",
                    "2",
                    "--results",
                    "/tmp/zlab-docs-article1024",
                ),
                heavy=True,
                timeout_s=3000,
            )
            for trace in ("code", "conversation")
        ),
        Figure(
            "capacity-1024-jobs",
            "zlab capacity's search at 1,024 GPUs, both fabrics, in two worker processes: wall time, peak memory, capacities",
            (PY, "scripts/bench/capacity_1024.py", "--jobs", "2"),
            heavy=True,
            timeout_s=1500,
        ),
        Figure(
            "serving-capacity-emulation",
            "capacity on the live emulated fabric beside the flow engine, 16 GPUs at 25 Gb/s per GPU, the docs example (its wall time is the benchmark)",
            emu_capacity_command(EMU_CAPACITY_ARGS, "/tmp/zlab-docs-capemu"),
            root=True,
            timeout_s=3600,
        ),
        Figure(
            "serving-capacity-emulation-control",
            "the control: the same fabrics at 100 Gb/s per GPU and a 0.3 s TTFT SLO, where compute binds",
            emu_capacity_command(EMU_CONTROL_ARGS, "/tmp/zlab-docs-capemu-control"),
            root=True,
            timeout_s=3600,
        ),
        Figure(
            "test-suite",
            "the whole test suite's size and duration",
            ("bash", "scripts/test.sh"),
            root=True,
            timeout_s=3600,
        ),
        Figure("provision", "provisioning time, fresh and repeated", ("bash", "scripts/provision.sh"), root=True),
        Figure(
            "emulation-bench",
            "bring-up, reachability and teardown times against plain Mininet",
            (PY, "scripts/bench/emulation.py"),
            root=True,
        ),
        Figure(
            "emulation-sizes",
            "what fits this machine: bring-up time, peak memory and idle CPU per fabric size (the size check's record)",
            (PY, "scripts/bench/emulation.py", "--show-costs", "testbed/emulation/size_costs.json"),
            fmt="markdown",
        ),
        Figure(
            "datapath-bench",
            "OVS datapath options: forwarding rate per core and whether shaping holds",
            (PY, "scripts/bench/datapath.py"),
            root=True,
            fmt="markdown",
        ),
        Figure("transport-bench", "transport goodput and agent cost", (PY, "scripts/bench/transport.py"), root=True),
        Figure(
            "capacity",
            "switch forwards and agent frames per core-second at five link rates",
            (ZLAB, "doctor", "--capacity"),
            root=True,
        ),
        Figure("machine-steal", "hypervisor steal and what it does to a replay", (), root=True, fmt="markdown"),
        Figure(
            "queue-faithful",
            "the queue-faithful preset's run on this machine",
            (ZLAB, "run", "--preset", "queue-faithful", "--budget-s", "900"),
            root=True,
            timeout_s=1800,
        ),
        Figure(
            "failures-compare",
            "injected failures: detection, install and recovery per fabric",
            (PY, "scripts/failures_compare.py"),
            root=True,
            timeout_s=7200,
        ),
        Figure(
            "referee-oracles",
            "the queueing oracles in ns-3, both link models, with and without the NIC pacer",
            (PY, "scripts/docsgen/referee_figures.py", "oracles"),
            fmt="markdown",
        ),
        Figure(
            "referee-link-model",
            "the mini-run refereed with ns-3's serialising links and with the bucket",
            (PY, "scripts/docsgen/referee_figures.py", "link-model"),
            fmt="markdown",
        ),
        Figure(
            "referee-baseline",
            "ns-3's TCP beside zlab's transport on the mini-run",
            (PY, "scripts/docsgen/referee_figures.py", "baseline"),
            fmt="markdown",
        ),
        Figure(
            "referee-routing",
            "the routing oracle on shipped, three-tier, old-hash and shuffled tables",
            (PY, "scripts/docsgen/referee_figures.py", "routing"),
            fmt="markdown",
        ),
        Figure(
            "referee-same",
            "the referee's reference runs at the emulation's scale",
            run="results/reference/referee",
            table="referee-same",
        ),
        Figure(
            "referee-real",
            "the referee's reference runs at real scale",
            run="results/reference/referee",
            table="referee-real",
        ),
        Figure(
            "dev-check-time",
            "the fast loop's wall time, steps and tests",
            (PY, "scripts/docsgen/timing.py", "check"),
            heavy=True,
        ),
        Figure(
            "dev-unit-time",
            "the whole unit tier's wall time, serially",
            (PY, "scripts/docsgen/timing.py", "unit"),
            heavy=True,
            timeout_s=1800,
        ),
        Figure(
            "longest-functions",
            "the ten longest functions of testbed, controllers and traffic",
            (PY, "scripts/dev/longest_functions.py", "--top", "10"),
        ),
        Figure("default-run", "the default comparison, every headline metric", run="results/reference/default-run"),
        Figure(
            "default-run-headline",
            "the default comparison, KV completion and TTFT",
            run="results/reference/default-run",
            keys=HEADLINE,
        ),
        Figure(
            "default-run-draws",
            "the default comparison: what an ECMP draw does, per fabric",
            run="results/reference/default-run",
            table="draws",
        ),
        Figure(
            "bimodal-run-draws",
            "the recorded bimodal run (tests/data/bimodal-run): modes and every repeat",
            (PY, "scripts/docsgen/draws_figures.py", "bimodal"),
            fmt="markdown",
        ),
        Figure(
            "precision-draws",
            "the planner's number of draws for a stated precision on the default spec",
            (PY, "scripts/docsgen/draws_figures.py", "precision"),
        ),
    ]
}


def provenance(fig: Figure, rec: dict) -> str:
    when = rec["date"][:10]
    sha = f"`{(rec.get('git_sha') or '?')[:7]}`" + (
        " plus uncommitted edits" if str(rec.get("git_sha")).endswith("-dirty") else ""
    )
    if rec.get("transcribed_from"):
        redo = f"`scripts/docs_figures.py measure {fig.name}`" if fig.argv else "no producing command yet"
        return (
            f"*Measured {when} on {rec['machine']}; copied from {rec['transcribed_from']}, not yet re-measured"
            f" ({redo}).*"
        )
    took = "" if rec.get("elapsed_s") is None else f", {rec['elapsed_s']:.0f} s"
    return (
        f"*Measured {when} on {rec['machine']}, git {sha}{took}: "
        f"`{rec['command']}` (`scripts/docs_figures.py measure {fig.name}`).*"
    )


def render(root: Path, name: str) -> str:
    """The Markdown body of a block; raises KeyError for an unknown name, FileNotFoundError for no record."""
    fig = FIGURES[name]
    if fig.table == "draws":
        return draws_table(root / fig.run) + f"\n\n*From the shipped run folder `{fig.run}/`.*"
    if fig.table is not None:
        return TABLES[fig.table](root / fig.run) + f"\n\n*From the shipped summaries under `{fig.run}/`.*"
    if fig.run is not None:
        return run_table(root / fig.run, fig.keys) + f"\n\n*From the shipped run folder `{fig.run}/`.*"
    rec = records.load(root, name)
    if rec is None:
        raise FileNotFoundError(f"no record for {name}: run scripts/docs_figures.py measure {name}")
    out = rec["output"].rstrip()
    fmt = rec.get("format", fig.fmt)
    body = out if fmt == "markdown" else f"```text\n{out}\n```"
    return f"{body}\n\n{provenance(fig, rec)}"
