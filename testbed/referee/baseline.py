"""`zlab referee RUN --baseline`: ns-3's own TCP (NewReno; zlab_tcp_baseline.cc) over each repeat's
fabric, flow entries and message schedule, beside zlab's transport replayed in ns-3 (zlab_referee.cc,
serialising links, the same scale). A sanity baseline, not an equality: the same bytes should cross
the same links (each QP is one TCP connection whose source port is the QP's, so the masked
source-port entries route it on the QP's path), and completion times should be of the same order
(TCP starts slowly and acknowledges every other segment)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import RuntimeFailure, UserInputError
from ..records import read_json, write_json
from . import binary, scenario, simulate

# a port "carries data" in the comparison when zlab's replay sent at least this many full frames on it
# (ports that carry only acknowledgements differ by design: TCP acknowledges every other segment)
DATA_FRAMES = 10
BYTES_BAND = 0.02  # same bytes per data port: TCP/IP headers (52 B + 2 B PPP) are 4 B shorter than zlab's 58 B


def _kv(msgs: pd.DataFrame, done_col: str) -> pd.Series:
    """Per request: the last of its messages, counted from the planned release (seconds)."""
    c = (msgs[done_col] - msgs["t_due_ns"]) / 1e9
    return msgs.assign(c=c).groupby("req")["c"].max()


def run_tcp(sc: scenario.Scenario, out_dir: Path, log=print, timeout_s: float = 600) -> pd.DataFrame:
    exe = binary.build(log=log, source=binary.BASELINE_SOURCE, binary=binary.BASELINE_BINARY)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scenario.txt").write_text(sc.text)
    res = subprocess.run(
        [str(exe), str(out_dir / "scenario.txt"), str(out_dir)], capture_output=True, text=True, timeout=timeout_s
    )
    (out_dir / "baseline.log").write_text(res.stdout + res.stderr)
    if res.returncode not in (0, 3):
        raise RuntimeFailure(
            f"ns-3 TCP baseline failed on {sc.label} rep {sc.repeat} (exit {res.returncode}): "
            f"{(res.stderr or res.stdout).strip()[-400:]}"
        )
    done = pd.read_csv(out_dir / "messages.csv")
    msgs = sc.messages.merge(done[["msg", "t_done_ns"]], on="msg", how="left")
    msgs["t_done_ns"] = msgs["t_done_ns"].where(msgs["t_done_ns"] >= 0)
    return msgs, pd.read_csv(out_dir / "ports.csv")


def compare_repeat(root: Path, exp: dict, label: str, rep: int, log=print) -> dict:
    """One fabric's repeat: TCP against zlab's transport, both in ns-3 with serialising links."""
    sc = scenario.build(root / label, exp, rep, "same", link_model="serialiser")
    zres = simulate.run(sc, root / "referee" / "baseline" / label / f"rep{rep}" / "zlab", log=log)
    tmsgs, tports = run_tcp(sc, root / "referee" / "baseline" / label / f"rep{rep}" / "tcp", log=log)
    z = zres.ports.set_index("port")["tx_bytes"]
    t = tports.set_index("port")["tx_bytes"].reindex(z.index).fillna(0)
    frame = sc.payload_per_packet + scenario.FRAME["frame_overhead_bytes"]
    data = z[z >= DATA_FRAMES * frame].index
    err = ((t[data] - z[data]).abs() / z[data]) if len(data) else pd.Series(dtype=float)
    zk, tk = _kv(zres.messages, "t_last_rx_ns"), _kv(tmsgs, "t_done_ns")
    return {
        "label": label,
        "repeat": rep,
        "messages": int(len(tmsgs)),
        "tcp_incomplete": int(tmsgs["t_done_ns"].isna().sum()),
        "data_ports": int(len(data)),
        "data_bytes_max_error": float(err.max()) if len(err) else None,
        "data_bytes_zlab": float(z[data].sum()),
        "data_bytes_tcp": float(t[data].sum()),
        "kv_p50_s": {"zlab": float(zk.quantile(0.5)), "tcp": float(tk.quantile(0.5))},
        "kv_p99_s": {"zlab": float(zk.quantile(0.99)), "tcp": float(tk.quantile(0.99))},
    }


def baseline(root: Path, repeats: int | None = None, log=print) -> dict:
    root = Path(root)
    if not (root / "experiment.json").exists():
        raise UserInputError(f"{root}: not a zlab run folder (no experiment.json)")
    exp = read_json(root / "experiment.json")
    rows = []
    for label in exp["fabrics"]:
        if not (root / label / "fabric.json").exists():
            continue
        n = len(exp["fabrics"][label]["repeats"])
        for rep in range(n if repeats is None else min(repeats, n)):
            if (root / label / "raw" / f"rep{rep}" / "plan.json").exists():
                rows.append(compare_repeat(root, exp, label, rep, log=log))
    if not rows:
        raise UserInputError(f"{root}: no repeat with raw records")
    out = {
        "repeats": rows,
        "data_frames_threshold": DATA_FRAMES,
        "bytes_band": BYTES_BAND,
        "max_data_bytes_error": float(np.nanmax([r["data_bytes_max_error"] or 0 for r in rows])),
        "tcp_incomplete": int(sum(r["tcp_incomplete"] for r in rows)),
    }
    out["same_bytes"] = out["max_data_bytes_error"] <= BYTES_BAND
    write_json(root / "referee" / "baseline.json", out)
    return out
