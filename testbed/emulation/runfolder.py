"""The run folder: one self-describing directory per run, written before anything starts.

fabric.json (the resolved model) and flows.json (every switch's entries, computed once by the
routing model) are what the controller and every later consumer read.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path

from ..fabric import layout
from ..fabric.model import Fabric
from ..fabric.openflow import flow_entries
from ..fabric.paths import forwarding_tables
from ..records import write_json

FLOWS_SCHEMA = "zlab.flows/1"


def new_run_id(prefix: str) -> str:
    return f"{prefix}-{dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}"


def git_sha() -> str | None:
    here = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (sha + ("-dirty" if dirty else "")) or None


def versions() -> dict:
    out = {"python": platform.python_version(), "kernel": platform.release()}
    for mod in ("numpy", "pandas", "os_ken", "scapy", "pyroute2"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except Exception:  # noqa: BLE001
            out[mod] = None
    try:
        out["ovs"] = subprocess.run(
            ["ovs-vsctl", "--version"], capture_output=True, text=True, timeout=5
        ).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        out["ovs"] = None
    return out


def flows_document(fab: Fabric) -> dict:
    """Every switch's entries, and its switch-facing ports: the only ones LLDP discovery needs
    (a GPU's kernel discards LLDP and counts it as a drop, which would look like lost frames)."""
    t = forwarding_tables(fab)
    switch_facing: dict[int, list[int]] = {}
    for link in fab.links:
        a, b = fab.ports[link.a], fab.ports[link.b]
        if fab.nodes[a.node].role == "switch" and fab.nodes[b.node].role == "switch":
            switch_facing.setdefault(a.node, []).append(a.number)
            switch_facing.setdefault(b.node, []).append(b.number)
    return {
        "schema": FLOWS_SCHEMA,
        "fabric": fab.spec,
        "switches": {
            sw.name: {
                "dpid": sw.dpid,
                "entries": flow_entries(t, sw.name),
                "lldp_ports": sorted(switch_facing.get(sw.id, [])),
            }
            for sw in fab.switches
        },
    }


def create(results_dir: str, run_id: str, fab: Fabric, config: dict) -> Path:
    path = Path(results_dir) / run_id
    path.mkdir(parents=True, exist_ok=False)
    (path / "fabric.json").write_text(fab.to_json())
    write_json(path / "flows.json", flows_document(fab))
    # the blueprint a cabling crew would hold: the cabling check names cables by its ids and racks
    (path / "patch-list.csv").write_text(layout.patch_list_csv(fab, layout.plan(fab)))
    write_json(
        path / "run.json",
        {
            "run_id": run_id,
            "fabric": fab.spec,
            "config": config,
            "git_sha": git_sha(),
            "versions": versions(),
            "started": dt.datetime.now().isoformat(timespec="seconds"),
        },
    )
    return path


def update(path: Path, **fields) -> None:
    data = json.loads((path / "run.json").read_text())
    data.update(fields)
    write_json(path / "run.json", data)


def update_json(path: Path, **fields) -> None:
    """Add fields to a JSON object file (a missing file starts empty)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(fields)
    write_json(path, data)
