"""Raw records -> typed tables (pandas, written as Parquet). Every metric is recomputable
from the raw JSONL that stays in the run folder.

Scaling, MTU and split come from the fabric's entry in the run's experiment.json (the resolved
experiment), never re-derived or re-read from anywhere else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..fabric.model import Fabric
from ..records import read_json, read_jsonl as _jsonl


class FabricData:
    """One fabric's raw data of a run, as tables."""

    def __init__(self, fdir: Path, resolved: dict):
        self.dir = Path(fdir)
        self.label = self.dir.name
        self.resolved = resolved
        self.fabric = Fabric.load(self.dir / "fabric.json")
        self.run = read_json(self.dir / "run.json")
        raw = self.dir / "raw"
        self.plan = read_json(raw / "plan.json")
        clock = read_json(raw / "run_clock.json") if (raw / "run_clock.json").exists() else {}
        self.t0_ns = clock.get("t0_ns", 0)
        self.messages_posted = clock.get("messages", 0)
        self.dilation = resolved["scaling"]["dilation"]
        self.rate_scale = resolved["scaling"]["rate_scale"]
        self.size_scale = resolved["scaling"]["size_scale"]
        self.mtu_bytes = resolved["emulation"]["mtu_bytes"]
        self.subflows_per_transfer = resolved["subflows_per_transfer"]
        self.transfers_raw = _jsonl(raw / "transfers.jsonl")
        q = _jsonl(raw / "queues.jsonl")
        self.queue_header = next((r for r in q if r.get("type") == "header"), None)
        self.queue_footer = next((r for r in q if r.get("type") == "footer"), None)
        self.queue_rows = [r for r in q if "t_ns" in r]
        self.cpu_rows = _jsonl(raw / "cpu.jsonl")
        self.counters = read_json(raw / "counters.json") if (raw / "counters.json").exists() else {}

    # ---- transfers and requests -----------------------------------------------------
    def messages(self) -> pd.DataFrame:
        df = pd.DataFrame(self.transfers_raw)
        if df.empty:
            return df
        df["t_post_s"] = (df["t_post_ns"] - self.t0_ns) / 1e9
        df["completion_s"] = (df["t_complete_ns"] - df["t_post_ns"]) / 1e9
        df["completion_real_s"] = df["completion_s"] / self.dilation
        return df

    def requests(self) -> pd.DataFrame:
        reqs = pd.DataFrame(self.plan["requests"]).drop(columns=["transfers"])
        msgs = self.messages()
        n_shards = pd.DataFrame(self.plan["transfers"]).groupby("req").size()
        reqs["shards"] = reqs["req"].map(n_shards)
        reqs["kv_real_bytes"] = reqs["req"].map(pd.DataFrame(self.plan["transfers"]).groupby("req")["real_bytes"].sum())
        reqs["kv_ready_s"] = reqs["t_arrival_s"] + reqs["prefill_wait_s"] + reqs["prefill_s"]
        if msgs.empty:
            reqs["kv_done_s"] = np.nan
        else:
            per_req = msgs.groupby("req").agg(done_ns=("t_complete_ns", "max"), n=("msg_id", "size"),
                                              ok=("integrity_ok", "all"))
            expected = pd.DataFrame(self.plan["transfers"]).groupby("req").size() * self.subflows_per_transfer
            done = per_req["n"] >= expected.reindex(per_req.index)
            reqs["kv_done_s"] = reqs["req"].map(((per_req["done_ns"] - self.t0_ns) / 1e9).where(done))
            reqs["integrity_ok"] = reqs["req"].map(per_req["ok"])
        reqs["kv_transfer_s"] = reqs["kv_done_s"] - reqs["kv_ready_s"]
        reqs["ttft_s"] = reqs["kv_done_s"] + reqs["first_decode_step_s"] - reqs["t_arrival_s"]
        for col in ("kv_transfer_s", "ttft_s", "prefill_wait_s", "prefill_s"):
            reqs[col.replace("_s", "_real_s")] = reqs[col] / self.dilation
        return reqs

    # ---- queues ---------------------------------------------------------------------
    def queue_arrays(self):
        """(t_s array, ports, backlog (T,P), qlen, drops, tx_bytes) from the raw samples."""
        if not self.queue_rows or self.queue_header is None:
            return None
        t = (np.array([r["t_ns"] for r in self.queue_rows]) - self.t0_ns) / 1e9
        get = lambda k: np.array([r[k] for r in self.queue_rows], dtype=np.int64)  # noqa: E731
        return t, self.queue_header["ports"], get("b"), get("q"), get("d"), get("x")

    def queue_samples(self) -> pd.DataFrame:
        arr = self.queue_arrays()
        if arr is None:
            return pd.DataFrame()
        t, ports, b, q, d, x = arr
        T, P = b.shape
        tiers = self.port_tiers(ports)
        return pd.DataFrame({"t_s": np.repeat(t, P), "port": np.tile(ports, T), "tier": np.tile(tiers, T),
                             "backlog_bytes": b.ravel(), "qlen_pkts": q.ravel(), "drops_total": d.ravel(),
                             "sent_bytes_total": x.ravel()})

    def port_tiers(self, ports) -> list[str]:
        by_name = {p.name: p for p in self.fabric.ports}
        out = []
        for name in ports:
            p = by_name[name]
            sw = self.fabric.nodes[p.node]
            out.append(f"{sw.group} {'down' if p.role == 'down' else 'up/fabric'}")
        return out

    def port_rate_bps(self, ports) -> np.ndarray:
        by_name = {p.name: p for p in self.fabric.ports}
        return np.array([by_name[n].rate_bps * self.rate_scale for n in ports], dtype=float)

    def link_util(self, window_s: float) -> pd.DataFrame:
        """Per switch egress port and window: carried = sent / capacity; offered = (sent +
        backlog growth + dropped) / capacity — above 1 when more arrives than the link carries."""
        arr = self.queue_arrays()
        if arr is None:
            return pd.DataFrame()
        t, ports, b, q, d, x = arr
        rate = self.port_rate_bps(ports)
        frame = self.mtu_bytes + 14
        edges = np.arange(t[0], t[-1] + window_s, window_s)
        idx = np.searchsorted(t, edges)
        idx = np.unique(np.clip(idx, 0, len(t) - 1))
        rows = []
        for i0, i1 in zip(idx[:-1], idx[1:]):
            dt_s = t[i1] - t[i0]
            if dt_s <= 0:
                continue
            sent = (x[i1] - x[i0]) * 8.0
            grow = (b[i1] - b[i0]) * 8.0
            drop = (d[i1] - d[i0]) * 8.0 * frame
            cap = rate * dt_s
            for j, port in enumerate(ports):
                rows.append((t[i0], port, sent[j] / cap[j], (sent[j] + grow[j] + drop[j]) / cap[j]))
        return pd.DataFrame(rows, columns=["t_s", "port", "carried_util", "offered_util"])

    def pfc_standin(self, xoff_bytes: int) -> pd.DataFrame:
        """PFC stand-in (this kernel cannot pause): per port, episodes with backlog >= XOFF."""
        arr = self.queue_arrays()
        if arr is None:
            return pd.DataFrame(columns=["port", "events", "total_s", "max_s"])
        t, ports, b, *_ = arr
        above = b >= xoff_bytes
        rows = []
        for j, port in enumerate(ports):
            a = above[:, j].astype(np.int8)
            starts = np.nonzero(np.diff(np.concatenate(([0], a))) == 1)[0]
            ends = np.nonzero(np.diff(np.concatenate((a, [0]))) == -1)[0]
            durs = t[np.minimum(ends + 1, len(t) - 1)] - t[starts] if len(starts) else np.array([])
            rows.append((port, len(starts), float(durs.sum()) if len(durs) else 0.0,
                         float(durs.max()) if len(durs) else 0.0))
        return pd.DataFrame(rows, columns=["port", "events", "total_s", "max_s"])

    def nic_bytes(self) -> pd.DataFrame:
        msgs = self.messages()
        if msgs.empty:
            return pd.DataFrame(columns=["port", "sent_bytes", "received_bytes"])
        sent = msgs.groupby("src")["size_bytes"].sum().rename("sent_bytes")
        recv = msgs.groupby("dst")["size_bytes"].sum().rename("received_bytes")
        out = pd.concat([sent, recv], axis=1).fillna(0).astype(np.int64).reset_index()
        return out.rename(columns={"index": "port"})

    # ---- fidelity -------------------------------------------------------------------
    def cpu_fractions(self, window_s: float = 1.0) -> dict:
        rows = self.cpu_rows
        out = {}
        if len(rows) < 2:
            return out
        t = np.array([r["t_ns"] for r in rows]) / 1e9
        for key in ("ovs_cpu_s", "agent_cpu_s", "collector_cpu_s"):
            v = np.array([r.get(key) if r.get(key) is not None else np.nan for r in rows], dtype=float)
            edges = np.arange(t[0], t[-1] + 1e-9, window_s)
            ii = np.unique(np.searchsorted(t, edges).clip(0, len(t) - 1))
            fr = [(v[b] - v[a]) / (t[b] - t[a]) for a, b in zip(ii[:-1], ii[1:]) if t[b] > t[a]]
            total = (v[-1] - v[0]) / (t[-1] - t[0])
            out[key.replace("_cpu_s", "")] = {"max": float(np.nanmax(fr)) if fr else float(total),
                                              "mean": float(total)}
        return out

    def write_tables(self, out: Path, xoff_bytes: int, window_s: float) -> dict[str, pd.DataFrame]:
        out.mkdir(parents=True, exist_ok=True)
        tables = {"messages": self.messages(), "requests": self.requests(), "queue_samples": self.queue_samples(),
                  "link_util": self.link_util(window_s), "pfc_standin": self.pfc_standin(xoff_bytes),
                  "nic_bytes": self.nic_bytes()}
        for name, df in tables.items():
            if not df.empty:
                df.to_parquet(out / f"{self.label}_{name}.parquet", index=False)
        return tables
