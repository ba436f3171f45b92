"""Raw records -> typed tables (pandas, written as Parquet). Every metric is recomputable
from the raw JSONL that stays in the run folder.

One FabricData is one fabric's replay of one repeat (raw/rep<k>/). Scaling, MTU, burst and
split come from the fabric's entry in the run's experiment.json (the resolved experiment),
never re-derived or re-read from anywhere else.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from ..fabric.model import Fabric
from ..fabric.paths import walk
from ..records import read_json
from ..records import read_jsonl as _jsonl
from . import queuefile

# RoCE frame bytes around a packet's payload: Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4;
# the first packet of a WRITE also carries a RETH (16). An ACK/NAK frame is 62 bytes.
FRAME_OVERHEAD_BYTES, RETH_BYTES, ACK_FRAME_BYTES = 58, 16, 62
CNP_FRAME_BYTES = 74  # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 16 reserved + ICRC 4 (traffic/roce.py)
PROBE_FRAME_MAX_BYTES = 72  # a link probe: 57 + digits(seq) bytes of LLDP (seq < 10**15), rounded up
PACER_SLACK_S = 1e-3  # the agent's pacer may bank one event-loop tick (1 ms) of line rate


def cpu_fractions(rows: list[dict], t_from_ns: int | None = None, t_to_ns: int | None = None) -> dict:
    """Per process and for the whole machine, from a repeat's cpu.jsonl rows: the mean, and the
    max over every sampling interval (about 250 ms: sub-second saturation is not averaged away;
    the last, partial interval counts too). Process shares are of one core; the machine's of all
    its cores.

    Only the intervals that overlap [t_from_ns, t_to_ns] count when given: the sampler starts
    before the pause loop and the agents' set-up (measured in CI: the machine at 92 % for 250 ms
    1.2 s before the first release, at most 31 % while messages were in flight), and CPU spent
    before the first message or after the last cannot stretch a transfer."""
    if t_from_ns is not None or t_to_ns is not None:
        lo = -np.inf if t_from_ns is None else t_from_ns
        hi = np.inf if t_to_ns is None else t_to_ns
        keep = [i for i in range(len(rows) - 1) if rows[i + 1]["t_ns"] > lo and rows[i]["t_ns"] < hi]
        rows = rows[keep[0] : keep[-1] + 2] if keep else []
    out = {}
    if len(rows) < 2:
        return out
    t = np.array([r["t_ns"] for r in rows]) / 1e9
    dt = np.diff(t)
    keys = [k for k in rows[0] if k.endswith("_cpu_s")] + [
        k for k in ("machine_busy_s", "machine_steal_s") if k in rows[0]
    ]
    for key in keys:
        v = np.array([r.get(key) if r.get(key) is not None else np.nan for r in rows], dtype=float)
        scale = float(rows[0].get("cores", 1)) if key.startswith("machine_") else 1.0
        ok = dt > 0.05
        fr = np.diff(v)[ok] / dt[ok] / scale
        total = (v[-1] - v[0]) / (t[-1] - t[0]) / scale
        name = {"machine_busy_s": "machine", "machine_steal_s": "steal"}.get(key, key.replace("_cpu_s", ""))
        # a sample the collector could not read (the process gone, /proc unreadable) is counted: the
        # CPU rule then voids the repeat instead of comparing NaN, which passes every limit
        unread = int(np.isnan(v).sum())
        mx = float(np.nanmax(fr)) if fr.size and not np.isnan(fr).all() else float(total)
        out[name] = {"max": mx, "mean": float(total), "unreadable_samples": unread}
    return out


LINK_UTIL_COLUMNS = ["t_s", "window_s", "port", "carried_util", "carried_beyond_frame", "offered_util"]
LINK_BYTES_COLUMNS = [
    "port",
    "predicted_bytes",
    "measured_bytes",
    "error",
    "control_allowance_bytes",
    "error_beyond_frame",
]


def _shared_strs(values) -> np.ndarray:
    """An object array of these very str objects: tiled into a column of T x P rows, every row refers
    to one of the P strings (a fixed-width unicode array becomes one new str per row in pandas)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


class FabricData:
    """One fabric's raw data of one repeat, as tables."""

    def __init__(self, fdir: Path, resolved: dict, repeat: int = 0):
        self.dir = Path(fdir)
        self.label = self.dir.name
        self.repeat = repeat
        self.resolved = resolved
        self.fabric = Fabric.load(self.dir / "fabric.json")
        self.run = read_json(self.dir / "run.json")
        # which engine recorded it: "emulation" (runs recorded before engines existed) or "ns3"
        self.engine = self.run.get("engine", "emulation")
        raw = self.dir / "raw" / f"rep{repeat}"
        self.raw = raw
        self.plan = read_json(raw / "plan.json")
        clock = read_json(raw / "run_clock.json") if (raw / "run_clock.json").exists() else {}
        self.t0_ns = clock.get("t0_ns", 0)
        self.t_end_ns = clock.get("t_end_ns")  # None: a run recorded before it was kept, or cut short
        # the last message done, before verify-paths and the failures' undoing (runs before it: t_end_ns)
        self.t_replay_end_ns = clock.get("t_replay_end_ns", self.t_end_ns)
        self.messages_posted = clock.get("messages", 0)
        sc = resolved["scaling"]
        self.dilation, self.rate_scale, self.size_scale = sc["dilation"], sc["rate_scale"], sc["size_scale"]
        self.mtu_bytes = resolved["emulation"]["mtu_bytes"]
        self.burst_bytes = resolved["emulation"]["burst_bytes"] or self.mtu_bytes + 14
        self.subflows_per_transfer = resolved["subflows_per_transfer"]
        self.transfers_raw = _jsonl(raw / "transfers.jsonl")
        self._queues: queuefile.QueueFile | None = None  # read on first use (queues())
        self._queue_meta: tuple[dict | None, dict | None] | None = None
        self.cpu_rows = _jsonl(raw / "cpu.jsonl")
        self.counters = read_json(raw / "counters.json") if (raw / "counters.json").exists() else {}
        drops = read_json(raw / "drops.json") if (raw / "drops.json").exists() else None
        self.drops = drops["delta"] if drops else None  # None: not recorded (the drop rules then void)
        self.drops_unreadable = drops.get("unreadable", []) if drops else []
        self._port = {p.name: p for p in self.fabric.ports}

    @property
    def voided_attempts(self) -> list[dict]:
        """Attempts of this repeat the runner voided and re-took (hypervisor steal), with why."""
        return next(
            (r.get("voided_attempts", []) for r in self.run.get("replays", []) if r["repeat"] == self.repeat), []
        )

    @property
    def replay_status(self) -> str | None:
        return next((r["status"] for r in self.run.get("replays", []) if r["repeat"] == self.repeat), None)

    def port_rate_bps(self, ports) -> np.ndarray:
        """Emulated line rate of each named port."""
        return np.array([self._port[n].rate_bps * self.rate_scale for n in ports], dtype=float)

    # ---- transfers and requests -----------------------------------------------------
    def messages(self) -> pd.DataFrame:
        df = pd.DataFrame(self.transfers_raw)
        if df.empty:
            return df
        df["t_post_s"] = (df["t_post_ns"] - self.t0_ns) / 1e9
        df["completion_s"] = (df["t_complete_ns"] - df["t_post_ns"]) / 1e9
        df["completion_real_s"] = df["completion_s"] / self.dilation
        due = df["t_due_ns"] if "t_due_ns" in df else df["t_post_ns"]
        df["release_lateness_s"] = (df["t_post_ns"] - due.fillna(df["t_post_ns"])) / 1e9
        # the serialisation floor: an exact shaper delivers no more than one bucket (a frame)
        # plus the pacer's slack ahead of line rate, so the wire time cannot be shorter
        df["wire_bytes"] = df["size_bytes"] + FRAME_OVERHEAD_BYTES * df["packets"] + RETH_BYTES
        rate = self.port_rate_bps(df["src"])
        df["wire_s"] = (df["t_last_rx_ns"] - df["t_first_tx_ns"]) / 1e9
        df["floor_s"] = np.maximum(0.0, (df["wire_bytes"] - self.burst_bytes) * 8 / rate - PACER_SLACK_S)
        df["below_floor"] = df["wire_s"] < df["floor_s"]
        return df

    def requests(self) -> pd.DataFrame:
        """Per request: the TTFT components, each marked in its column name by what it is —
        prefill wait and compute and the first decode step are modelled, KV transfer measured."""
        reqs = pd.DataFrame(self.plan["requests"]).drop(columns=["transfers"])
        msgs = self.messages()
        transfers = pd.DataFrame(self.plan["transfers"])
        reqs["shards"] = reqs["req"].map(transfers.groupby("req").size())
        reqs["kv_real_bytes"] = reqs["req"].map(transfers.groupby("req")["real_bytes"].sum())
        reqs["kv_ready_s"] = reqs["t_arrival_s"] + reqs["prefill_wait_s"] + reqs["prefill_s"]
        if msgs.empty:
            reqs["kv_done_s"] = reqs["kv_done_on_time_s"] = np.nan
        else:
            # what each message's completion would have been had the agent released it on time
            on_time_ns = msgs["t_complete_ns"] - (msgs["release_lateness_s"] * 1e9).round().astype("int64")
            per_req = (
                msgs.assign(on_time_ns=on_time_ns)
                .groupby("req")
                .agg(
                    done_ns=("t_complete_ns", "max"),
                    on_time_ns=("on_time_ns", "max"),
                    n=("msg_id", "size"),
                    ok=("integrity_ok", "all"),
                )
            )
            expected = transfers.groupby("req").size() * self.subflows_per_transfer
            done = per_req["n"] >= expected.reindex(per_req.index)
            reqs["kv_done_s"] = reqs["req"].map(((per_req["done_ns"] - self.t0_ns) / 1e9).where(done))
            reqs["kv_done_on_time_s"] = reqs["req"].map(((per_req["on_time_ns"] - self.t0_ns) / 1e9).where(done))
            reqs["integrity_ok"] = reqs["req"].map(per_req["ok"])
        reqs["kv_transfer_s"] = reqs["kv_done_s"] - reqs["kv_ready_s"]
        reqs["kv_transfer_on_time_real_s"] = (reqs["kv_done_on_time_s"] - reqs["kv_ready_s"]) / self.dilation
        reqs["ttft_s"] = reqs["kv_done_s"] + reqs["first_decode_step_s"] - reqs["t_arrival_s"]
        for col in ("kv_transfer", "ttft", "prefill_wait", "prefill", "first_decode_step"):
            reqs[f"{col}_real_s"] = reqs[f"{col}_s"] / self.dilation
        return reqs

    # ---- queues ---------------------------------------------------------------------
    def queues(self) -> queuefile.QueueFile:
        """The raw queue samples as arrays, read on first use and kept until release_queues().
        Why lazily: the report loads every fabric before it builds the first one's tables, and a
        256-GPU fabric's samples are about 0.6 GB even as arrays (queuefile.py)."""
        if self._queues is None:
            self._queues = queuefile.read(self.raw / "queues.jsonl")
            self._queue_meta = (self._queues.header, self._queues.footer)
        return self._queues

    def release_queues(self) -> None:
        """Let the sample arrays go (header and footer stay); the next use reads the file again."""
        self._queues = None

    @property
    def queue_header(self) -> dict | None:
        if self._queue_meta is None:
            self.queues()
        return self._queue_meta[0]

    @property
    def queue_footer(self) -> dict | None:
        if self._queue_meta is None:
            self.queues()
        return self._queue_meta[1]

    def queue_arrays(self):
        """(t_s array, ports, backlog (T,P), qlen, drops, tx_bytes) from the raw samples."""
        qf = self.queues()
        if not qf.samples or qf.header is None:
            return None
        t = (qf.t_ns - self.t0_ns) / 1e9
        c = qf.counters
        return t, qf.header["ports"], c["b"], c["q"], c["d"], c["x"]

    def queue_samples(self) -> pd.DataFrame:
        """Every sample of every switch egress queue: emulated bytes and frames, and the
        real-equivalent queueing delay (backlog / emulated rate / dilation), which does not
        depend on the size scale."""
        arr = self.queue_arrays()
        if arr is None:
            return pd.DataFrame()
        t, ports, b, q, d, x = arr
        T, P = b.shape
        # object arrays of the P names, tiled: every row refers to the same P str objects. Why: tiling the
        # list made a fixed-width unicode array that pandas turned into one new str per row, 2 x 19 M
        # strings (about 2.4 GB) for a 256-GPU fabric's samples; the column (dtype object, values) is the same
        names, tiers = _shared_strs(ports), _shared_strs(self.port_tiers(ports))
        rate = np.tile(self.port_rate_bps(ports), T)
        # copy=False: the counter columns are the sample arrays themselves (flattened views), not a second copy
        return pd.DataFrame(
            {
                "t_s": np.repeat(t, P),
                "port": np.tile(names, T),
                "tier": np.tile(tiers, T),
                "backlog_bytes": b.ravel(),
                "qlen_pkts": q.ravel(),
                "drops_total": d.ravel(),
                "sent_bytes_total": x.ravel(),
                "queue_delay_real_s": b.ravel() * 8.0 / rate / self.dilation,
            },
            copy=False,
        )

    def port_tiers(self, ports) -> list[str]:
        out = []
        for name in ports:
            p = self._port[name]
            sw = self.fabric.nodes[p.node]
            out.append(f"{sw.group} {'down' if p.role == 'down' else 'up/fabric'}")
        return out

    def link_util(self, window_s: float) -> pd.DataFrame:
        """Per switch egress port and window: carried = sent / capacity; offered = (sent +
        backlog growth + dropped) / capacity — above 1 when more arrives than the link carries.

        A sample's counters were read somewhere during its netlink dump, which a descheduled vCPU
        can stretch; the window is taken as the longest span its counters can cover (from the
        first sample's start to the end of the last one's dump), so carried utilisation is never
        overstated by a late read."""
        arr = self.queue_arrays()
        if arr is None or (self.queue_header or {}).get("counters_at") == "end":
            return pd.DataFrame(columns=LINK_UTIL_COLUMNS)  # ns-3 counts sent bytes per port only at the end
        t, ports, b, q, d, x = arr
        dump = self.queues().dump_ns / 1e9
        rate = self.port_rate_bps(ports)
        frame = self.mtu_bytes + 14
        edges = np.arange(t[0], t[-1] + window_s, window_s)
        idx = np.unique(np.clip(np.searchsorted(t, edges), 0, len(t) - 1))
        i0, i1 = idx[:-1], idx[1:]
        dt_s = t[i1] + dump[i1] - t[i0]
        keep = ~(dt_s <= 0)  # a window no sample spans is skipped
        i0, i1, dt_s = i0[keep], i1[keep], dt_s[keep]
        if not len(i0):
            return pd.DataFrame([], columns=LINK_UTIL_COLUMNS)
        # (windows, ports) at once, in the row order of a loop over windows then ports. Why not one tuple per
        # row: 1.9 M rows of Python floats for a 256-GPU fabric were 0.6 GB and seconds of the report
        sent = (x[i1] - x[i0]) * 8.0
        grow = (b[i1] - b[i0]) * 8.0
        drop = (d[i1] - d[i0]) * 8.0 * frame
        cap = rate * dt_s[:, None]
        beyond = sent - 16.0 * self.burst_bytes
        names = _shared_strs(ports)
        W, P = sent.shape
        # carried_beyond_frame: what the link carried beyond the two frames a token bucket of one
        # frame's depth can send ahead of line rate (the banked frame, and the one that takes the
        # bucket negative) — bytes in any window <= rate x window + 2 frames, so this cannot pass 1
        return pd.DataFrame(
            {
                "t_s": np.repeat(t[i0], P),
                "window_s": np.repeat(dt_s, P),
                "port": np.tile(names, W),
                "carried_util": (sent / cap).ravel(),
                "carried_beyond_frame": (np.where(beyond > 0.0, beyond, 0.0) / cap).ravel(),  # = max(0.0, beyond)
                "offered_util": ((sent + grow + drop) / cap).ravel(),
            },
            columns=LINK_UTIL_COLUMNS,
        )

    def backlog_episodes(self, xoff_bytes: int) -> pd.DataFrame:
        """PFC stand-in (this kernel cannot pause): per port, episodes with backlog >= XOFF;
        durations in emulated and real seconds."""
        arr = self.queue_arrays()
        if arr is None:
            return pd.DataFrame(columns=["port", "events", "total_s", "max_s", "total_real_s", "max_real_s"])
        t, ports, b, *_ = arr
        above = b >= xoff_bytes
        rows = []
        for j, port in enumerate(ports):
            a = above[:, j].astype(np.int8)
            starts = np.nonzero(np.diff(np.concatenate(([0], a))) == 1)[0]
            ends = np.nonzero(np.diff(np.concatenate((a, [0]))) == -1)[0]
            durs = t[np.minimum(ends + 1, len(t) - 1)] - t[starts] if len(starts) else np.array([])
            total, mx = (float(durs.sum()), float(durs.max())) if len(durs) else (0.0, 0.0)
            rows.append((port, len(starts), total, mx, total / self.dilation, mx / self.dilation))
        return pd.DataFrame(rows, columns=["port", "events", "total_s", "max_s", "total_real_s", "max_real_s"])

    def nic_bytes(self) -> pd.DataFrame:
        msgs = self.messages()
        if msgs.empty:
            return pd.DataFrame(columns=["port", "sent_bytes", "received_bytes"])
        sent = msgs.groupby("src")["size_bytes"].sum().rename("sent_bytes")
        recv = msgs.groupby("dst")["size_bytes"].sum().rename("received_bytes")
        out = pd.concat([sent, recv], axis=1).fillna(0).astype(np.int64).reset_index()
        return out.rename(columns={"index": "port"})

    def link_bytes(self) -> pd.DataFrame:
        """Model vs emulation, link by link: every QP's bytes (data forward, retransmissions
        included, from the agent's counters; ACK/NAK and CNP frames back) walked through the model's
        tables with the QP's actual UDP source port, summed per switch egress port, against the
        bytes each egress queue counted during the replay."""
        fab = self.fabric
        if self.engine == "ns3":  # ns-3 forwards by the same entries and counts no bytes per QP: not compared
            return pd.DataFrame(columns=LINK_BYTES_COLUMNS)
        ports = self.queue_header["ports"] if self.queue_header else []
        predicted = dict.fromkeys(ports, 0.0)
        qps = self.counters.get("qps", [])
        if qps:
            ids = {p.name: p.id for p in fab.ports}
            src = np.array([ids[q["src"]] for q in qps] + [ids[q["dst"]] for q in qps])
            dst = np.array([ids[q["dst"]] for q in qps] + [ids[q["src"]] for q in qps])
            sport = np.array([q["sport"] for q in qps] * 2)
            volume = np.array(
                [q["requester"]["bytes"] for q in qps]
                + [
                    ACK_FRAME_BYTES * (q["responder"]["acks"] + q["responder"]["naks"])
                    + CNP_FRAME_BYTES * q.get("ecn", {}).get("cnps_tx", 0)  # DCQCN's CNPs go back too
                    for q in qps
                ],
                dtype=float,
            )
            w = walk(fab, src, dst, sport)
            ends = fab.link_ends
            for f in range(src.size):
                for dl in w.dlinks[f]:
                    if dl < 0:
                        break
                    egress = fab.ports[int(ends[dl // 2, dl % 2])]  # the sending end of the direction
                    if egress.name in predicted:
                        predicted[egress.name] += volume[f]
        arr = self.queue_arrays()
        measured = dict(zip(ports, (arr[5][-1] - arr[5][0]).tolist())) if arr is not None else {}
        rows = [(p, predicted[p], float(measured.get(p, 0))) for p in ports]
        df = pd.DataFrame(rows, columns=["port", "predicted_bytes", "measured_bytes"])
        diff = df["measured_bytes"] - df["predicted_bytes"]
        df["error"] = np.where(df["predicted_bytes"] > 0, diff / df["predicted_bytes"].clip(lower=1), np.nan)
        # the controller's link probes (failure runs) are not replay traffic: up to this many bytes more
        window_s = float(arr[0][-1] - arr[0][0]) if arr is not None and len(arr[0]) else 0.0
        df["control_allowance_bytes"] = [self.probe_bytes_bound(p, window_s) for p in ports]
        # beyond one frame: control frames (LLDP, ~70 B each) are not replay traffic, and a
        # misrouted message moves at least a whole frame; fewer bytes than the model are never allowed for
        excess = np.maximum(-diff - self.burst_bytes, diff - self.burst_bytes - df["control_allowance_bytes"]).clip(
            lower=0
        )
        df["error_beyond_frame"] = np.where(
            df["predicted_bytes"] > 0, excess / df["predicted_bytes"].clip(lower=1), np.nan
        )
        return df

    def probe_bytes_bound(self, port: str, window_s: float) -> float:
        """Bytes of the controller's link probes a switch-to-switch egress port can carry in window_s:
        failure runs probe every cable direction at detect.probe_hz (controllers/zlab_routes.py: one LLDP
        frame of 57 + digits(seq) bytes each), plus one probe either side of the window; 0 elsewhere."""
        hz = self.probe_hz
        p = self._port[port]
        link = self.fabric.port_link[p.id]
        if (
            not hz
            or link < 0
            or not all(
                self.fabric.nodes[self.fabric.ports[int(e)].node].role == "switch" for e in self.fabric.link_ends[link]
            )
        ):
            return 0.0
        return (hz * window_s + 2) * PROBE_FRAME_MAX_BYTES

    @functools.cached_property
    def probe_hz(self) -> float:
        """Read once: failures.json is ~0.6 MB at 256 GPUs, and link_bytes asks for every port."""
        path = self.dir / "failures.json"
        if not path.exists():
            return 0.0
        return float(read_json(path).get("detect", {}).get("probe_hz") or 0.0)

    # ---- fidelity -------------------------------------------------------------------
    def cpu_fractions(self) -> dict:
        """Over the replay only: from its t0 (the first due time) to its recorded end."""
        return cpu_fractions(self.cpu_rows, self.t0_ns or None, self.t_replay_end_ns)

    def write_tables(self, out: Path, xoff_bytes: int, window_s: float) -> dict[str, pd.DataFrame]:
        out.mkdir(parents=True, exist_ok=True)
        tables = {
            "messages": self.messages(),
            "requests": self.requests(),
            "queue_samples": self.queue_samples(),
            "link_util": self.link_util(window_s),
            "backlog_episodes": self.backlog_episodes(xoff_bytes),
            "nic_bytes": self.nic_bytes(),
            "link_bytes": self.link_bytes(),
        }
        for name, df in tables.items():
            if not df.empty:
                # a shallow copy with the repeat column, not assign()'s deep copy of every column (1.2 GB
                # for a 256-GPU fabric's queue samples); the returned tables stay without it
                written = df.copy(deep=False)
                written["repeat"] = self.repeat
                written.to_parquet(out / f"{self.label}_rep{self.repeat}_{name}.parquet", index=False)
        return tables
