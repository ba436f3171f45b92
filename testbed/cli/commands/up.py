"""`zlab up`: bring a fabric up in Mininet with the zlab controller (root); `-d` does it in the
background. The detaching lives here, not in the emulation layer: it starts this same command as
a child process, so it is the one place that turns options back into a command line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ...errors import RuntimeFailure
from .. import options


def up_options(args):
    """The typed options the emulation layer takes (it never sees argparse)."""
    from ...emulation.config import EmulationConfig
    from ...emulation.up import UpOptions

    cfg = EmulationConfig(
        rate_scale=args.rate_scale, mtu_bytes=args.mtu, queue_limit_pkts=args.queue_pkts, datapath=args.datapath
    )
    return UpOptions(
        spec=args.spec,
        cfg=cfg,
        results_dir=args.results,
        controller=args.controller,
        miswire=args.miswire,
        wiring_check=args.wiring_check,
        proof=args.proof,
        interactive=not args.no_cli,
        duration_s=args.duration,
        run_id=args.run_id,
    )


def child_argv(opts, run_id: str) -> list[str]:
    """`zlab up --no-cli` with the same settings, for the detached child."""
    argv = [
        sys.executable,
        "-m",
        "testbed.cli",
        "up",
        opts.spec,
        "--no-cli",
        "--run-id",
        run_id,
        "--rate-scale",
        repr(opts.cfg.rate_scale),
        "--mtu",
        str(opts.cfg.mtu_bytes),
        "--queue-pkts",
        str(opts.cfg.queue_limit_pkts),
        "--datapath",
        opts.cfg.datapath,
        "--controller",
        opts.controller,
        "--proof",
        opts.proof,
        "--results",
        opts.results_dir,
    ]
    if opts.duration_s:
        argv += ["--duration", repr(opts.duration_s)]
    return argv


def up_detached(opts, timeout_s: float = 300.0) -> int:
    """`zlab up -d`: the same `zlab up --no-cli` in its own session, returning once the fabric is
    ready (its run.json says running) with the run's id and folder; a failed bring-up prints the
    child's last lines and exits 1."""
    from ...emulation import runfolder

    run_id = runfolder.new_run_id("up")
    results = Path(opts.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    log_path = results / f"{run_id}.log"
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            child_argv(opts, run_id),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=os.getcwd(),
        )
    run_json = results / run_id / "run.json"
    deadline = time.monotonic() + timeout_s
    while True:
        if run_json.exists():
            try:
                if json.loads(run_json.read_text()).get("status") == "running":
                    break
            except ValueError:
                pass  # being written
        if child.poll() is not None:
            tail = log_path.read_text().strip().splitlines()[-3:]
            raise RuntimeFailure(
                f"zlab up -d: the fabric did not come up (exit {child.returncode}): {' | '.join(tail) or 'no output'}",
                str(log_path),
            )
        if time.monotonic() > deadline:
            child.terminate()
            raise RuntimeFailure(f"zlab up -d: not ready after {timeout_s:.0f} s; stopped it", str(log_path))
        time.sleep(0.2)
    print(f"[zlab] up (detached): {run_json.parent}  pid {child.pid}, log {log_path}")
    print(f"[zlab] zlab inspect lists it; zlab destroy {run_id} tears it down")
    return 0


def size_check(spec: str) -> bool:
    """Print whether the fabric fits this machine, predicted from measured bring-ups; False when
    it does not."""
    from ...emulation import sizing
    from ...fabric import build_fabric
    from ..experiments import size_check as check

    pr = check(build_fabric(spec))
    for line in sizing.describe(pr):
        print(f"[zlab] {line}")
    return pr.verdict != "does not fit"


def run(args) -> int:
    opts = up_options(args)
    if args.dry_run:
        from ...fabric import build_fabric

        opts.cfg.validate(build_fabric(opts.spec))
        return 0 if size_check(opts.spec) else 1
    if not args.detach:
        size_check(opts.spec)  # said before minutes of bring-up, not after
    if args.detach:
        return up_detached(opts)
    from ...emulation.up import up

    return up(opts)


def register(sub) -> None:
    up = sub.add_parser(
        "up",
        help="bring a fabric up in Mininet with the zlab controller (root)",
        formatter_class=options.RAW,
        epilog=options.EPILOG_SPECS,
    )
    up.add_argument("spec", help="fabric spec, e.g. zcube:n=4")
    up.add_argument(
        "--rate-scale",
        type=float,
        default=1e-4,
        help="emulated rate = model rate x this (default 1e-4: 200 Gb/s -> 20 Mb/s); links above 1000 Mb/s are refused",
    )
    up.add_argument("--mtu", type=int, default=1500, help="MTU of every link, bytes (default 1500)")
    up.add_argument("--queue-pkts", type=int, default=1000, help="switch egress queue limit, packets (default 1000)")
    up.add_argument(
        "--datapath",
        choices=("auto", "netdev", "system"),
        default="auto",
        help="OVS datapath (default: what provision.sh detected)",
    )
    up.add_argument(
        "--miswire",
        nargs="?",
        const="auto",
        metavar="PORT1,PORT2",
        help="swap two cables on purpose: two switch ports of fabric cables, or two GPU ports (NIC "
        "cables, e.g. g0-p0,g1-p0); default: the first two fabric cables that share no switch",
    )
    up.add_argument("--wiring-check", action="store_true", help="print the cabling check once the fabric is up")
    up.add_argument(
        "--proof",
        choices=("auto", "pairs", "cover"),
        default="auto",
        help="how bring-up proves every GPU port pair reachable: pairs (one probe per pair), cover (one "
        "probe per switch decision, the hosts' tables read, the switches' counters checked; pairs in "
        "doubt probed one by one), auto (default: pairs up to 200,000 pairs, i.e. 256 GPUs, cover above)",
    )
    up.add_argument("--no-cli", action="store_true", help="no Mininet CLI: stay up until Ctrl-C/SIGTERM")
    up.add_argument("--duration", type=float, default=0, help="with --no-cli: tear down after this many seconds")
    up.add_argument("--results", default="results", help="where the run folder goes (default ./results)")
    up.add_argument(
        "--controller",
        choices=("os-ken", "ryu"),
        default="os-ken",
        help="framework running the zlab app: os-ken (default, the maintained fork) or ryu (real Ryu 4.34 "
        "from .venv-ryu, through a one-line eventlet shim; docs/emulation.md 'Controller frameworks')",
    )
    up.add_argument(
        "-d",
        "--detach",
        action="store_true",
        help="bring it up in the background and return once it is ready (then: zlab inspect, zlab destroy)",
    )
    up.add_argument(
        "--dry-run",
        action="store_true",
        help="bring nothing up: say whether the fabric fits this machine (predicted bring-up time, peak "
        "memory, ovs-vswitchd idle CPU, from measured bring-ups); exit 1 when it does not",
    )
    up.add_argument("--run-id", help=argparse.SUPPRESS)  # zlab up -d names its child's run
    up.set_defaults(func=run)
