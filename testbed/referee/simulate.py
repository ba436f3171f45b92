"""Run the ns-3 referee on one scenario and read what it wrote back as tables (in the units of
the scenario: emulated at scale "same", real at scale "real")."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import RuntimeFailure
from . import binary
from .scenario import Scenario


@dataclass
class Result:
    scenario: Scenario
    messages: pd.DataFrame  # the scenario's messages with t_complete_ns etc. (ns from the replay's t0)
    ports: pd.DataFrame  # port, tx_frames, tx_bytes, drops, max_qlen_pkts, max_backlog_bytes
    samples: pd.DataFrame  # t_ns, port, backlog_bytes, qlen_pkts (non-empty samples only)
    summary: dict
    wall_s: float

    def queue_stats(self, ports: list[str]) -> pd.DataFrame:
        """Per switch port: max and p99 of the sampled backlog (bytes), every sample counted
        (the program writes only non-empty ones; the rest are zeros)."""
        n = int(self.summary["queue_samples"])
        rows = []
        by_port = dict(tuple(self.samples.groupby("port")["backlog_bytes"])) if len(self.samples) else {}
        for p in ports:
            v = by_port.get(p, pd.Series([], dtype=float)).to_numpy(dtype=float)
            full = np.concatenate([v, np.zeros(max(0, n - v.size))])
            rows.append(
                (p, float(full.max()) if full.size else 0.0, float(np.quantile(full, 0.99)) if full.size else 0.0)
            )
        return pd.DataFrame(rows, columns=["port", "max_backlog_bytes", "p99_backlog_bytes"])


def run(sc: Scenario, out_dir: Path, log=print, timeout_s: float = 3600) -> Result:
    exe = binary.build(log=log)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scenario.txt").write_text(sc.text)
    t = time.monotonic()
    try:
        res = subprocess.run(
            [str(exe), str(out_dir / "scenario.txt"), str(out_dir)], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeFailure(f"ns-3 referee did not finish {sc.label} rep {sc.repeat} in {timeout_s:.0f} s") from exc
    wall = time.monotonic() - t
    (out_dir / "referee.log").write_text(res.stdout + res.stderr)
    if res.returncode not in (0, 3):  # 3: ran, but some messages did not complete by the deadline
        raise RuntimeFailure(
            f"ns-3 referee failed on {sc.label} rep {sc.repeat} (exit {res.returncode}): "
            f"{(res.stderr or res.stdout).strip()[-400:]}"
        )
    done = pd.read_csv(out_dir / "messages.csv")
    msgs = sc.messages.merge(done.drop(columns=["qp", "size_bytes", "t_due_ns"]), on="msg", how="left")
    for col in ("t_first_tx_ns", "t_first_rx_ns", "t_last_rx_ns", "t_complete_ns"):
        msgs[col] = msgs[col].where(msgs[col] >= 0)
    summary = {}
    for line in (out_dir / "summary.txt").read_text().splitlines():
        k, v = line.split(" ", 1)
        try:
            summary[k] = float(v)
        except ValueError:
            summary[k] = v
    return Result(
        sc, msgs, pd.read_csv(out_dir / "ports.csv"), pd.read_csv(out_dir / "queue_samples.csv"), summary, wall
    )
