"""Bring a fabric up (run folder, controller, Mininet, tables, reachability) and always tear it
down: `with LiveFabric(...)` for code and tests, `zlab up` for people."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import Terminated
from ..fabric import build_fabric
from ..fabric.model import Fabric
from ..fabric.validate import validate
from ..lab import clean, procs
from ..lab.registry import TAG_ENV, Registry, load_runs
from ..lab.sh import run
from ..records import write_json
from . import faultpoint, network, probes, runfolder, wiring
from .config import EmulationConfig, EmulationError, LabFailure

REPO = Path(__file__).resolve().parents[2]
CONTROLLERS = ("os-ken", "ryu")
RYU_PYTHON = REPO / ".venv-ryu" / "bin" / "python"


def controller_command(framework: str, run_dir: Path, port: int, extra: list[str]) -> list[str]:
    """The same app (controllers/zlab_routes.py) under os-ken (this venv) or real Ryu (.venv-ryu,
    built by scripts/provision.sh)."""
    if framework == "os-ken":
        return [sys.executable, "-m", "controllers.launch", str(run_dir), "--port", str(port), *extra]
    if framework == "ryu":
        if not RYU_PYTHON.exists():
            raise EmulationError(
                f"controller ryu: {RYU_PYTHON} is missing; run: bash scripts/provision.sh (it "
                "builds the pinned Ryu environment)"
            )
        return [str(RYU_PYTHON), "-m", "controllers.launch_ryu", str(run_dir), "--port", str(port), *extra]
    raise EmulationError(f"controller {framework!r}: valid: {', '.join(CONTROLLERS)}")


# The controller polls every switch's flow and port statistics once per period; the period is at
# least the flow entries over STATS_ENTRIES_PER_S. Each entry costs the controller about 50 us of
# Python (parsing, one JSON record). Measured: at 1,024 GPUs and 1 s (ZCube(32,2), 67,712 entries a
# second) it used 96 % of a core, ovs-vswitchd ran 2 s poll loops and switches dropped their channels
# (2026-12-07); on the 256-GPU ROFT, 20,816 a second held it at 97 %, 4,150 a second in a failure
# replay at 80-89 % (the machine above the fidelity guard's limit), 694 a second at 12-15 %
# (2026-12-08). 1,000 a second costs about a tenth of a core.
STATS_ENTRIES_PER_S = 1_000


def stats_period_s(floor_s: float, entries: int) -> float:
    """The controller's statistics period: the requested one, longer where the tables are large."""
    return max(floor_s, entries / STATS_ENTRIES_PER_S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_terminated(signum, frame):
    raise Terminated(f"signal {signum}")


class LiveFabric:
    """Context manager: everything it creates is registered, and removed on exit."""

    def __init__(
        self,
        fabric: Fabric | str,
        cfg: EmulationConfig = EmulationConfig(),
        results_dir: str = "results",
        run_id: str | None = None,
        miswire: str | None = None,
        check_reachability: bool = True,
        proof: str = "auto",  # probes.reachability's method
        log=print,
        table_timeout_s: float = 120.0,  # without progress (wait_tables)
        stats_interval_s: float = 1.0,
        lldp_interval_s: float = 1.0,
        failplan: dict | None = None,
        controller: str = "os-ken",
        registry_id: str | None = None,
        kind: str = "up",
        suppress_sigterm: bool = True,
    ):
        self.fabric = build_fabric(fabric) if isinstance(fabric, str) else fabric
        self.cfg = cfg
        self.results_dir = results_dir
        self.run_id = run_id or runfolder.new_run_id("up")
        self.registry_id = registry_id or self.run_id  # unique on the machine (tags the bridges too)
        self.kind = kind
        self.suppress_sigterm = suppress_sigterm  # False inside zlab run: the run stops, not just this fabric
        self.miswire_spec = miswire
        self.check_reachability = check_reachability
        self.proof = proof
        self.log = log
        self.table_timeout_s = table_timeout_s
        self.stats_interval_s = stats_interval_s  # the floor; _start raises it with the tables (stats_period_s)
        self.lldp_interval_s = lldp_interval_s
        if controller not in CONTROLLERS:
            raise EmulationError(f"controller {controller!r}: valid: {', '.join(CONTROLLERS)}")
        self.framework = controller
        self.failplan = failplan  # failures.json, for the controller to read at start (failplan.py)
        self.timings_s: dict[str, float] = {}
        self.em = None
        self.controller = None
        self.registry = None
        self.dir: Path | None = None
        self.reach: dict | None = None
        self._old_sigterm = None
        self._old_tag: str | None = None

    # ---- lifecycle --------------------------------------------------------------------
    def __enter__(self) -> LiveFabric:
        self._old_sigterm = signal.signal(signal.SIGTERM, raise_terminated)
        try:
            self._start()
        except BaseException as exc:
            self.close(status="interrupted" if isinstance(exc, KeyboardInterrupt | Terminated) else "failed")
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        status = (
            "ok" if exc_type is None else ("interrupted" if exc_type in (KeyboardInterrupt, Terminated) else "failed")
        )
        self.close(status=status)
        if exc_type is Terminated and self.suppress_sigterm:
            return True  # a SIGTERM is a normal way to stop: suppress after teardown
        return None

    def _start(self) -> None:
        fab = self.fabric
        rep = validate(fab)
        if not rep.ok:
            raise EmulationError(f"the fabric model does not validate: {rep.checks}")
        self.cfg.validate(fab)  # before the run folder or any process exists
        network.precheck_names(fab)
        miswire = network.pick_miswire(fab, self.miswire_spec) if self.miswire_spec is not None else []
        t0 = time.perf_counter()
        self.dir = runfolder.create(
            self.results_dir, self.run_id, fab, {"emulation": self.cfg.to_dict(), "miswire": self.miswire_spec}
        )
        self.registry = Registry(self.registry_id)
        self.registry.run_folder(str(self.dir.resolve()), self.kind)
        # every process started from here on (controller, Mininet shells, what they start) carries
        # the run's tag, so `zlab clean` finds one killed before its pid was written down
        self.registry.env_tag(TAG_ENV, self.registry_id)
        self._old_tag = os.environ.get(TAG_ENV)
        os.environ[TAG_ENV] = self.registry_id
        if self.failplan is not None:
            write_json(self.dir / "failures.json", self.failplan)
        port = free_port()
        self.log(f"[zlab] run {self.run_id}: {fab.spec}")
        self.log(
            f"[zlab]   {fab.n_gpus} GPUs, {len(fab.switches)} switches, {len(fab.links)} links; rate_scale "
            f"{self.cfg.rate_scale:g} ({fab.ports[0].rate_bps * self.cfg.rate_scale / 1e6:g} Mb/s per GPU port), "
            f"MTU {self.cfg.mtu_bytes}, egress queue {self.cfg.queue_limit_pkts} packets"
        )
        entries = sum(self.expected_flow_counts().values())
        stats_s = stats_period_s(self.stats_interval_s, entries)
        if stats_s > self.stats_interval_s:
            self.log(
                f"[zlab]   controller statistics every {stats_s:.1f} s, not {self.stats_interval_s:g} s: "
                f"{entries} flow entries, at most {STATS_ENTRIES_PER_S} polled per second"
            )
        self.timings_s["controller_stats_interval_s"] = stats_s
        args = ["--stats-interval", f"{stats_s:g}", "--lldp-interval", str(self.lldp_interval_s)]
        (self.dir / "controller").mkdir(exist_ok=True)
        logf = open(self.dir / "controller" / "controller.log", "w")
        self.controller = subprocess.Popen(
            controller_command(self.framework, self.dir, port, args),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.registry.process(self.controller.pid, "controller")
        self._wait_listening(port)
        self.log(f"[zlab]   controller ({self.framework}) pid {self.controller.pid} on 127.0.0.1:{port}")
        faultpoint.hit("controller")
        self.em = network.prepare(fab, self.cfg, self.registry_id, self.registry, miswire)
        network.build(self.em, port)
        if miswire:
            l1, l2 = (fab.links[i] for i in miswire[0])
            self.log(
                f"[zlab]   MISWIRED on purpose: far ends of {fab.ports[l1.a].name} and {fab.ports[l2.a].name} swapped"
            )
        hosts = {h.name: {"pid": h.pid, "started": procs.start_time(h.pid)} for h in self.em.net.hosts}
        write_json(self.dir / "hosts.json", hosts)
        self.timings_s.update(self.em.timings_s)
        self.timings_s["build_total"] = time.perf_counter() - t0
        self.log(f"[zlab]   built in {self.timings_s['build_total']:.1f} s (datapath {self.em.datapath})")
        t1 = time.perf_counter()
        faultpoint.hit("tables")
        self.wait_tables()
        self.timings_s["tables_installed"] = time.perf_counter() - t1
        self.log(f"[zlab]   all {len(fab.switches)} tables installed in {self.timings_s['tables_installed']:.1f} s")
        if self.check_reachability:
            t2 = time.perf_counter()
            self.reach = probes.reachability(probes.LiveRun(self.dir), method=self.proof)
            self.timings_s["reachability"] = time.perf_counter() - t2
            r = self.reach
            self.log(
                f"[zlab]   reachability: {r['reachable']}/{r['pairs']} GPU port pairs in "
                f"{self.timings_s['reachability']:.1f} s ({r['proof']}: {r['probes_sent']:,} probes in "
                f"{len(r['rounds'])} round(s), paced at {r['rounds'][0]['forwards_per_s']:.0f} forwards/s)"
            )
            if r["failed"] and not miswire:
                where = [f"{u['pair']} stopped at {u['stopped_at']} ({u['reason']})" for u in r["unreachable"][:3]]
                raise LabFailure(f"{len(r['failed'])} GPU port pairs unreachable, e.g. {'; '.join(where)}")
        runfolder.update(
            self.dir,
            status="running",
            timings_s=self.timings_s,
            reachability=self.reach,
            datapath=self.em.datapath,
            controller=self.framework,
        )

    def _wait_listening(self, port: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.controller.poll() is not None:
                log = (self.dir / "controller" / "controller.log").read_text()[-2000:]
                raise LabFailure(
                    f"controller exited with {self.controller.returncode}: "
                    f"{log.strip().splitlines()[-1] if log.strip() else 'no output'}",
                    str(self.dir / "controller" / "controller.log"),
                )
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        raise LabFailure(
            f"controller did not listen on port {port} within {timeout_s} s",
            str(self.dir / "controller" / "controller.log"),
        )

    def expected_flow_counts(self) -> dict[str, int]:
        flows = json.loads((self.dir / "flows.json").read_text())
        ff = (self.failplan or {}).get("fast_failover", {}).get("switches", {})
        return {
            name: len(v["entries"]) + 2 + len(ff.get(name, {}).get("transit", []))
            for name, v in flows["switches"].items()
        }

    def installed_counts(self, names=None) -> dict[str, int]:
        """Entries each switch holds now, by its own count (ovs-ofctl dump-aggregate): every switch,
        or only `names`."""
        out = {}
        for name in self.expected_flow_counts() if names is None else names:
            text = run(["ovs-ofctl", "-O", "OpenFlow13", "dump-aggregate", name])
            out[name] = int(text.split("flow_count=")[1].split()[0])
        return out

    def wait_tables(self) -> None:
        """Wait until every switch holds exactly the entries flows.json gives it.

        Why a limit on time without progress, not on the whole wait: installing grows with the
        tables (67,712 entries at 1,024 GPUs of ZCube, 2,054,800 for a 1,024-GPU ROFT), so a fixed
        limit refused a large fabric whose install was still going. A stalled install (a dead
        channel, a switch that refuses entries) still fails after table_timeout_s. Polls grow
        sparser as the wait goes on, and read only the switches still short: an aggregate walks the
        whole table (0.5 s for a 128,099-entry spine), work ovs-vswitchd would otherwise spend
        installing. Once none is short, one reading of every switch must match."""
        want = self.expected_flow_counts()
        total = sum(want.values())
        t0 = last_progress = logged = time.monotonic()
        best = -1
        have: dict[str, int] = {}

        def missing() -> list[str]:
            return [k for k in want if have.get(k) != want[k]]

        short = list(want)
        while True:
            have.update(self.installed_counts(short))
            if not (short := missing()):
                have = self.installed_counts()  # one reading of every switch
                if not (short := missing()):
                    return
            if self.controller.poll() is not None:
                raise LabFailure(
                    f"controller died (exit {self.controller.returncode})",
                    str(self.dir / "controller" / "controller.log"),
                )
            now = time.monotonic()
            done = sum(min(have.get(k, 0), v) for k, v in want.items())
            if done > best:
                best, last_progress = done, now
            elif now - last_progress > self.table_timeout_s:
                raise LabFailure(
                    f"tables not installed: no progress for {self.table_timeout_s:g} s "
                    f"({done}/{total} entries after {now - t0:.0f} s): "
                    f"{ {k: f'{have.get(k)}/{want[k]}' for k in short} }"
                )
            if now - logged >= 30:
                self.log(f"[zlab]   tables: {done}/{total} entries after {now - t0:.0f} s")
                logged = now
            time.sleep(min(2.0, 0.2 + 0.02 * (now - t0)))

    def wiring_report(self, settle_s: float = 3.0, timeout_s: float = 30.0) -> dict:
        """Wait until LLDP discovery stops changing, then compare with the blueprint."""
        deadline = time.monotonic() + timeout_s
        expected = len(wiring.blueprint(self.fabric))
        last, since = None, time.monotonic()
        live, probed = probes.LiveRun(self.dir), 0.0
        while time.monotonic() < deadline:
            if time.monotonic() - probed > 2.0:  # NIC cables: every GPU port announces itself
                wiring.probe_nic_cables(live)
                probed = time.monotonic()
            rep = wiring.check_run(self.dir)
            key = (rep["discovered_links"], tuple(rep["missing"]), tuple(rep["extra"]))
            if key != last:
                last, since = key, time.monotonic()
            elif time.monotonic() - since >= settle_s and rep["discovered_links"] >= expected:
                break
            time.sleep(0.5)
        write_json(self.dir / "wiring.json", rep)
        return rep

    def close(self, status: str = "ok") -> None:
        """Tear down on every exit path. Mininet's stop does the bulk; then the registry-driven
        cleaner (the one `zlab clean` uses) removes whatever this run recorded and is still there
        (a half-built network, a stop that failed). The registry file is removed only when nothing
        of the run remains; otherwise it stays for `zlab clean` and the failure is reported."""
        t = time.perf_counter()
        problems: list[str] = []
        try:
            if self.em is not None:
                network.stop(self.em)
                self.em = None
        except Exception as exc:  # keep tearing down: the cleaner below still runs
            problems.append(f"mininet stop: {exc}")
        finally:
            if self.controller is not None and self.controller.poll() is None:
                procs.terminate(self.controller.pid, None)
                self.controller.wait(timeout=10)
            if self._old_tag is None:
                os.environ.pop(TAG_ENV, None)
            else:
                os.environ[TAG_ENV] = self._old_tag
            if self.registry is not None:
                self.registry.flush()
                rec = next((r for r in load_runs() if r.run_id == self.registry_id), None)
                if rec is not None:
                    try:
                        left = clean.clean_run(rec, keep_record=True, spare_pid=os.getpid())
                        if left:
                            self.log(f"[zlab]   teardown: removed {len(left)} leftover(s), e.g. {left[:3]}")
                        still = clean.clean_run(rec, dry_run=True, keep_record=True, spare_pid=os.getpid())
                        if still:
                            problems.append(f"still present: {still[:5]}")
                    except Exception as exc:
                        problems.append(f"cleanup: {exc}")
            self.timings_s["teardown"] = time.perf_counter() - t
            if self.dir is not None and (self.dir / "run.json").exists():
                runfolder.update(self.dir, status=status, timings_s=self.timings_s)
            if self.registry is not None:
                self.registry.close(remove=not problems)
                self.registry = None
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
                self._old_sigterm = None
            if problems:
                self.log(f"[zlab]   teardown incomplete ({'; '.join(problems)}); run: zlab clean")


@dataclass(frozen=True)
class UpOptions:
    """What `zlab up` asks for, typed, so this layer never sees the command line (the CLI fills
    it; `zlab up -d`, which starts this in a child process, stays in the CLI)."""

    spec: str
    cfg: EmulationConfig = EmulationConfig()
    results_dir: str = "results"
    controller: str = "os-ken"
    miswire: str | None = None  # None: cabled as designed; "auto" or "PORT1,PORT2": swapped on purpose
    wiring_check: bool = False
    proof: str = "auto"  # how bring-up proves reachability (probes.reachability's method)
    interactive: bool = True  # the Mininet CLI; False: stay up until SIGTERM/Ctrl-C or duration_s
    duration_s: float = 0.0  # not interactive: tear down after this long (0: never)
    run_id: str | None = None


def up(opts: UpOptions) -> int:
    """Bring the fabric up, hold it (Mininet CLI, or until a signal or the duration), tear it down.
    A SIGTERM during the bring-up (zlab destroy, or kill) tears down too, and exits 143 without a
    traceback (issue 27: a 1,024-GPU bring-up stopped that way printed one)."""
    try:
        return _up(opts)
    except Terminated:
        print("[zlab] stopped by SIGTERM during bring-up; torn down")
        return 143


def _up(opts: UpOptions) -> int:
    with LiveFabric(
        opts.spec,
        opts.cfg,
        results_dir=opts.results_dir,
        miswire=opts.miswire,
        proof=opts.proof,
        controller=opts.controller,
        run_id=opts.run_id,
    ) as live:
        if opts.wiring_check or opts.miswire is not None:
            print(wiring.format_report(live.wiring_report()))
        print(f"[zlab] up: {live.dir}  (Ctrl-C or SIGTERM tears everything down)")
        sys.stdout.flush()
        if not opts.interactive:
            deadline = time.monotonic() + opts.duration_s if opts.duration_s else None
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.5)
        else:
            from mininet.cli import CLI

            print(
                "[zlab] Mininet CLI: try 'g0 ping -c1 10.2.0.6', 'g0 ip route', 'sh ovs-ofctl -O OpenFlow13 "
                "dump-flows za0'; 'exit' tears down"
            )
            CLI(live.em.net)
    print("[zlab] torn down")
    return 0
