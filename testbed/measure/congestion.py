"""What operators of a lossless RoCE fabric watch, from an engine-ns3 run with the congestion
machinery on: PFC pauses, paused time, ECN marks and CNPs, per port, per switch group and per
fabric, with 95 % intervals over repeats.

Why a module of its own: these signals exist only where the packet engine ran PFC/ECN/DCQCN
(run.json "congestion": true); the emulation's report has none. It reads the program's raw
outputs in raw/rep<k>/ns3/ (ports.csv with the congestion columns, pfc.csv, cnp.csv) and fails
closed: a run that says the machinery was on but lacks one of them raises, it never reads as zero.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import RuntimeFailure
from ..fabric.paths import walk
from .stats import ci95

COLUMNS = ("marks", "cnps_rx", "cnps_tx", "pauses_rx", "paused_ns", "headroom_drops", "max_ingress_bytes")


class CongestionRecordsMissing(RuntimeFailure):
    """The run ran the congestion machinery, but a repeat's records of it are missing or damaged."""


def _read(path: Path, need: tuple[str, ...]) -> pd.DataFrame:
    if not path.exists():
        raise CongestionRecordsMissing(f"{path}: missing; the run ran the congestion machinery, so the result is void")
    t = pd.read_csv(path)
    lacking = [c for c in need if c not in t.columns]
    if lacking:
        raise CongestionRecordsMissing(f"{path}: no column {lacking[0]!r}; the result is void")
    return t


def port_table(fd) -> pd.DataFrame:
    """One repeat's ports: the program's counters, the PAUSE frames each switch port sent, and
    where the port sits (its node, group, tier; 'nic' for GPU ports)."""
    d = Path(fd.raw) / "ns3"
    ports = _read(d / "ports.csv", ("port", "drops", "max_backlog_bytes", *COLUMNS))
    pfc = _read(d / "pfc.csv", ("t_ns", "port", "peer_port", "event"))
    sent = pfc[pfc.event == 1].groupby("port").size()
    fab = fd.fabric
    by_name = {p.name: p for p in fab.ports}
    unknown = sorted(set(ports.port) - set(by_name))
    if unknown:
        raise CongestionRecordsMissing(
            f"{d / 'ports.csv'}: port {unknown[0]!r} is not in the fabric; the result is void"
        )
    node = [fab.nodes[by_name[n].node] for n in ports.port]
    ports["node"] = [n.name for n in node]
    ports["group"] = [n.group if n.role == "switch" else "nic" for n in node]
    ports["pause_frames_sent"] = [int(sent.get(n, 0)) for n in ports.port]
    return ports


PFC_COLUMNS = ("t_ns", "port", "peer_port", "event", "cause_port")


def paused_intervals(fd) -> pd.DataFrame:
    """(port, t_start_ns, t_end_ns, by, cause) of every pause of an upstream port, from one
    repeat's pfc.csv (see intervals_from_pfc)."""
    return intervals_from_pfc(_read(Path(fd.raw) / "ns3" / "pfc.csv", PFC_COLUMNS), end_ns(fd))


def intervals_from_pfc(pfc: pd.DataFrame, end: int) -> pd.DataFrame:
    """(port, t_start_ns, t_end_ns, by, cause) of every pause of an upstream port: a PAUSE sent to
    it starts one, the next RESUME ends it (an open one ends at `end`); `by` is the switch ingress
    port that sent it and `cause` the egress port of that switch holding most of the bytes that
    came in through `by` when it did. Sender-side times: the peer holds one link delay later."""
    rows, open_at = [], {}
    cause = pfc["cause_port"] if "cause_port" in pfc else pd.Series([None] * len(pfc), index=pfc.index)
    pfc = pfc.assign(cause_port=cause.where(cause.notna(), None))
    for r in pfc.sort_values("t_ns", kind="stable").itertuples():
        if r.event == 1:
            open_at.setdefault(r.peer_port, (int(r.t_ns), r.port, r.cause_port))
        elif r.peer_port in open_at:
            t0, by, why = open_at.pop(r.peer_port)
            rows.append((r.peer_port, t0, int(r.t_ns), by, why))
    rows += [(p, t, end, by, why) for p, (t, by, why) in open_at.items()]
    return pd.DataFrame(rows, columns=["port", "t_start_ns", "t_end_ns", "by", "cause"])


def with_roots(iv: pd.DataFrame) -> pd.DataFrame:
    """Each pause's congestion root: the egress port whose backlog it ultimately reacts to. A
    pause's cause port that was not itself held when the PAUSE was sent is the root; a cause port
    that was held (a pause upstream of a pause) takes the root of the pause holding it. Why: PFC's
    victims are the flows it stops that never cross that root (head-of-line blocking), and only
    following the chain back tells a spine port held by a leaf from a congested one."""
    if iv.empty:
        return iv.assign(root=pd.Series(dtype=object))
    if iv["cause"].isna().any():
        raise CongestionRecordsMissing("pfc.csv: a PAUSE without a cause_port; the pause roots are void")
    by_port: dict[str, list[int]] = {}
    for i, r in enumerate(iv.itertuples(index=False)):
        by_port.setdefault(r.port, []).append(i)
    rows = list(iv.itertuples(index=False))
    roots: list[str | None] = [None] * len(rows)

    def root(i: int, seen: frozenset) -> str:
        if roots[i] is not None:
            return roots[i]
        r = rows[i]
        held = [j for j in by_port.get(r.cause, []) if rows[j].t_start_ns <= r.t_start_ns < rows[j].t_end_ns]
        held = [j for j in held if j not in seen]
        out = root(held[0], seen | {i}) if held else r.cause
        roots[i] = out
        return out

    for i in range(len(rows)):
        root(i, frozenset())
    return iv.assign(root=roots)


def flow_pauses(flows: pd.DataFrame, iv: pd.DataFrame) -> pd.DataFrame:
    """Per flow (msg_id, t_start_ns, t_end_ns, path: the egress ports it leaves through, its own
    NIC first): `paused_ns`, the time pauses held a port of its path while it was in flight
    (summed over its ports), and `victim`: a pause held it whose congestion root is not on its
    path. `iv` comes from with_roots."""
    by_port = {p: g for p, g in iv.groupby("port")} if not iv.empty else {}
    paused, victim = [], []
    for f in flows.itertuples(index=False):
        on_path = set(f.path)
        held_ns, hit = 0, False
        for port in f.path:
            g = by_port.get(port)
            if g is None:
                continue
            lo = np.maximum(g.t_start_ns.to_numpy(), f.t_start_ns)
            hi = np.minimum(g.t_end_ns.to_numpy(), f.t_end_ns)
            over = hi > lo
            held_ns += int((hi - lo)[over].sum())
            hit = hit or any(r not in on_path for r in g.root.to_numpy()[over])
        paused.append(held_ns)
        victim.append(hit)
    return flows.assign(paused_ns=paused, victim=victim)


def flow_table(fd) -> pd.DataFrame:
    """One repeat's messages with their paths through the tables (the same entries ns-3 forwarded
    by) and what PFC did to them (flow_pauses)."""
    msgs = pd.DataFrame(fd.transfers_raw)
    if msgs.empty:
        return msgs
    fab = fd.fabric
    ids = {p.name: p.id for p in fab.ports}
    w = walk(fab, [ids[s] for s in msgs.src], [ids[d] for d in msgs.dst], msgs.sport.to_numpy())
    ends = fab.link_ends
    paths = [[fab.ports[int(ends[d // 2, d % 2])].name for d in row if d >= 0] for row in w.dlinks]
    flows = pd.DataFrame(
        {
            "msg_id": msgs.msg_id,
            "src": msgs.src,
            "dst": msgs.dst,
            "t_start_ns": msgs.t_first_tx_ns,
            "t_end_ns": msgs.t_last_rx_ns,
            "path": paths,
        }
    )
    return flow_pauses(flows, with_roots(paused_intervals(fd)))


def propagation_depth(fd) -> int:
    """How many hops pauses travelled back from where congestion began, in the longest chain: a
    pause a switch sent counts 1, plus the longest chain the switch it held was itself sending
    while held (0 when nothing paused). Example: a leaf's egress to a GPU congests, the leaf pauses
    a spine port (1), the spine, while held, pauses another leaf (2), which pauses GPUs (3)."""
    iv = paused_intervals(fd)
    if iv.empty:
        return 0
    node_of = {p.name: fd.fabric.nodes[p.node].name for p in fd.fabric.ports}
    rows = list(iv.itertuples(index=False))
    by_sender: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_sender.setdefault(node_of[r.by], []).append(i)
    memo: dict[int, int] = {}

    def depth(i: int, seen: frozenset) -> int:
        if i in memo:
            return memo[i]
        r = rows[i]
        held = node_of[r.port]  # the device whose port this pause held
        best = 0
        for j in by_sender.get(held, []):  # pauses that device sent while it was held
            q = rows[j]
            if j not in seen and q.t_start_ns < r.t_end_ns and r.t_start_ns < q.t_end_ns:
                best = max(best, depth(j, seen | {i}))
        memo[i] = 1 + best
        return memo[i]

    return max(depth(i, frozenset()) for i in range(len(rows)))


def end_ns(fd) -> int:
    for line in (Path(fd.raw) / "ns3" / "summary.txt").read_text().splitlines():
        if line.startswith("end_ns "):
            return int(line.split()[1])
    raise CongestionRecordsMissing(f"{fd.raw}/ns3/summary.txt: no end_ns; the result is void")


def rate_changes(fd) -> pd.DataFrame:
    """(t_ns, qp, rate_bps) at every DCQCN rate change of one repeat (empty without DCQCN)."""
    return _read(Path(fd.raw) / "ns3" / "rates.csv", ("t_ns", "qp", "rate_bps"))


def port_queues(fd, most: int = 8) -> pd.DataFrame:
    """The backlog in real bytes of the `most` deepest switch egress queues (columns) at every
    sampling instant (index t_ns, every measurement.queue_sample_ms of simulated time). The
    program writes only non-empty queues; the instants it sampled a port empty are filled with 0
    here, so a plot does not draw a line across an idle gap."""
    q = _read(Path(fd.raw) / "ns3" / "queue_samples.csv", ("t_ns", "port", "backlog_bytes"))
    info = dict(
        line.split(" ", 1) for line in (Path(fd.raw) / "ns3" / "summary.txt").read_text().splitlines() if " " in line
    )
    if "queue_samples" not in info or "sample_period_ns" not in info:
        raise CongestionRecordsMissing(f"{fd.raw}/ns3/summary.txt: no sampling record; the queue series is void")
    n, period = int(info["queue_samples"]), int(info["sample_period_ns"])
    grid = pd.Index(period * np.arange(1, n + 1, dtype=np.int64), name="t_ns")
    top = q.groupby("port").backlog_bytes.max().nlargest(most).index.tolist() if len(q) else []
    wide = q[q.port.isin(top)].pivot_table(index="t_ns", columns="port", values="backlog_bytes", aggfunc="max")
    return wide.reindex(grid.union(wide.index), fill_value=0).fillna(0)[sorted(top)]


def repeat_summary(fd, tables_dir: Path | None = None) -> dict:
    """One repeat: totals, and per switch group the PAUSE frames its ports sent and the share of
    time its ports (and the GPUs' NIC ports, 'nic') spent paused. With `tables_dir`, the per-flow
    pause table is written there too (<fabric>_rep<k>_flow_pauses.parquet)."""
    t = port_table(fd)
    dur = max(1, end_ns(fd))
    flows = flow_table(fd)
    if tables_dir is not None and len(flows):
        out = flows.assign(path=[">".join(p) for p in flows.path])
        out.to_parquet(Path(tables_dir) / f"{fd.label}_rep{fd.repeat}_flow_pauses.parquet", index=False)
    groups = {}
    for g, rows in t.groupby("group"):
        groups[g] = {
            "ports": int(len(rows)),
            "pause_frames_sent": int(rows.pause_frames_sent.sum()),
            "paused_fraction": float(rows.paused_ns.sum() / (len(rows) * dur)),
            "marks": int(rows.marks.sum()),
            "max_backlog_bytes": int(rows.max_backlog_bytes.max()),
        }
    return {
        "repeat": fd.repeat,
        "duration_ns": dur,
        "pause_depth_hops": propagation_depth(fd),
        "pause_frames": int(t.pause_frames_sent.sum()),
        "paused_port_s": float(t.paused_ns.sum() / 1e9),
        "marks": int(t.marks.sum()),
        "cnps": int(t.cnps_rx.sum()),
        "drops": int(t.drops.sum() + t.headroom_drops.sum()),
        "max_backlog_bytes": int(t.max_backlog_bytes.max()),
        "flows": int(len(flows)),
        "paused_flows": int((flows.paused_ns > 0).sum()) if len(flows) else 0,
        "victim_flows": int(flows.victim.sum()) if len(flows) else 0,
        "groups": groups,
    }


def summary(datas: dict, tables_dir: Path | None = None) -> dict:
    """Per fabric: every repeat's summary and mean ± 95 % CI of its totals; per group likewise."""
    out = {}
    for label, reps in datas.items():
        rows = [repeat_summary(fd, tables_dir) for fd in reps]
        keys = (
            "pause_frames",
            "paused_port_s",
            "pause_depth_hops",
            "marks",
            "cnps",
            "drops",
            "max_backlog_bytes",
            "paused_flows",
            "victim_flows",
        )
        groups = sorted({g for r in rows for g in r["groups"]})
        out[label] = {
            "repeats": rows,
            **{k: ci95([r[k] for r in rows]) for k in keys},
            "groups": {
                g: {
                    k: ci95([r["groups"].get(g, {}).get(k, 0) for r in rows])
                    for k in ("pause_frames_sent", "paused_fraction", "marks", "max_backlog_bytes")
                }
                for g in groups
            },
        }
    return out


def ratio_ci(a: list[float], b: list[float], seed: int = 0, draws: int = 4000) -> dict:
    """mean(a) / mean(b) with a 95 % bootstrap interval over the independent repeats of each
    (None where b's mean is 0: the ratio is not defined)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not a.size or not b.size or b.mean() == 0:
        return {"ratio": None, "lo": None, "hi": None}
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, a.size, (draws, a.size))].mean(axis=1)
    rb = b[rng.integers(0, b.size, (draws, b.size))].mean(axis=1)
    ok = rb > 0
    r = ra[ok] / rb[ok]
    return {"ratio": float(a.mean() / b.mean()), "lo": float(np.quantile(r, 0.025)), "hi": float(np.quantile(r, 0.975))}


def markdown(cong: dict, labels: list[str]) -> list[str]:
    """The report's section: totals per fabric, then per switch group."""
    lines = [
        "## Congestion (ns-3: PFC, ECN, DCQCN)",
        "",
        "Mean ± 95 % CI over repeats. A PAUSE frame is counted where a switch ingress port sends it; paused "
        "time is the time a port (switch egress or GPU NIC) was held by its peer's PAUSE. A paused flow had a "
        "port of its path held while it was in flight; a victim was held by a pause whose congestion root (the "
        "egress port the chain of pauses reacts to) is not on its path.",
        "",
        "| fabric | PAUSE frames | paused port-seconds | pause depth (hops) | ECN marks | CNPs | drops | "
        "deepest queue (KB) | paused flows | victim flows |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def c(x: dict, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
        if x["mean"] is None:
            return "—"
        s = fmt.format(x["mean"] * scale)
        return s + (f" ± {fmt.format(x['ci95'] * scale)}" if x["ci95"] is not None else "")

    for lab in labels:
        f = cong[lab]
        lines.append(
            f"| {lab} | {c(f['pause_frames'])} | {c(f['paused_port_s'], 1, '{:.4f}')} | "
            f"{c(f['pause_depth_hops'], 1, '{:.1f}')} | {c(f['marks'])} | "
            f"{c(f['cnps'])} | {c(f['drops'])} | {c(f['max_backlog_bytes'], 1e-3, '{:.1f}')} | "
            f"{c(f['paused_flows'])} of {f['repeats'][0]['flows']} | {c(f['victim_flows'])} |"
        )
    lines += [
        "",
        "| fabric | group | ports | PAUSE frames sent | paused time (% of run) | ECN marks |",
        "|---|---|---|---|---|---|",
    ]
    for lab in labels:
        for g, v in cong[lab]["groups"].items():
            ports = cong[lab]["repeats"][0]["groups"].get(g, {}).get("ports", 0)
            lines.append(
                f"| {lab} | {g} | {ports} | {c(v['pause_frames_sent'])} | {c(v['paused_fraction'], 100, '{:.3f}')} | "
                f"{c(v['marks'])} |"
            )
    if len(labels) >= 2:
        a, b = labels[0], labels[1]
        r = ratio_ci([x["pause_frames"] for x in cong[a]["repeats"]], [x["pause_frames"] for x in cong[b]["repeats"]])
        if r["ratio"] is None:
            lines += ["", f"PAUSE frames {a}/{b}: not defined ({b} sent none)."]
        else:
            lines += [
                "",
                f"PAUSE frames {a}/{b}: {r['ratio']:.2f} (95 % bootstrap interval {r['lo']:.2f}–{r['hi']:.2f}).",
            ]
    return lines
