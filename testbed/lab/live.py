"""Live runs, the way containerlab manages labs: list them (`zlab inspect`) and tear them down
(`zlab destroy`), from the run registry — never by name patterns.

A live run is a registry whose owner process (pid + start time) is alive. `destroy` asks the owner
to stop (SIGTERM: it tears down what it made and removes its registry, as on Ctrl-C) and waits;
an owner that does not finish in time is stopped and its recorded resources removed as
`zlab clean` would. Runs whose owner already died are `zlab clean`'s.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from . import procs
from .clean import clean_run
from .registry import RunRecord, load_runs


def _uptime_s() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def age_s(pid: int) -> float | None:
    st = procs.start_time(pid)
    if st is None:
        return None
    return _uptime_s() - st / os.sysconf("SC_CLK_TCK")


def live_runs() -> list[RunRecord]:
    return [r for r in load_runs() if r.owner_alive]


def describe(rec: RunRecord) -> dict:
    """What `zlab inspect` shows of one live run (read from its registry and run folder)."""
    folder = rec.folder
    info = {
        "run": rec.run_id,
        "kind": folder["kind"] if folder else "?",
        "pid": rec.owner_pid,
        "user": rec.owner_user,
        "age_s": age_s(rec.owner_pid),
        "folder": folder["path"] if folder else None,
        "spec": None,
        "controller": None,
        "datapath": None,
        "status": None,
        "bridges": sum(1 for r in rec.resources if r["type"] == "ovs-bridge"),
        "ports": len({r["name"] for r in rec.resources if r["type"] == "link"}),
        "hosts": sum(1 for r in rec.resources if r["type"] == "process" and r.get("role", "").startswith("mininet")),
    }
    if folder:
        try:
            run = json.loads((Path(folder["path"]) / "run.json").read_text())
            info.update(
                spec=run.get("fabric"),
                controller=run.get("controller"),
                datapath=run.get("datapath"),
                status=run.get("status"),
            )
        except (OSError, ValueError):
            pass
    return info


def select(ref: str | None, all_mine: bool, user: str) -> list[RunRecord]:
    """Live runs named by `ref` (a registry id, a run folder path or name, or the id of a `zlab run`
    whose fabrics each have a registry), or every live run `user` started."""
    runs = live_runs()
    if all_mine:
        return [r for r in runs if r.owner_user == user]
    ref_path = str(Path(ref).resolve()) if ref and Path(ref).exists() else None
    out = []
    for r in runs:
        folder = r.folder["path"] if r.folder else ""
        if (
            ref in (r.run_id, Path(folder).name)
            or r.run_id.startswith(f"{ref}.")
            or (ref_path and (folder == ref_path or folder.startswith(ref_path + "/")))
        ):
            out.append(r)
    return out


def destroy(rec: RunRecord, timeout_s: float = 60.0) -> list[str]:
    """Stop one live run through its owner; if the owner does not finish, remove what it recorded."""
    if procs.alive(rec.owner_pid, rec.owner_started):
        try:
            os.kill(rec.owner_pid, 15)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not rec.path.exists() and not procs.alive(rec.owner_pid, rec.owner_started):
            return [f"run {rec.run_id}: its owner (pid {rec.owner_pid}) tore it down"]
        if not procs.alive(rec.owner_pid, rec.owner_started):
            break  # the owner died without removing its registry: clean what it recorded
        time.sleep(0.2)
    procs.terminate(rec.owner_pid, rec.owner_started)
    fresh = next((r for r in load_runs() if r.run_id == rec.run_id), None)
    done = clean_run(fresh) if fresh is not None else []
    return [f"run {rec.run_id}: owner did not finish in {timeout_s:.0f} s; removed what it recorded"] + done
