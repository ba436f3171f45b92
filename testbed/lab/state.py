"""Where zlab keeps machine state: the datapath provision.sh chose and the run registry.

ZLAB_STATE_DIR overrides the default /var/lib/zlab (tests use it to stay apart).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SOCK_BUF_BYTES = 8 * 1024 * 1024


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
