"""Run registry: every resource a run creates is recorded before or as it is created.

One append-only JSON-lines file per run under <state>/runs/<run_id>.jsonl, flushed and
fsynced per record, so a run killed at any instant leaves a complete list for `zlab clean`.
A run that tears down cleanly removes its file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import procs
from .state import runs_dir

# The environment variable whose value tags every process a run starts (see Registry.env_tag).
TAG_ENV = "ZLAB_RUN"


@dataclass
class RunRecord:
    run_id: str
    path: Path
    owner_pid: int
    owner_started: int | None
    resources: list[dict]
    owner_user: str | None = None
    t_ns: int | None = None

    @property
    def folder(self) -> dict | None:
        return next((r for r in self.resources if r["type"] == "run-folder"), None)

    @property
    def owner_alive(self) -> bool:
        return procs.alive(self.owner_pid, self.owner_started)


class Registry:
    def __init__(self, run_id: str):
        self.run_id = run_id
        runs_dir().mkdir(parents=True, exist_ok=True)
        self.path = runs_dir() / f"{run_id}.jsonl"
        self._fh = open(self.path, "a", encoding="utf-8")
        me = os.getpid()
        # who asked for it: through sudo the process is root's, the person is SUDO_USER (zlab destroy --all-mine)
        user = os.environ.get("SUDO_USER") or os.environ.get("USER") or str(os.getuid())
        self._write({"type": "owner", "pid": me, "started": procs.start_time(me), "t_ns": time.time_ns(), "user": user})

    @classmethod
    def attach(cls, run_id: str) -> Registry:
        """The registry of a run another process of it owns (a helper records what it creates)."""
        self = cls.__new__(cls)
        self.run_id = run_id
        self.path = runs_dir() / f"{run_id}.jsonl"
        if not self.path.exists():
            raise FileNotFoundError(f"no registry for run {run_id} at {self.path}")
        self._fh = open(self.path, "a", encoding="utf-8")
        return self

    def _write(self, rec: dict) -> None:
        self._fh.write(json.dumps(rec, sort_keys=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def bridge(self, name: str) -> None:
        self._write({"type": "ovs-bridge", "name": name})

    def link(self, name: str, ifindex: int | None = None) -> None:
        """A root-namespace interface (veth end); ifindex pins it once it exists."""
        self._write({"type": "link", "name": name, "ifindex": ifindex})

    def netns(self, name: str) -> None:
        self._write({"type": "netns", "name": name})

    def run_folder(self, path: str, kind: str) -> None:
        """Where the live run writes (zlab inspect reads its run.json): kind up | run."""
        self._write({"type": "run-folder", "path": path, "kind": kind})

    def nft_table(self, name: str) -> None:
        """An nftables netdev table (a gray failure's loss rule)."""
        self._write({"type": "nft-table", "family": "netdev", "name": name})

    def bpf_pin(self, path: str) -> None:
        """A directory of pinned BPF objects (the ECN marker's program and maps), recorded before
        it is created."""
        self._write({"type": "bpf-pin", "path": path})

    def env_tag(self, name: str, value: str) -> None:
        """Processes started from now on carry name=value in their environment. Recorded before
        any of them exists: a pid can only be written down after its process exists, and an owner
        killed in between (Mininet starts hundreds of shells) would leave them unrecorded."""
        self._write({"type": "env-tag", "name": name, "value": value})

    def flush(self) -> None:
        self._fh.flush()

    def process(self, pid: int, role: str) -> None:
        self._write({"type": "process", "pid": pid, "started": procs.start_time(pid), "role": role})

    def close(self, remove: bool = True) -> None:
        self._fh.close()
        if remove:
            self.path.unlink(missing_ok=True)


def load_runs() -> list[RunRecord]:
    out = []
    d = runs_dir()
    if not d.is_dir():
        return out
    for path in sorted(d.glob("*.jsonl")):
        recs = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line:
                    try:
                        recs.append(json.loads(line))
                    except ValueError:
                        break  # a torn last line from a kill mid-write
        owner = next((r for r in recs if r.get("type") == "owner"), {"pid": -1, "started": None})
        out.append(
            RunRecord(
                path.stem,
                path,
                owner["pid"],
                owner.get("started"),
                [r for r in recs if r.get("type") != "owner"],
                owner.get("user"),
                owner.get("t_ns"),
            )
        )
    return out
