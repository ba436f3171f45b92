"""Run a resolved experiment in ns-3 at real scale: no root, no emulation, the same run folder.

Why: the emulation is scaled (a frame stands for MBs of real data) and needs root; ns-3 with
real 4 KB packets at real rates answers the questions about queues in real bytes. Everything but
the network comes from the emulation's own pure functions, so the two engines run one
experiment: the resolved plan and QPs (resolve.py, at real scale), the flow entries
(runfolder.flows_document over fabric/tables and openflow), the schedule (schedule.messages) and
the scenario (referee/scenario.build over that folder). ns-3's outputs are written as the raw
records the analysis reads (transfers.jsonl, queues.jsonl, counters.json, drops.json), so
`zlab report`, `zlab compare` and the plots work on either engine. Repeats run concurrently,
one ns-3 process each, up to the machine's cores.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..congestion import params as congestion
from ..emulation import runfolder
from ..errors import UserInputError
from ..fabric import build_fabric
from ..records import write_json
from ..referee import binary, scenario, simulate
from . import schedule
from .resolve import Experiment, FabricRun, Repeat

# today's transport in ns-3 (scenario.TRANSPORT: the agent's rules restated), named in the report
TRANSPORT_MODE = f"window {scenario.TRANSPORT['window_pkts']} packets, no congestion control"
ENGINES = ("emulation", "ns3")


def congestion_on(spec: dict) -> bool:
    """Whether the spec asks for anything of the `congestion:` section: an untouched section (every
    field at its default) runs today's transport exactly, so earlier runs stay comparable."""
    section = spec.get("congestion") or {}
    return congestion.validate(section) != congestion.defaults()


def switch_port_rates(spec: dict) -> dict[str, list[float]]:
    """Every fabric's switches with the rates of their cabled ports (real bit/s), for the buffer check."""
    rates: dict[str, list[float]] = {}
    for label, fabric_spec in spec["fabrics"].items():
        fab = build_fabric(fabric_spec)
        for p in fab.ports:
            link = int(fab.port_link[p.id])
            if link >= 0 and fab.nodes[p.node].role == "switch":
                rates.setdefault(f"{label} {fab.nodes[p.node].name}", []).append(float(fab.links[link].rate_bps))
    return rates


def extra_params(spec: dict) -> dict[str, int]:
    """ns-3 program params added to every scenario beyond today's transport: the `congestion:`
    section's (testbed/congestion/params.ns3_params) when it asks for anything, else none."""
    if not congestion_on(spec):
        return {}
    return congestion.ns3_params(spec["congestion"])


def transport_mode(spec: dict) -> str:
    """The transport ns-3 runs, for the report's setup line."""
    if not congestion_on(spec):
        return TRANSPORT_MODE
    c = congestion.validate(spec["congestion"])
    return f"{congestion.describe(c)}; links {c['link_delay_ns']} ns, switch latency {c['switch_latency_ns']} ns"


def with_params(text: str, params: dict[str, int]) -> str:
    """The scenario text with `param` lines added after its own (the program reads params before
    the topology; a later param of the same name replaces the earlier one)."""
    if not params:
        return text
    lines = text.splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("param "))
    add = [f"param {k} {int(v)}" for k, v in params.items()]
    return "\n".join(lines[: last + 1] + add + lines[last + 1 :]) + "\n"


def refuse(spec: dict) -> None:
    """What engine ns3 cannot run, refused before anything is resolved or written: failures (no
    controller or failure injection in ns-3) and a referee (it replays an emulation run in ns-3)."""
    failing = sorted(lab for lab, events in spec["failures"]["events"].items() if events)
    if failing:
        raise UserInputError(
            f"engine ns3 does not simulate failures (failures.events for {', '.join(failing)}): run them in the emulation"
        )
    if spec["referee"]["scales"]:
        raise UserInputError("referee.scales replays an emulation run in ns-3; an engine ns3 run is ns-3 already")
    if congestion_on(spec):  # every switch's buffer must leave PFC a shared pool
        congestion.ns3_params(spec["congestion"], switch_port_rates(spec))


def run_experiment(
    exp: Experiment, results_dir: str = "results", run_id: str | None = None, log=print, show_progress: bool = True
) -> tuple[Path, str]:
    """Run every fabric's repeats in ns-3; returns (run folder, status). The folder has the
    emulation run's shape: experiment.json, run.json, <fabric>/{fabric,flows,run}.json and
    raw/rep<k>/, then tables, plots, metrics and report.md."""
    from ..measure import report

    if exp.spec.get("engine") != "ns3":
        raise UserInputError(f"engine {exp.spec.get('engine')!r}: this runner runs engine ns3")
    refuse(exp.spec)
    ok, what = binary.status()
    if not ok:  # refuse before writing anything
        raise UserInputError(f"engine ns3 needs the compiled ns-3 program: {what}")
    exe = binary.build(log=log)
    run_id = run_id or f"run-{dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}"
    root = Path(results_dir) / run_id
    root.mkdir(parents=True, exist_ok=False)
    write_json(root / "experiment.json", exp.resolved(), sort_keys=False)
    write_json(
        root / "run.json",
        {
            "run_id": run_id,
            "engine": "ns3",
            "transport": transport_mode(exp.spec),
            "congestion": congestion_on(exp.spec),
            "status": "running",
            "git_sha": runfolder.git_sha(),
            "versions": runfolder.versions() | {"ns3": "3.37 (Debian libns3-dev)", "ns3_program": str(exe)},
            "fabrics": exp.spec["fabrics"],
            "started": dt.datetime.now().isoformat(timespec="seconds"),
        },
    )
    status, cause = "complete", None
    t_start = time.monotonic()
    jobs = []
    for fr in exp.fabrics.values():
        fdir = runfolder.create(str(root), fr.label, fr.fabric, {"emulation": fr.emulation.to_dict(), "miswire": None})
        runfolder.update(fdir, engine="ns3", calibration=None, replays=[])
        jobs += [(fr, rep, fdir) for rep in fr.repeats]
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    log(
        f"[zlab] engine ns3 at real scale ({transport_mode(exp.spec)}): {len(jobs)} repeat(s) over "
        f"{len(exp.fabrics)} fabric(s), {workers} at a time"
    )
    lock = threading.Lock()
    done = [0]

    def one(job) -> dict:
        fr, rep, fdir = job
        rec = run_repeat(exp, fr, rep, fdir)
        with lock:
            done[0] += 1
            if show_progress or rec["status"] != "complete":
                log(
                    f"[zlab]   ns3 {fr.label} {rep.index + 1}/{len(fr.repeats)} ({done[0]}/{len(jobs)}): "
                    f"{rec['completed']}/{rec['messages']} messages, {rec['real_gb']:.2f} real GB, "
                    f"{rec['wall_s']:.1f} s wall ({rec['status']})"
                )
        return rec

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(one, jobs))
        for fr in exp.fabrics.values():
            recs = [r for r in results if r["fabric"] == fr.label]
            replays = [{"repeat": r["repeat"], "status": r["status"], "voided_attempts": []} for r in recs]
            runfolder.update(
                root / fr.label, replays=replays, status="complete", ns3_wall_s=[r["wall_s"] for r in recs]
            )
        if any(r["status"] != "complete" for r in results):
            status = "incomplete"
    except KeyboardInterrupt:
        status = "incomplete"
        log("[zlab] interrupted: recorded data kept, run marked incomplete")
    except BaseException as exc:
        status, cause = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        runfolder.update(
            root,
            status=status,
            cause=cause,
            wall_s=time.monotonic() - t_start,
            finished=dt.datetime.now().isoformat(timespec="seconds"),
        )
    report.build(root)
    return root, status


def run_repeat(exp: Experiment, fr: FabricRun, rep: Repeat, fdir: Path, timeout_s: float = 24 * 3600) -> dict:
    """One repeat in ns-3: its plan and schedule written as the emulation writes them, the
    scenario built from the folder, ns-3 run, its outputs written as raw records."""
    raw = fdir / "raw" / f"rep{rep.index}"
    raw.mkdir(parents=True)
    plan = rep.plan
    write_json(
        raw / "plan.json",
        {
            "summary": plan.summary(),
            "seed": rep.seed,
            "instances": [vars(i) for i in plan.instances],
            "requests": [vars(r) for r in plan.requests],
            "transfers": [vars(t) for t in plan.transfers],
        },
    )
    fab = fr.fabric
    ports = [p.name for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0]
    write_json(raw / "ports.json", ports)
    msgs = schedule.messages(rep)
    write_json(raw / "schedule.json", {"t0_ns": 0, "messages": msgs}, sort_keys=False)
    write_json(raw / "run_clock.json", {"t0_ns": 0, "messages": len(msgs), "clock": "ns-3 simulated"})
    experiment = json.loads((fdir.parent / "experiment.json").read_text())
    # dilation 1: the scale "same" of a real-scale run is real; links serialise as a real network's
    sc = scenario.build(
        fdir,
        experiment,
        rep.index,
        "same",
        deadline_s=plan.horizon_s + exp.spec["timeout_s"],
        link_model="serialiser",
    )
    extra = extra_params(exp.spec)
    if extra:  # ECN marking draws: each repeat its own, as the emulation's marker draws afresh
        extra["rng_seed"] = rep.seed
    sc.text = with_params(sc.text, extra)
    res = simulate.run(sc, raw / "ns3", log=lambda *_: None, timeout_s=timeout_s)
    _write_records(res, raw, ports, fab)
    completed = int(res.messages["t_complete_ns"].notna().sum())
    return {
        "fabric": fr.label,
        "repeat": rep.index,
        "messages": len(msgs),
        "completed": completed,
        "status": "complete" if completed == len(msgs) else "timeout",
        "real_gb": sum(m["real_bytes"] for m in msgs) / 1e9,
        "wall_s": res.wall_s,
    }


def _write_records(res: simulate.Result, raw: Path, ports: list[str], fab) -> None:
    """ns-3's outputs as the raw records the analysis reads (units: real, the run's dilation is 1)."""
    m = res.messages
    with open(raw / "transfers.jsonl", "w") as f:
        for r in m[m["t_complete_ns"].notna()].itertuples():
            rec = {
                "clock": "ns-3 simulated",
                "msg_id": int(r.msg),
                "qp": int(r.qp),
                "src": r.src_port,
                "dst": r.dst_port,
                "src_gpu": r.src_port.rsplit("-", 1)[0],
                "dst_gpu": r.dst_port.rsplit("-", 1)[0],
                "sport": int(r.sport),
                "size_bytes": int(r.size_bytes),
                "real_bytes": int(r.real_bytes),
                "packets": int(r.packets),
                "req": int(r.req),
                "shard": int(r.shard),
                # ns-3's NIC posts every message at its due time (no agent to be late)
                "t_due_ns": int(r.t_due_ns),
                "t_post_ns": int(r.t_due_ns),
                "t_first_tx_ns": int(r.t_first_tx_ns),
                "t_first_rx_ns": int(r.t_first_rx_ns),
                "t_last_rx_ns": int(r.t_last_rx_ns),
                "t_complete_ns": int(r.t_complete_ns),
                "integrity_ok": bool(int(r.received_bytes) == int(r.size_bytes)),
                "qp_retransmits": int(r.qp_retransmits),
                "qp_timeouts": int(r.qp_timeouts),
                "qp_naks": int(r.qp_naks),
                "qp_migrations": 0,
            }
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    _write_queues(res, raw, ports)
    pc = res.ports.set_index("port")
    qps = (
        m.groupby(["qp", "src_port", "dst_port", "sport"])
        .agg(retransmits=("qp_retransmits", "max"), timeouts=("qp_timeouts", "max"), naks=("qp_naks", "max"))
        .reset_index()
    )
    write_json(
        raw / "counters.json",
        {
            "engine": "ns3",
            # per-QP transport counters as ns-3 counted them; bytes are not counted per QP by the
            # program, so the link-bytes comparison with the model is not made for ns-3 runs
            "qps": [
                {
                    "src": q.src_port,
                    "dst": q.dst_port,
                    "home": [q.src_port, q.dst_port],
                    "sport": int(q.sport),
                    "requester": {
                        "retransmits": int(q.retransmits),
                        "timeouts": int(q.timeouts),
                        "naks": int(q.naks),
                        "bytes": None,
                    },
                    "responder": {"acks": None, "naks": int(q.naks)},
                }
                for q in qps.itertuples()
            ],
            "ports": {},
        },
    )
    host = {p.name: int(pc.loc[p.name, "drops"]) for p in fab.ports if p.name in pc.index and p.name not in ports}
    write_json(raw / "drops.json", {"before": {}, "after": {}, "delta": {"ns3_nic_ports": host}, "unreadable": []})


def _write_queues(res: simulate.Result, raw: Path, ports: list[str]) -> None:
    """queues.jsonl as the collector writes it: one row per sample of every switch egress port
    (ns-3 samples at k x period from 0 and writes only non-empty queues; the rest are 0). ns-3
    counts sent bytes and drops per port only at the end: rows carry them as 0 and the last row
    the totals, and the header says so (counters_at "end": no per-window utilisation)."""
    n = int(res.summary["queue_samples"])
    period = int(res.summary["sample_period_ns"])
    col = {p: j for j, p in enumerate(ports)}
    s = res.samples
    b = [[0] * len(ports) for _ in range(n)]
    q = [[0] * len(ports) for _ in range(n)]
    for r in s.itertuples():
        k = int(r.t_ns) // period
        if 0 <= k < n and r.port in col:
            b[k][col[r.port]] = int(r.backlog_bytes)
            q[k][col[r.port]] = int(r.qlen_pkts)
    pc = res.ports.set_index("port")
    tx = [int(pc.loc[p, "tx_bytes"]) if p in pc.index else 0 for p in ports]
    dr = [int(pc.loc[p, "drops"]) if p in pc.index else 0 for p in ports]
    zero = [0] * len(ports)
    with open(raw / "queues.jsonl", "w") as f:
        f.write(
            json.dumps(
                {
                    "type": "header",
                    "clock": "ns-3 simulated",
                    "ports": ports,
                    "period_ms": period / 1e6,
                    "counters_at": "end",
                }
            )
            + "\n"
        )
        for k in range(n):
            last = k == n - 1
            row = {"t_ns": k * period, "b": b[k], "q": q[k], "d": dr if last else zero, "x": tx if last else zero}
            f.write(json.dumps(row) + "\n")
        f.write(json.dumps({"type": "footer", "samples": n, "late": 0}) + "\n")


def check_engine(name: str) -> str:
    """The engine named on the command line, or one line saying what is allowed."""
    if name not in ENGINES:
        raise UserInputError(f"--engine {name!r}: one of {', '.join(ENGINES)}")
    return name
