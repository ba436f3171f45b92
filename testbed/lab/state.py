"""Where zlab keeps machine state: the datapath provision.sh chose and the run registry.

ZLAB_STATE_DIR overrides the default /var/lib/zlab (tests use it to stay apart).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SOCK_BUF_BYTES = 8 * 1024 * 1024
# where runs pin their BPF objects (the ECN marker), one directory per run; `zlab clean` removes
# only directories under it that a run recorded
BPF_PIN_ROOT = Path("/sys/fs/bpf/zlab")


def state_dir() -> Path:
    return Path(os.environ.get("ZLAB_STATE_DIR", "/var/lib/zlab"))


def runs_dir() -> Path:
    return state_dir() / "runs"


def datapath() -> str | None:
    """'netdev' (userspace) or 'system' (kernel), as recorded by provision.sh; None if unprovisioned."""
    try:
        value = (state_dir() / "datapath").read_text().strip()
    except OSError:
        return None
    return value if value in ("netdev", "system") else None


def ovs_start_record() -> dict | None:
    try:
        return json.loads((state_dir() / "ovs-started.json").read_text())
    except (OSError, ValueError):
        return None


def capacity() -> dict | None:
    """This machine's measured forwarding capacity (`zlab doctor --capacity`), or None."""
    try:
        return json.loads((state_dir() / "capacity.json").read_text())
    except (OSError, ValueError):
        return None


def save_capacity(record: dict) -> Path:
    path = state_dir() / "capacity.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path
