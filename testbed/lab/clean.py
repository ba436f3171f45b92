"""`zlab clean`: remove what killed runs left behind — only what the registry says they made.

Never a global sweep: bridges are deleted only when they carry the run's own
external_ids:zlab-run tag, interfaces only when their ifindex is the recorded one, processes
only when (pid, start time) still match.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from . import procs
from .registry import RunRecord, load_runs
from .sh import CommandError, run
from .state import BPF_PIN_ROOT


def _tagged_bridges(run_id: str) -> set[str]:
    try:
        out = run(
            [
                "ovs-vsctl",
                "--timeout=10",
                "--format=json",
                "--columns=name",
                "find",
                "bridge",
                f"external_ids:zlab-run={run_id}",
            ]
        )
    except CommandError as exc:
        raise CommandError(
            f"cannot list OVS bridges ({exc}); is OVS running? bash scripts/provision.sh --services"
        ) from None
    return {row[0] for row in json.loads(out)["data"]}


def _ifindex(name: str) -> int | None:
    try:
        return int(open(f"/sys/class/net/{name}/ifindex").read())
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    except OSError:
        return "?"


def clean_run(
    rec: RunRecord, dry_run: bool = False, keep_record: bool = False, spare_pid: int | None = None
) -> list[str]:
    """Remove one dead run's resources; return a line per thing removed. keep_record: leave the
    registry file (the run's own teardown decides); spare_pid: a live process not to touch (the
    owner cleaning up after itself carries the run's tag)."""
    done = []
    spare = {os.getpid()} | ({spare_pid} if spare_pid else set())
    # processes first, so nothing recreates what is removed next: the recorded ones, and every
    # process carrying the run's tag (started before its pid could be written down)
    targets = {}
    for r in rec.resources:
        if r["type"] == "process" and r["pid"] not in spare and procs.alive(r["pid"], r.get("started")):
            targets[r["pid"]] = (r.get("started"), r.get("role", "?"))
    for r in rec.resources:
        if r["type"] == "env-tag":
            for pid, st in procs.tagged(r["name"], r["value"], spare):
                targets.setdefault(pid, (st, f"tagged: {_cmdline(pid)}"))
    if targets and not dry_run:
        procs.terminate_all([(p, st) for p, (st, _) in targets.items()])
    done += [f"process {p} ({role})" for p, (_, role) in sorted(targets.items())]
    for r in rec.resources:  # loss rules before the links they hang on
        if r["type"] == "nft-table":
            present = (
                subprocess.run(["nft", "list", "table", r["family"], r["name"]], capture_output=True).returncode == 0
            )
            if present:
                if not dry_run:
                    run(["nft", "delete", "table", r["family"], r["name"]])
                done.append(f"nft table {r['family']} {r['name']}")
    names = {r["name"] for r in rec.resources if r["type"] == "ovs-bridge"}
    ours = names & _tagged_bridges(rec.run_id) if names else set()
    if ours:
        if not dry_run:
            cmd = ["ovs-vsctl", "--timeout=30"]
            for b in sorted(ours):
                cmd += ["--", "--if-exists", "del-br", b]
            run(cmd)
        done += [f"ovs bridge {b}" for b in sorted(ours)]
    pinned: dict[str, int | None] = {}
    for r in rec.resources:
        if r["type"] == "link":
            pinned[r["name"]] = r.get("ifindex") or pinned.get(r["name"])
    for name, ifindex in sorted(pinned.items()):
        now = _ifindex(name)
        if now is None or (ifindex is not None and now != ifindex):
            continue
        if not dry_run:
            # deleting one end of a veth removes its peer, so the command may fail on a link already gone;
            # a link still there afterwards is a failed cleanup and raises
            run(["ip", "link", "del", name], check=False)
            if _ifindex(name) is not None:
                raise CommandError(f"ip link del {name}: the link is still there")
        done.append(f"link {name}")
    for r in rec.resources:
        if r["type"] == "netns":
            try:
                present = r["name"] in run(["ip", "netns", "list"]).split()
            except CommandError:
                present = False
            if present:
                if not dry_run:
                    run(["ip", "netns", "del", r["name"]])
                done.append(f"netns {r['name']}")
    for r in rec.resources:  # after the links: a pinned program is detached from nothing by then
        # os.path.exists: bpffs answers EPERM for a name it could never hold (one with a dot)
        if r["type"] == "bpf-pin" and Path(r["path"]).is_relative_to(BPF_PIN_ROOT) and os.path.exists(r["path"]):
            if not dry_run:
                shutil.rmtree(r["path"])
            done.append(f"bpf pins {r['path']}")
    if not dry_run and not keep_record:
        rec.path.unlink(missing_ok=True)
    return done


def main(dry_run: bool = False) -> int:
    runs = load_runs()
    if not runs:
        print("zlab clean: no zlab runs recorded; nothing to remove")
        return 0
    code = 0
    for rec in runs:
        if rec.owner_alive:
            print(
                f"run {rec.run_id}: still running (pid {rec.owner_pid}); stop it first (Ctrl-C or kill {rec.owner_pid})"
            )
            code = 1
            continue
        try:
            removed = clean_run(rec, dry_run=dry_run)
        except CommandError as exc:
            print(f"run {rec.run_id}: FAILED: {exc}")
            code = 1
            continue
        verb = "would remove" if dry_run else "removed"
        print(f"run {rec.run_id}: {verb} {len(removed)} item(s)" + (":" if removed else ""))
        for line in removed:
            print(f"  {line}")
    return code
