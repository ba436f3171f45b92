"""A run folder's repeat -> the referee's scenario file: the resolved fabric (fabric.json), the
flow entries the controller installed (flows.json), the emulation's rates and queue limits
(run.json) and the message schedule as posted (raw/rep<k>/schedule.json). Read, never re-derived.

Two scales:
- "same": the emulation's scaled rates, sizes and times (emulated units), so the two must agree;
- "real": rates unscaled, message sizes real, due times divided by the dilation and queue
  limits converted to the real bytes they stand for (limit / size scale): what the scaled run
  claims to represent, so where they differ the scaling is what failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from traffic import roce

from ..errors import UserInputError
from ..fabric import ids
from ..fabric.model import Fabric
from ..records import read_json, read_jsonl

SCALES = ("same", "real")
# how ns-3's links carry frames (zlab_referee.cc, param link_model):
# - "bucket": the emulation's own link model, a drop-tail queue ahead of an htb-like token bucket of
#   one frame (the emulation's burst_bytes) over a wire that does not serialise, as its veths
#   shaped by htb are; the default at the emulation's scale, where one frame is a large share of a
#   message's time, so no correction term is needed;
# - "serialiser": ns-3's store-and-forward point-to-point links at the line rate, a real network's
#   model: always at real scale, and on request at the emulation's (then judged with the link-model
#   term, compare.shaper_term).
LINK_MODELS = ("bucket", "serialiser")
# the agent's transport rules (traffic/rc.py, traffic/agent.py), stated again for the referee
TRANSPORT = {
    "window_pkts": 64,
    "ackreq_every": 16,
    "ack_coalesce": 16,
    "rto_floor_ns": 200_000_000,
    "rto_max_ns": 2_000_000_000,
}
FRAME = {
    "frame_overhead_bytes": roce.MIN_FRAME,
    "reth_bytes": roce.RETH_LEN,
    "ack_frame_bytes": roce.MIN_FRAME + roce.AETH_LEN,
}


@dataclass
class Scenario:
    label: str
    repeat: int
    scale: str
    text: str
    messages: pd.DataFrame  # msg, qp, src_port, dst_port, sport, size_bytes, t_due_ns, req, shard
    time_unit_per_emulated_s: float  # 1 (same) or 1/dilation (real)
    size_unit_per_emulated_byte: float
    payload_per_packet: int
    notes: list[str] = field(default_factory=list)
    link_model: str = "serialiser"


def link_and_entry_lines(fab: Fabric, flows: dict) -> list[str]:
    """The scenario's `link` and `entry` lines: the cabling and every switch's flow entries as the
    controller installs them (flows: runfolder.flows_document). The replay and the serving engine
    (serving/ns3_engine.py) build their scenarios with it, so both forward by the same tables."""
    lines = [f"link {lk.a} {lk.b}" for lk in fab.links]
    for sw, doc in flows["switches"].items():
        node = fab.node_by_name[sw].id
        for e in doc["entries"]:
            uval, umask = e["udp_src"] if e["udp_src"] is not None else (0, 0)
            lines.append(
                f"entry {node} {e['priority']} {ids.ip_to_int(e['ipv4_dst'])} "
                f"{ids.ip_to_int(e['ipv4_mask'])} {uval} {umask} {e['out_port']}"
            )
    return lines


def schedule(fdir: Path, repeat: int) -> tuple[pd.DataFrame, str]:
    """The repeat's messages as posted, and where they came from. Runs recorded before
    schedule.json existed fall back to transfers.jsonl, which only holds completed messages, so
    that is accepted only when every posted message completed."""
    raw = Path(fdir) / "raw" / f"rep{repeat}"
    if (raw / "schedule.json").exists():
        return pd.DataFrame(read_json(raw / "schedule.json")["messages"]), "schedule.json"
    clock = read_json(raw / "run_clock.json")
    rows = read_jsonl(raw / "transfers.jsonl")
    if len(rows) != clock["messages"]:
        raise UserInputError(
            f"{raw}: no schedule.json, and transfers.jsonl holds {len(rows)} of "
            f"{clock['messages']} posted messages: the schedule cannot be recovered"
        )
    df = pd.DataFrame(rows).sort_values(["t_due_ns", "msg_id"])
    df = df.rename(columns={"src": "src_port", "dst": "dst_port"})
    df["t_due_ns"] = df["t_due_ns"] - clock["t0_ns"]
    return df[["src_port", "dst_port", "sport", "size_bytes", "real_bytes", "t_due_ns", "req", "shard"]].reset_index(
        drop=True
    ), "transfers.jsonl (every message completed)"


def first_requests(msgs: pd.DataFrame, n: int | None) -> list:
    """The ids of the first n requests by request id (not by due time): the subset that ns-3
    replays and that compare.pair keeps on the emulation's side."""
    ids = sorted(int(r) for r in msgs["req"].unique())
    return ids if n is None else ids[:n]


def build(
    fdir: Path,
    experiment: dict,
    repeat: int,
    scale: str,
    requests: int | None = None,
    hop_delay_ns: int = 0,
    deadline_s: float | None = None,
    what_if: dict | None = None,
    link_model: str | None = None,
) -> Scenario:
    """The scenario of one fabric's repeat (experiment: the run's experiment.json). requests:
    keep only the first N requests (at real scale the packet count grows by 1/size scale).
    what_if: transport or packet parameters replaced on purpose (window_pkts, payload_per_packet),
    to test what a figure depends on; named in the scenario's notes."""
    if scale not in SCALES:
        raise UserInputError(f"scale must be one of {', '.join(SCALES)} (got {scale!r})")
    fdir = Path(fdir)
    resolved, spec = experiment["fabrics"][fdir.name], experiment["spec"]
    fab = Fabric.load(fdir / "fabric.json")
    emu = read_json(fdir / "run.json")["config"]["emulation"]
    flows = read_json(fdir / "flows.json")
    sc = resolved["scaling"]
    msgs, source = schedule(fdir, repeat)
    notes = [f"schedule from {source}"]
    if requests is not None:
        if requests < 1:
            raise UserInputError(f"requests must be >= 1 (got {requests})")
        keep = first_requests(msgs, requests)
        msgs = msgs[msgs["req"].isin(keep)].reset_index(drop=True)
        notes.append(
            f"first {len(keep)} request(s) by id only (the emulation's figures for them still carry "
            f"the later requests' cross-traffic)"
        )
    real = scale == "real"
    link_model = link_model or ("serialiser" if real else "bucket")
    if link_model not in LINK_MODELS:
        raise UserInputError(f"link model must be one of {', '.join(LINK_MODELS)} (got {link_model!r})")
    if real and link_model != "serialiser":
        raise UserInputError("at real scale ns-3's links serialise, as a real network's do (link model serialiser)")
    size_col = "real_bytes" if real else "size_bytes"
    t_factor = 1.0 / sc["dilation"] if real else 1.0

    def rate(bps: int) -> int:
        return int(bps) if real else int(round(bps * emu["rate_scale"]))

    def limit(pkts: int) -> int:
        return int(math.ceil(pkts / sc["size_scale"])) if real else int(pkts)

    lines = ["# zlab referee scenario", f"# fabric {fab.spec}", f"# repeat {repeat}, scale {scale}"]
    params = {
        "payload_per_packet": roce.payload_per_packet(spec["deployment"]["path_mtu"]),
        **FRAME,
        **TRANSPORT,
        "hop_delay_ns": int(hop_delay_ns),
        "sample_period_ns": int(spec["measurement"]["queue_sample_ms"] * 1e6 * t_factor),
    }
    if deadline_s is not None:
        params["deadline_ns"] = int(deadline_s * 1e9)
    if link_model == "bucket":
        params["link_model"] = 1
        params["bucket_bytes"] = int(emu["burst_bytes"] or emu["mtu_bytes"] + 14)
    for k, v in (what_if or {}).items():
        if k not in ("window_pkts", "payload_per_packet") or int(v) < 1:
            raise UserInputError(f"what-if {k}={v}: only window_pkts and payload_per_packet (>= 1) can be replaced")
        params[k] = int(v)
        notes.append(f"WHAT-IF {k}={int(v)} (not the transport's own)")
    lines += [f"param {k} {int(v)}" for k, v in params.items()]
    lines += [f"node {n.id} {n.name} {n.role}" for n in fab.nodes]
    linked = fab.port_link
    for p in fab.ports:
        role = fab.nodes[p.node].role
        q = emu["queue_limit_pkts"] if role == "switch" else emu["host_queue_limit_pkts"]
        r = fab.links[int(linked[p.id])].rate_bps if linked[p.id] >= 0 else p.rate_bps
        ip = ids.ip_to_int(p.ip) if p.ip else 0
        lines.append(f"port {p.id} {p.node} {p.number} {p.name} {ip} {rate(r)} {limit(q)}")
    lines += link_and_entry_lines(fab, flows)
    port_id = {p.name: p.id for p in fab.ports}
    qp_of: dict[tuple, int] = {}
    for m in msgs.itertuples():
        key = (m.src_port, m.dst_port)
        if key not in qp_of:
            qp_of[key] = len(qp_of)
            lines.append(f"qp {qp_of[key]} {port_id[m.src_port]} {port_id[m.dst_port]} {int(m.sport)}")
    msgs = msgs.assign(msg=range(len(msgs)), qp=[qp_of[(a, b)] for a, b in zip(msgs.src_port, msgs.dst_port)])
    msgs["t_due_ns"] = (msgs["t_due_ns"] * t_factor).round().astype("int64")
    msgs["size_bytes"] = msgs[size_col].astype("int64")
    lines += [f"msg {m.msg} {m.qp} {m.t_due_ns} {m.size_bytes}" for m in msgs.itertuples()]
    return Scenario(
        fdir.name,
        repeat,
        scale,
        "\n".join(lines) + "\n",
        msgs,
        t_factor,
        1.0 / sc["size_scale"] if real else 1.0,
        params["payload_per_packet"],
        notes,
        link_model,
    )
