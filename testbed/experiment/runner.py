"""Run an experiment: for each fabric, bring it up, calibrate, replay the planned KV transfers
while the collector samples every egress queue, tear down; then tables, plots and report.

One folder per run: results/<run>/{spec.yaml, run.json, <fabric>/..., tables/, plots/, report.md}.
Ctrl-C stops cleanly: the fabric is torn down, what was recorded stays, the run is marked
incomplete and reported as such.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from traffic import kvmodel, traces, workload
from traffic.agent import Agent
from traffic.calibrate import iperf3_udp
from traffic.live import port_spec, transfer_ports

from ..emulation import runfolder
from ..emulation.config import EmulationConfig
from ..emulation.network import write_json
from ..emulation.probes import LiveRun
from ..emulation.up import LiveFabric
from ..fabric import build_fabric


def _vswitchd_pid() -> int:
    return int(open("/var/run/openvswitch/ovs-vswitchd.pid").read().strip())


def make_plan(spec: dict, fab) -> workload.Plan:
    w, d = spec["workload"], spec["deployment"]
    times = kvmodel.TimeModel(w["prefill_overhead_s"], w["prefill_tokens_per_s"], w["first_decode_step_s"])
    return workload.plan(
        traces.read(w["trace"]), kvmodel.model(w["model"]), times, fab.n_gpus, int(fab.params["gpus_per_server"]),
        float(fab.params["gpu_gbps"]) * 1e9, rate_scale=spec["emulation"]["rate_scale"], size_scale=w["size_scale"],
        tp=d["tp"], prefill_instances=d["prefill_instances"], decode_instances=d["decode_instances"],
        mapping=d["mapping"], scheduler=d["scheduler"], offered_load=w.get("offered_load"),
        load_factor=w.get("load_factor"), start_index=w["start_index"], requests=w["requests"],
        prefix_reuse=w["prefix_reuse"], seed=spec["seed"])


def run_fabric(spec: dict, label: str, fabric_spec: str, root: Path, log=print, bar=None) -> Path:
    fab = build_fabric(fabric_spec)
    em = spec["emulation"]
    cfg = EmulationConfig(rate_scale=em["rate_scale"], mtu_bytes=em["mtu_bytes"],
                          queue_limit_pkts=em["queue_limit_pkts"])
    plan = make_plan(spec, fab)  # before bring-up: a bad workload fails fast
    m = spec["measurement"]
    with LiveFabric(fab, cfg, results_dir=str(root), run_id=label, log=log,
                    stats_interval_s=m["controller_stats_interval_s"], lldp_interval_s=m["lldp_interval_s"]) as lf:
        live = LiveRun(lf.dir)
        raw = lf.dir / "raw"
        raw.mkdir(exist_ok=True)
        split = spec["deployment"]["split"] if fab.kind == "zcube" else None
        gname = lambda g: fab.gpus[g].name  # noqa: E731
        calib = None
        if spec["measurement"]["calibrate"]:
            t = plan.transfers[0]
            sp, dp, _ = transfer_ports(live, gname(t.src_gpu), gname(t.dst_gpu), split)[0]
            rate = port_spec(live, sp).rate_bps
            calib = iperf3_udp(live, sp, dp, rate, duration_s=2)
            calib["ratio"] = calib["goodput_bps"] / rate
            log(f"[zlab]   calibration {sp} -> {dp}: iperf3 UDP {calib['goodput_bps'] / 1e6:.2f} Mb/s of "
                f"{rate / 1e6:.2f} ({100 * calib['ratio']:.1f} %)")
        write_json(raw / "plan.json", {"summary": plan.summary(),
                                       "instances": [vars(i) for i in plan.instances],
                                       "requests": [vars(r) for r in plan.requests],
                                       "transfers": [vars(t) for t in plan.transfers]})
        ports = [p.name for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0]
        write_json(raw / "ports.json", ports)
        collector = subprocess.Popen(
            [sys.executable, "-m", "testbed.measure.collector", str(raw / "ports.json"), str(raw),
             "--period-ms", str(m["queue_sample_ms"]), "--pid", f"ovs={_vswitchd_pid()}", "--pid", f"agent={os.getpid()}"],
            stderr=open(raw / "collector.log", "w"))
        lf.registry.process(collector.pid, "collector")
        agent = Agent(raw / "transfers.jsonl")
        status = "incomplete"
        try:
            rng = random.Random(spec["seed"])
            conns, queue = {}, []
            for t in plan.transfers:
                subs = transfer_ports(live, gname(t.src_gpu), gname(t.dst_gpu), split)
                for sp, dp, share in subs:
                    if (sp, dp) not in conns:
                        agent.add_port(port_spec(live, sp))
                        agent.add_port(port_spec(live, dp))
                        conns[(sp, dp)] = agent.connect(sp, dp, rng.randrange(49152, 65536),
                                                        spec["deployment"]["path_mtu"])
                    queue.append((conns[(sp, dp)], max(1, int(t.bytes * share)), t,
                                  {"req": t.req, "shard": t.shard, "real_bytes": int(t.real_bytes * share)}))
            # t0 only after all set-up work, so no transfer is released late in a burst
            t0 = time.monotonic_ns() + 1_000_000_000
            for conn, nbytes, t, meta in queue:
                agent.post(conn, nbytes, at_ns=t0 + int(t.t_post_s * 1e9), meta=meta)
            n_msgs = len(queue)
            write_json(raw / "run_clock.json", {"t0_ns": t0, "messages": n_msgs})
            if bar is not None:
                bar.reset(total=n_msgs)
                bar.set_description(label)
            last = [0]

            def progress(a):
                if bar is not None and len(a.done) != last[0]:
                    bar.update(len(a.done) - last[0])
                    last[0] = len(a.done)

            deadline = t0 + int((plan.horizon_s + spec["timeout_s"]) * 1e9)
            finished = agent.run(deadline_ns=deadline, progress=progress)
            progress(agent)
            status = "complete" if finished else "timeout"
        finally:
            collector.send_signal(signal.SIGTERM)
            try:
                collector.wait(timeout=10)
            except subprocess.TimeoutExpired:
                collector.kill()
            write_json(raw / "counters.json", agent.counters())
            agent.close()
            runfolder.update(lf.dir, replay_status=status, calibration=calib)
            log(f"[zlab]   {label}: {len(agent.done)}/{sum(c.posted for c in agent.conns)} messages completed ({status})")
    return lf.dir


def run_experiment(spec: dict, results_dir: str = "results", run_id: str | None = None, log=print,
                   show_progress: bool = True) -> tuple[Path, str]:
    from tqdm import tqdm

    from ..measure import report

    run_id = run_id or f"run-{dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}"
    root = Path(results_dir) / run_id
    root.mkdir(parents=True, exist_ok=False)
    (root / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    write_json(root / "run.json", {"run_id": run_id, "status": "running", "git_sha": runfolder.git_sha(),
                                   "versions": runfolder.versions(), "fabrics": spec["fabrics"],
                                   "started": dt.datetime.now().isoformat(timespec="seconds")})
    status = "complete"
    t_start = time.monotonic()
    bar = tqdm(total=1, unit="msg", disable=not show_progress, leave=False, file=sys.stderr)
    try:
        for label, fabric_spec in spec["fabrics"].items():
            run_fabric(spec, label, fabric_spec, root, log=log, bar=bar)
    except KeyboardInterrupt:
        status = "incomplete"
        log("[zlab] interrupted: fabric torn down, recorded data kept, run marked incomplete")
    finally:
        bar.close()
        runfolder.update(root, status=status, wall_s=time.monotonic() - t_start,
                         finished=dt.datetime.now().isoformat(timespec="seconds"))
    report.build(root)
    return root, status
