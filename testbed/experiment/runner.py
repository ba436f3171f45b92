"""Run a resolved experiment: for each fabric, bring it up, calibrate, replay the planned KV
transfers while the collector samples every egress queue, tear down; then tables, plots and
the report.

One folder per run: results/<run>/{experiment.json, run.json, <fabric>/..., tables/, plots/,
report.md}. experiment.json is the resolved experiment, written once before anything starts;
everything after reads it. Ctrl-C stops cleanly: the fabric is torn down, what was recorded
stays, the run is marked incomplete. Any other failure marks it failed, with the cause.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from traffic import roce
from traffic.agent import Agent

from ..congestion import params as ccparams
from ..emulation import congestion as emcc
from ..emulation import failplan, losses, pauses, runfolder
from ..emulation.agents import port_spec, run_config
from ..emulation.calibrate import iperf3_udp
from ..emulation.config import LabFailure
from ..emulation.probes import LiveRun, prove_path
from ..emulation.up import LiveFabric, Terminated, raise_terminated
from ..errors import UserInputError
from ..fabric import failures
from ..records import JsonLines, read_json, read_jsonl, write_json
from . import schedule
from .quiet import wait_for_quiet
from .resolve import Experiment, FabricRun, Repeat

# The agent plays the NICs: on a 2-core machine shared with ovs-vswitchd and the kernel's
# softirq work it must not wait for a time slice when a message is due (measured: p99 release
# lateness 4-8 ms at nice 0 during traffic bursts). The collector samples on a schedule too.
AGENT_NICE, COLLECTOR_NICE = -10, -5


@contextmanager
def _priority(nice: int):
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except PermissionError:  # not root: run at the normal priority; the guard still judges lateness
        yield
        return
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


def _vswitchd_pid() -> int:
    return int(open("/var/run/openvswitch/ovs-vswitchd.pid").read().strip())


def run_fabric(exp: Experiment, fr: FabricRun, root: Path, log=print, bar=None) -> Path:
    """Bring the fabric up once, calibrate, replay every repeat (re-taking one the hypervisor
    voided), tear down."""
    m = exp.measurement
    with LiveFabric(
        fr.fabric,
        fr.emulation,
        results_dir=str(root),
        run_id=fr.label,
        log=log,
        stats_interval_s=m["controller_stats_interval_s"],
        lldp_interval_s=m["lldp_interval_s"],
        failplan=fr.failplan,
        controller=exp.spec["controller"],
        registry_id=f"{root.name}.{fr.label}",
        kind="run",
        suppress_sigterm=False,
    ) as lf:
        live = LiveRun(lf.dir)
        calib = _calibrate(fr, live, log) if m["calibrate"] else None
        runfolder.update(lf.dir, calibration=calib, replays=[])
        cc = _congestion(exp, fr, lf, live, log)
        try:
            for rep in fr.repeats:
                status, voided = _take(exp, fr, rep, lf, live, log, bar, cc)
                replays = read_json(lf.dir / "run.json")["replays"] + [
                    {"repeat": rep.index, "status": status, "voided_attempts": voided}
                ]
                runfolder.update(lf.dir, replays=replays)
                if status != "complete":
                    break
        finally:
            if cc is not None and cc.markers is not None:
                cc.markers.stop()
    return lf.dir


@dataclass
class _Congestion:
    """The spec's congestion section as this fabric runs it (testbed/emulation/congestion.py)."""

    cfg: dict
    scaling: emcc.Scaling
    markers: emcc.FabricMarkers | None
    coarse: list[str]  # ports whose ECN thresholds are below MIN_FRAMES emulated frames
    gates: dict | None = None  # lossless mode: every transmitter's tbf gate (testbed/emulation/pauses.py)


def _congestion(exp: Experiment, fr: FabricRun, lf: LiveFabric, live: LiveRun, log) -> _Congestion | None:
    """Load and configure the ECN marker on every switch egress port when the section asks for
    ECN; in lossless mode put a tbf gate under every port's shaper; record the mode in run.json.
    None when the section is untouched (today's transport)."""
    from .ns3engine import congestion_on

    if not congestion_on(exp.spec):
        return None
    cfg = ccparams.validate(exp.spec["congestion"])
    sc = emcc.Scaling(fr.plan.scaling.dilation, fr.plan.scaling.rate_scale, fr.plan.scaling.size_scale)
    markers, coarse = None, []
    if cfg["ecn_enabled"]:
        configs, coarse = emcc.marker_configs(fr.fabric, cfg, sc, fr.emulation.mtu_bytes)
        markers = emcc.FabricMarkers(lf.registry_id, configs, emcc.far_ends(fr.fabric, live, configs)).start(
            lf.registry
        )
        log(
            f"[zlab]   ECN marking on {len(configs)} switch egress ports"
            + (f"; {len(coarse)} with Kmax below {emcc.MIN_FRAMES} frames: qualitative there" if coarse else "")
        )
    gates = None
    if cfg["pfc_enabled"]:
        gates = pauses.gate_table(fr.fabric, live, run_config(live), cfg, sc.size_scale)
        g = pauses.Gates(gates)
        try:
            g.install()
        finally:
            g.close()
        log(
            f"[zlab]   lossless: a tbf gate under the shaper of {len(gates)} ports, egress backlogs sampled every "
            f"{pauses.period_us(cfg, sc.dilation)} us"
        )
    runfolder.update(
        lf.dir,
        emulation_congestion={
            "mode": ccparams.describe(cfg),
            "section": cfg,
            "ecn_ports": 0 if markers is None else len(markers.configs),
            "qualitative_ports": coarse,
            "pause_period_us": pauses.period_us(cfg, sc.dilation) if gates else None,
            "dilation": sc.dilation,
        },
    )
    return _Congestion(cfg, sc, markers, coarse, gates)


def _calibrate(fr: FabricRun, live: LiveRun, log) -> dict:
    """iperf3 UDP over the first message's port pair at its port rate: what the fabric carries."""
    first = fr.messages[0]
    rate = port_spec(live, first.src_port).rate_bps
    calib = iperf3_udp(live, first.src_port, first.dst_port, rate, duration_s=2)
    calib["ratio"] = calib["goodput_bps"] / rate
    log(
        f"[zlab]   calibration {first.src_port} -> {first.dst_port}: iperf3 UDP "
        f"{calib['goodput_bps'] / 1e6:.2f} Mb/s of {rate / 1e6:.2f} ({100 * calib['ratio']:.1f} %)"
    )
    return calib


def _take(
    exp: Experiment, fr: FabricRun, rep: Repeat, lf: LiveFabric, live: LiveRun, log, bar, cc: _Congestion | None = None
) -> tuple[str, list]:
    """Replay one repeat and judge it: a complete repeat the hypervisor's steal voided is set
    aside (raw/rep<k>.void<n>) and replayed with the same seed, up to the spec's steal_retakes,
    each retake after the steal has calmed down (at most steal_wait_s: steal comes in episodes);
    returns the last attempt's status and the voided attempts."""
    m = exp.measurement
    voided = []
    while True:
        status = replay(exp, fr, rep, lf, live, log=log, bar=bar, cc=cc)
        reason = stolen(exp, lf.dir, rep.index) if status == "complete" else None
        if reason is None or len(voided) >= m["steal_retakes"]:
            return status, voided
        raw = lf.dir / "raw" / f"rep{rep.index}"
        kept = raw.with_name(f"rep{rep.index}.void{len(voided) + 1}")
        raw.rename(kept)
        log(
            f"[zlab]   {fr.label} {rep.index + 1}/{len(fr.repeats)}: voided ({reason}); re-taking it "
            f"({len(voided) + 1}/{m['steal_retakes']}), the attempt kept in raw/{kept.name}"
        )
        waited_s, quiet = wait_for_quiet(m["max_steal_fraction"], m["steal_wait_s"], log)
        voided.append({"folder": kept.name, "reason": reason, "waited_s": round(waited_s, 1), "quiet": quiet})
        if not quiet:
            log(
                f"[zlab]   steal still over the limit after {waited_s:.0f} s (measurement.steal_wait_s); re-taking anyway"
            )


def stolen(exp: Experiment, fdir: Path, repeat: int) -> str | None:
    """Why a finished repeat is void because the hypervisor took the CPU (the analysis's own
    steal rule, on the repeat's cpu.jsonl), or None. Only this cause is re-taken: it comes from
    outside the run, so replaying with the same seed does not select results."""
    from ..measure.tables import cpu_fractions

    limit = exp.measurement["max_steal_fraction"]
    raw = fdir / "raw" / f"rep{repeat}"
    clock = read_json(raw / "run_clock.json")
    t_to = clock.get("t_replay_end_ns", clock.get("t_end_ns"))
    steal = cpu_fractions(read_jsonl(raw / "cpu.jsonl"), clock["t0_ns"], t_to).get("steal", {}).get("max")
    if steal is not None and steal > limit:
        return f"hypervisor steal up to {100 * steal:.0f} % of the cores (limit {100 * limit:.0f} %)"
    return None


def replay(
    exp: Experiment,
    fr: FabricRun,
    rep: Repeat,
    lf: LiveFabric,
    live: LiveRun,
    log=print,
    bar=None,
    cc: _Congestion | None = None,
) -> str:
    """One repeat: its own collector, agent and raw/rep<k>/ records, on the fabric already up.
    Set up, connect the QPs, post the schedule, run it, collect what the repeat leaves behind,
    and always tear down, recording what was done; returns complete, timeout or incomplete."""
    r = _set_up(exp, fr, rep, lf, cc)
    status = "incomplete"
    try:
        queue = _connect(exp, fr, rep, live, r.agent, cc)
        drops_before = losses.snapshot(live, _vswitchd_pid())
        marks_before = cc.markers.snapshot() if cc is not None and cc.markers is not None else None
        t0 = _post(fr, rep, lf, r, queue)
        status = _run(exp, rep, r, t0, len(queue), bar)
        # the replay ends here: what follows (verify-paths' flow dumps, the drop counters, restoring
        # the failures) loads ovs-vswitchd but cannot stretch a transfer, so the CPU rules stop here
        runfolder.update_json(r.raw / "run_clock.json", t_replay_end_ns=time.monotonic_ns())
        _collect(fr, rep, live, r, drops_before, log)
        if marks_before is not None:
            cc.markers.write(r.raw, marks_before, cc.markers.snapshot(), cc.coarse)
    finally:
        _tear_down(r, lf, status, log)
    return status


@dataclass
class _Replay:
    """What one repeat has started: what its tear-down stops and records."""

    label: str
    raw: Path
    collector: subprocess.Popen
    records: JsonLines
    agent: Agent
    injector: subprocess.Popen | None = None
    pauser: subprocess.Popen | None = None


def _set_up(exp: Experiment, fr: FabricRun, rep: Repeat, lf: LiveFabric, cc: _Congestion | None = None) -> _Replay:
    """The repeat's folder with its plan and sampled ports, the queue collector running, an agent."""
    fab, plan, spec, m = fr.fabric, rep.plan, exp.spec, exp.measurement
    raw = lf.dir / "raw" / f"rep{rep.index}"
    raw.mkdir(parents=True)
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
    ports = [p.name for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0]
    write_json(raw / "ports.json", ports)
    collector = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.measure.collector",
            str(raw / "ports.json"),
            str(raw),
            "--period-ms",
            str(m["queue_sample_ms"]),
            "--pid",
            f"ovs={_vswitchd_pid()}",
            "--pid",
            f"agent={os.getpid()}",
        ],
        stderr=open(raw / "collector.log", "w"),
        preexec_fn=lambda: os.nice(COLLECTOR_NICE),
    )
    lf.registry.process(collector.pid, "collector")
    records = JsonLines(raw / "transfers.jsonl")
    fp, fs = fr.failplan, spec["failures"]
    extra = (
        emcc.agent_options(cc.cfg, cc.scaling, roce.payload_per_packet(spec["deployment"]["path_mtu"]))
        if cc is not None
        else {}
    )
    agent = Agent(
        records.write,
        **extra,
        socket_buffer_bytes=spec["emulation"]["agent_socket_buffer_bytes"],
        stall_ns=int(fs["stall_emulated_s"] * 1e9) if fp else None,
        apm_timeouts=fs["apm_timeouts"] if fp and fp["recovery"] in ("host", "both") else None,
    )
    pauser = None
    if cc is not None and cc.gates is not None:
        flows = [(s, d, sport) for (s, d), sport in rep.qps.items()]
        if fp and fp["recovery"] in ("host", "both"):  # QPs that move to their alternate ports
            flows += [(*alt, sport) for (s, d), sport in rep.qps.items() if (alt := failures.alternate(fab, s, d))]
        marker = (
            {
                "cfg_map": str(cc.markers.marker.maps / "cfg"),
                "ports": {
                    n: {"ifindex": cc.markers.ifindex[n], "config": vars(c)} for n, c in cc.markers.configs.items()
                },
            }
            if cc.markers is not None
            else None
        )
        write_json(
            raw / "pause_plan.json", pauses.plan(fab, cc.cfg, cc.scaling.size_scale, flows, cc.gates, fp, marker)
        )
        pauser = subprocess.Popen(
            [sys.executable, "-m", "testbed.emulation.pauses", str(raw / "pause_plan.json"), str(raw)]
            + ["--period-us", str(pauses.period_us(cc.cfg, cc.scaling.dilation))],
            stderr=open(raw / "pauser.log", "w"),
        )
        lf.registry.process(pauser.pid, "pauser")
    return _Replay(f"{fr.label} {rep.index + 1}/{len(fr.repeats)}", raw, collector, records, agent, pauser=pauser)


def _connect(
    exp: Experiment, fr: FabricRun, rep: Repeat, live: LiveRun, agent: Agent, cc: _Congestion | None = None
) -> list[tuple]:
    """One QP per (source, destination) port pair, with its alternate path when hosts recover
    from failures; returns the messages in posting order as (QP, message, transfer)."""
    fab, plan, fp = fr.fabric, rep.plan, fr.failplan
    conns, queue = {}, []
    for msg in rep.messages:
        t = plan.transfers[msg.transfer]
        key = (msg.src_port, msg.dst_port)
        if key not in conns:
            agent.add_port(port_spec(live, msg.src_port))
            agent.add_port(port_spec(live, msg.dst_port))
            qp_cc = (
                emcc.dcqcn(cc.cfg, port_spec(live, msg.src_port).rate_bps, cc.scaling)
                if cc is not None and cc.cfg["cc"] == "dcqcn"
                else None
            )
            conns[key] = agent.connect(
                msg.src_port, msg.dst_port, rep.qps[key], exp.spec["deployment"]["path_mtu"], cc=qp_cc
            )
            alt = (
                failures.alternate(fab, msg.src_port, msg.dst_port)
                if fp and fp["recovery"] in ("host", "both")
                else None
            )
            if alt is not None:
                agent.add_port(port_spec(live, alt[0]))
                agent.add_port(port_spec(live, alt[1]))
                agent.set_alternate(conns[key], *alt)
        queue.append((conns[key], msg, t))
    return queue


def _post(fr: FabricRun, rep: Repeat, lf: LiveFabric, r: _Replay, queue: list[tuple]) -> int:
    """Post every message at its due time after t0, record the clock and the schedule as posted,
    start the failure injector; returns t0 (ns, monotonic)."""
    # t0 only after all set-up work, so no transfer is released late in a burst
    t0 = time.monotonic_ns() + 1_000_000_000
    for conn, msg, t in queue:
        r.agent.post(
            conn,
            msg.size_bytes,
            at_ns=t0 + int(t.t_post_s * 1e9),
            meta={"req": t.req, "shard": t.shard, "real_bytes": msg.real_bytes},
        )
    write_json(r.raw / "run_clock.json", {"t0_ns": t0, "messages": len(queue)})
    # the schedule as posted (order, QP source ports, due times): what a referee replays; the same
    # pure function gives the ns-3 engine its schedule (each QP's sport is rep.qps[pair], as connected)
    write_json(r.raw / "schedule.json", {"t0_ns": t0, "messages": schedule.messages(rep)}, sort_keys=False)
    if fr.failplan:
        r.injector = _start_injector(lf, t0, r.raw)
    return t0


def _run(exp: Experiment, rep: Repeat, r: _Replay, t0: int, n_messages: int, bar) -> str:
    """Let the agent play the schedule, at high priority, until every message completed
    ("complete") or the plan's horizon plus the spec's timeout passed ("timeout")."""
    if bar is not None:
        bar.reset(total=n_messages)
        bar.set_description(r.label)
        bar.refresh()
    last = [0]

    def progress(a):
        if bar is not None and len(a.done) != last[0]:
            bar.update(len(a.done) - last[0])
            last[0] = len(a.done)

    deadline = t0 + int((rep.plan.horizon_s + exp.spec["timeout_s"]) * 1e9)
    with _priority(AGENT_NICE):
        finished = r.agent.run(deadline_ns=deadline, progress=progress)
    progress(r.agent)
    return "complete" if finished else "timeout"


def _collect(fr: FabricRun, rep: Repeat, live: LiveRun, r: _Replay, drops_before: dict, log) -> None:
    """What only the live fabric can tell once the schedule ran: the first repeat of a failure
    run proves a few hit QPs' paths; every repeat records the drop counters' change."""
    if fr.failplan and rep.index == 0:
        _verify_paths(fr, live, r.agent, r.raw, log)
    after = losses.snapshot(live, _vswitchd_pid())
    write_json(
        r.raw / "drops.json",
        {
            "before": drops_before,
            "after": after,
            "delta": losses.delta(drops_before, after),
            "unreadable": losses.unreadable(drops_before, after),
        },
    )


def _tear_down(r: _Replay, lf: LiveFabric, status: str, log) -> None:
    """Stop the injector and the collector, record the agent's counters and the end time, close
    the records; an injector that failed to stop is raised only after all of that is recorded."""
    stop_error = None
    if r.injector is not None:
        try:
            _stop_injector(r.injector, r.raw, lf, log)
        except LabFailure as exc:  # raised once everything of the repeat is recorded
            stop_error = exc
    r.collector.send_signal(signal.SIGTERM)
    try:
        r.collector.wait(timeout=10)
    except subprocess.TimeoutExpired:
        r.collector.kill()
    if r.pauser is not None:  # it opens every gate it shut before it exits
        r.pauser.send_signal(signal.SIGTERM)
        try:
            rc = r.pauser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            r.pauser.kill()
            rc = "killed after 10 s"
        if rc != 0:  # the repeat's result is void without its records; later repeats would meet shut gates
            stop_error = stop_error or LabFailure(
                f"the pause loop ended with {rc}; its gates may be shut: see {r.raw / 'pauser.log'}"
            )
    r.agent.collect_socket_drops()
    write_json(r.raw / "counters.json", r.agent.counters())
    r.agent.close()
    r.records.close()
    runfolder.update_json(r.raw / "run_clock.json", t_end_ns=time.monotonic_ns())
    log(f"[zlab]   {r.label}: {len(r.agent.done)}/{sum(c.posted for c in r.agent.conns)} messages completed ({status})")
    if stop_error is not None:
        raise stop_error


def _start_injector(lf: LiveFabric, t0: int, raw: Path) -> subprocess.Popen:
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.emulation.inject",
            str(lf.dir),
            str(t0),
            str(raw / "injections.jsonl"),
            lf.registry.run_id,
        ],
        stderr=open(raw / "injector.log", "w"),
        preexec_fn=lambda: os.nice(COLLECTOR_NICE),
    )
    lf.registry.process(p.pid, "injector")
    return p


def _stop_injector(p: subprocess.Popen, raw: Path, lf: LiveFabric, log) -> None:
    """Stop the injector (it restores every link and removes its loss rules), then wait until the
    controller has seen the fabric healthy again, so the next repeat starts from the same state."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        raise LabFailure("the failure injector did not stop in 30 s", str(raw / "injector.log")) from None
    recs = read_jsonl(raw / "injections.jsonl")
    errors = [r["error"] for r in recs if r["action"] == "error"] + [
        e for r in recs if r["action"] == "restore" for e in r.get("errors", [])
    ]
    if errors:
        raise LabFailure(f"failure injection failed: {errors[0]}", str(raw / "injections.jsonl"))
    deadline = time.monotonic() + 30
    log_path = lf.dir / "controller" / "failures.jsonl"
    while True:
        states = [r for r in read_jsonl(log_path) if r["event"] == "state"] if log_path.exists() else []
        if not states or not states[-1]["down_links"]:
            return
        if time.monotonic() > deadline:
            raise LabFailure(
                f"after the failures were undone the controller still sees cables "
                f"{states[-1]['down_links']} down (30 s)",
                str(log_path),
            )
        time.sleep(0.2)


def _verify_paths(fr: FabricRun, live: LiveRun, agent: Agent, raw: Path, log, most: int = 3) -> None:
    """While the last failure state still holds: prove from switch counters that a few QPs the
    failure hit now take exactly the model's degraded path, from the ports they use now (host
    recovery moves a QP to its GPU's other port; the model's failover does the same)."""
    fab, fp = fr.fabric, fr.failplan
    final = fp["steps"][-1]["state"]
    if not final:
        return
    state = failplan.state_for(fp, final)
    flows = [(c.home[0], c.home[1], c.sport) for c in agent.conns]
    hit = [c for c, x in zip(agent.conns, failures.crossing(fab, flows, final)) if x]
    tables = failplan.degraded_tables(fab, fp, state)
    out = []
    for c in hit[:most]:
        src, dst = c.src.spec.name, c.dst.spec.name  # where the QP is now (host recovery may have moved it)
        try:
            proof = prove_path(live, src, dst, sport=c.sport, tables=tables)
            out.append(proof.__dict__ | {"ok": proof.ok, "qp": c.cid})
        except LookupError as exc:  # the model says this pair has no path in this state
            out.append({"qp": c.cid, "src": src, "dst": dst, "sport": c.sport, "ok": None, "no_path": str(exc)})
    write_json(raw / "verify_paths.json", {"state": state["failures"], "qps_hit": len(hit), "proofs": out})
    ok = sum(1 for r in out if r["ok"])
    log(
        f"[zlab]   verify-paths after recovery ({state['failures']}): {ok}/{len(out)} QPs the failure hit take the "
        f"model's path"
    )


def run_experiment(
    exp: Experiment, results_dir: str = "results", run_id: str | None = None, log=print, show_progress: bool = True
) -> tuple[Path, str]:
    """Replay every fabric of a resolved experiment; returns (run folder, status)."""
    from tqdm import tqdm

    from ..measure import report

    ref = exp.spec["referee"]
    if ref["scales"]:
        from ..referee import binary

        ok, what = binary.status()
        if not ok:  # refuse before the emulation, not after it
            raise UserInputError(f"referee.scales={ref['scales']} but the ns-3 referee is not available: {what}")
    run_id = run_id or f"run-{dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}"
    root = Path(results_dir) / run_id
    root.mkdir(parents=True, exist_ok=False)
    write_json(root / "experiment.json", exp.resolved(), sort_keys=False)
    write_json(
        root / "run.json",
        {
            "run_id": run_id,
            "status": "running",
            "git_sha": runfolder.git_sha(),
            "versions": runfolder.versions(),
            "fabrics": exp.spec["fabrics"],
            "started": dt.datetime.now().isoformat(timespec="seconds"),
        },
    )
    status, cause = "complete", None
    t_start = time.monotonic()
    bar = tqdm(total=1, unit="msg", disable=not show_progress, leave=False, file=sys.stderr)
    old_term = signal.signal(signal.SIGTERM, raise_terminated)  # zlab destroy: stop like Ctrl-C
    try:
        for fr in exp.fabrics.values():
            run_fabric(exp, fr, root, log=log, bar=bar)
    except (KeyboardInterrupt, Terminated) as exc:
        status = "incomplete"
        log(
            f"[zlab] {'terminated' if isinstance(exc, Terminated) else 'interrupted'}: fabric torn down, recorded "
            "data kept, run marked incomplete"
        )
    except BaseException as exc:
        status, cause = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        signal.signal(signal.SIGTERM, old_term)
        bar.close()
        runfolder.update(
            root,
            status=status,
            cause=cause,
            wall_s=time.monotonic() - t_start,
            finished=dt.datetime.now().isoformat(timespec="seconds"),
        )
        if status == "failed":
            try:
                report.build(root)
            except Exception as exc:  # noqa: BLE001 - the run's own failure is the one to report
                log(f"[zlab] report of the failed run could not be built: {exc}")
    report.build(root)
    if status == "complete" and ref["scales"]:
        from ..referee.referee import referee

        for scale in ref["scales"]:
            referee(root, scale, requests=ref["real_requests"] if scale == "real" else None, log=log)
    return root, status
