"""One resolved experiment: built once from the spec, before anything is brought up.

Why: every fabric, emulation setting, scaling and workload plan is resolved and checked here,
so a bad second fabric (or trace, or deployment) fails before the first bring-up, and every
consumer downstream — runner, dry run, analysis — receives the same object (the run folder
gets its resolved form once, as experiment.json).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

import numpy as np

from traffic import kvmodel, roce, traces, workload

from ..emulation import failplan
from ..emulation.config import EmulationConfig, scaled_rate_bps
from ..errors import UserInputError
from ..fabric import Fabric, build_fabric
from ..fabric.kinds import kind_of
from ..fabric.paths import dst_address, split_fractions, src_port_id, walk
from ..fabric.validate import validate
from .spec import ExperimentSpecError

SCHEMA = "zlab.experiment/1"
ETH_IP_UDP_BTH_BYTES = 14 + 20 + 8 + 12 + 4  # per frame, plus the RoCE payload (ICRC included)


@dataclass(frozen=True)
class Message:
    """One planned RDMA WRITE: a transfer's share on one source port (one QP per port pair)."""

    transfer: int  # index into plan.transfers
    src_port: str
    dst_port: str
    size_bytes: int  # emulated
    real_bytes: int
    share: float


@dataclass
class Repeat:
    """One independent draw: its seed (QP source ports, scheduler and mapping draws), plan and
    messages."""

    index: int
    seed: int
    plan: workload.Plan
    messages: list[Message]
    qps: dict = field(default_factory=dict)  # (source port, destination port) -> UDP source port (ECMP entropy)


@dataclass
class FabricRun:
    """Everything one fabric's replays need, resolved."""

    label: str
    fabric: Fabric
    emulation: EmulationConfig
    repeats: list[Repeat]
    split: str | None  # port-split policy given to the kind (None: the kind has one port per GPU)
    figures: dict = field(default_factory=dict)  # the dry-run figures (of repeat 0)
    failplan: dict | None = None  # failures.json: the failure schedule resolved on this fabric (failplan.py)

    @property
    def plan(self) -> workload.Plan:
        """Repeat 0's plan (every repeat has the same scaling and volume)."""
        return self.repeats[0].plan

    @property
    def messages(self) -> list[Message]:
        return self.repeats[0].messages

    @property
    def subflows_per_transfer(self) -> int:
        return len(split_fractions(self.fabric, self.split))

    def resolved(self) -> dict:
        """The run folder's record of this fabric's resolution (read back by the analysis)."""
        return {
            "fabric": self.fabric.spec,
            "kind": self.fabric.kind,
            "emulation": self.emulation.to_dict(),
            "split": self.split,
            "subflows_per_transfer": self.subflows_per_transfer,
            "scaling": {
                "rate_scale": self.plan.scaling.rate_scale,
                "size_scale": self.plan.scaling.size_scale,
                "dilation": self.plan.scaling.dilation,
                "load_factor": self.plan.scaling.load_factor,
            },
            "plan": self.plan.summary(),
            "figures": self.figures,
            "repeats": [{"index": r.index, "seed": r.seed, "messages": len(r.messages)} for r in self.repeats],
            "failures": None
            if self.failplan is None
            else {k: self.failplan[k] for k in ("recovery", "policy", "steps")},
        }


@dataclass
class Experiment:
    spec: dict  # the validated spec, defaults filled in
    fabrics: dict[str, FabricRun]
    scaling_choice: dict | None = None  # the planner's assessment (planner.py), recorded with the run

    @property
    def measurement(self) -> dict:
        return self.spec["measurement"]

    def resolved(self) -> dict:
        return {
            "schema": SCHEMA,
            "spec": self.spec,
            "scaling_choice": self.scaling_choice,
            "fabrics": {label: fr.resolved() for label, fr in self.fabrics.items()},
        }


def real_scale(spec: dict) -> dict:
    """The spec as the ns-3 engine runs it: real link rates and real message sizes (rate_scale and
    size_scale 1, so dilation 1 and every "emulated" figure of the run folder is real). Why here:
    the plan (arrival times, sizes, QPs) then comes from the same workload functions and seeds as
    the emulation's, only unscaled."""
    out = copy.deepcopy(spec)
    out["emulation"]["rate_scale"] = 1.0
    out["workload"]["size_scale"] = 1.0
    return out


def resolve(spec: dict) -> Experiment:
    """Resolve every part of a validated spec; any bad part raises before anything runs. With
    engine ns3 the spec is resolved at real scale (real_scale)."""
    if spec.get("engine", "emulation") == "ns3":
        spec = real_scale(spec)
    w = spec["workload"]
    trace = _user(lambda: traces.read(w["trace"]), "workload.trace")
    model = _user(lambda: kvmodel.model(w["model"]), "workload.model")
    _user(model.kv_bytes_per_token, "workload.model")
    times = kvmodel.TimeModel(w["prefill_overhead_s"], w["prefill_tokens_per_s"], w["first_decode_step_s"])
    fabrics = {}
    f = spec["failures"]
    for section in ("events", "recovery"):
        unknown = sorted(set(f[section]) - set(spec["fabrics"]))
        if unknown:
            raise ExperimentSpecError(
                f"spec error at failures.{section}: {', '.join(unknown)} is not a fabric of this "
                f"spec (fabrics: {', '.join(spec['fabrics'])})"
            )
    for label, fabric_spec in spec["fabrics"].items():
        fabrics[label] = _resolve_fabric(spec, label, fabric_spec, trace, model, times)
        fabrics[label].failplan = _failplan(spec, fabrics[label])
    return Experiment(spec, fabrics)


def _failplan(spec: dict, fr: FabricRun) -> dict | None:
    f = spec["failures"]
    events = f["events"].get(fr.label)
    if not events:
        return None
    horizon = fr.plan.horizon_s
    late = [e for e in events if e["at_emulated_s"] >= horizon]
    if late:
        raise ExperimentSpecError(
            f"spec error at failures.events.{fr.label}: an event at {late[0]['at_emulated_s']} s "
            f"is after the last transfer is posted ({horizon:.2f} emulated s): it would hit an "
            f"idle fabric"
        )
    events = [
        dict(e, target=_busiest(fr, e["at_emulated_s"]) if e["target"] == "cable:busiest" else e["target"])
        for e in events
    ]
    detect = {k: f[k] for k in ("probe_hz", "probe_window", "probe_min_lost", "probe_timeout_s", "poll_s")}
    try:
        return failplan.document(
            fr.fabric,
            events,
            f["recovery"].get(fr.label, "controller"),
            detect,
            fr.label,
            install_mods_per_s=float(f["install_mods_per_s"]),
        )
    except failplan.FailurePlanError as exc:
        raise ExperimentSpecError(f"spec error at {exc}") from None


def _user(fn, where: str):
    """Run fn; a ValueError from the traffic core is the user's input, named by its field."""
    try:
        return fn()
    except (ValueError, TypeError) as exc:
        raise ExperimentSpecError(f"spec error at {where}: {exc}") from None


def _resolve_fabric(spec: dict, label: str, fabric_spec: str, trace, model, times) -> FabricRun:
    where = f"fabrics.{label}"
    try:
        fab = build_fabric(fabric_spec)
    except UserInputError as exc:
        raise ExperimentSpecError(f"spec error at {where}: {exc}") from None
    rep = validate(fab)
    if not rep.ok:
        raise ExperimentSpecError(
            f"spec error at {where}: the fabric does not validate: "
            + "; ".join(f"{k}: {v}" for k, v in rep.checks.items() if v != "ok")
        )
    em = spec["emulation"]
    d, w = spec["deployment"], spec["workload"]
    if roce.link_mtu_needed(d["path_mtu"]) > em["mtu_bytes"]:
        raise ExperimentSpecError(
            f"spec error at deployment.path_mtu: {d['path_mtu']} needs a link MTU of "
            f"{roce.link_mtu_needed(d['path_mtu'])}; emulation.mtu_bytes is {em['mtu_bytes']}"
        )
    cfg = EmulationConfig(
        rate_scale=em["rate_scale"],
        mtu_bytes=em["mtu_bytes"],
        queue_limit_pkts=em["queue_limit_pkts"],
        burst_bytes=roce.link_mtu_needed(d["path_mtu"]) + roce.ETH_HDR,
    )
    try:
        if spec.get("engine", "emulation") == "emulation":  # ns-3 has no link-rate ceiling
            cfg.validate(fab)
    except UserInputError as exc:
        raise ExperimentSpecError(f"spec error at emulation (for {where}): {exc}") from None
    split = d["split"] if kind_of(fab).split_policies else None
    repeats = []
    for k in range(spec["repeats"]):
        seed = spec["seed"] + k
        plan = _user(
            lambda seed=seed: workload.plan(
                trace,
                model,
                times,
                fab.n_gpus,
                int(fab.params["gpus_per_server"]),
                float(fab.params["gpu_gbps"]) * 1e9,
                rate_scale=em["rate_scale"],
                size_scale=w["size_scale"],
                tp=d["tp"],
                prefill_instances=d["prefill_instances"],
                decode_instances=d["decode_instances"],
                mapping=d["mapping"],
                scheduler=d["scheduler"],
                offered_load=w.get("offered_load"),
                load_factor=w.get("load_factor"),
                start_index=w["start_index"],
                requests=w["requests"],
                prefix_reuse=w["prefix_reuse"],
                seed=seed,
            ),
            f"workload/deployment ({where})",
        )
        msgs = _messages(fab, plan, split)
        repeats.append(Repeat(k, seed, plan, msgs, _qps(msgs, seed)))
    fr = FabricRun(label, fab, cfg, repeats, split)
    fr.figures = _figures(fr, d["path_mtu"])
    return fr


def _busiest(fr: FabricRun, t_s: float) -> str:
    """`cable:busiest`: the switch-to-switch cable with the most bytes of repeat 0 in flight at
    the event's time, by the plan's schedule (each NIC port sends its messages FIFO at line rate
    from their post times: the dry run's lower bound); with nothing in flight then, the cable the
    most QPs cross. Lowest id on a tie. A failure that is sure to hit traffic, whatever the names."""
    fab, rep, plan = fr.fabric, fr.repeats[0], fr.repeats[0].plan
    keys = list(rep.qps)
    port = {p.name: p for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]}
    w = walk(fab, [port[s].id for s, _ in keys], [port[d].id for _, d in keys], [rep.qps[k] for k in keys])
    crossed = {k: {int(d) // 2 for d in row if d >= 0} for k, row in zip(keys, w.dlinks)}
    qp_count = np.zeros(len(fab.links), dtype=np.int64)
    in_flight = np.zeros(len(fab.links), dtype=np.float64)
    for k in keys:
        qp_count[list(crossed[k])] += 1
    busy_until: dict[str, float] = {}
    for m in sorted(rep.messages, key=lambda m: plan.transfers[m.transfer].t_post_s):
        rate = scaled_rate_bps(port[m.src_port].rate_bps, fr.emulation)
        start = max(plan.transfers[m.transfer].t_post_s, busy_until.get(m.src_port, 0.0))
        end = busy_until[m.src_port] = start + m.size_bytes * 8 / rate
        if start <= t_s < end:
            in_flight[list(crossed[(m.src_port, m.dst_port)])] += (end - t_s) * rate / 8
    fabric_links = [l.id for l in fab.links if all(fab.nodes[fab.ports[p].node].role == "switch" for p in (l.a, l.b))]
    best = max(fabric_links, key=lambda l: (in_flight[l], qp_count[l], -l))
    return f"cable:{fab.ports[fab.links[best].a].name}"


def _qps(messages: list[Message], seed: int) -> dict:
    """One QP per port pair, its UDP source port drawn from the repeat's seed in message order."""
    rng = random.Random(seed)
    qps = {}
    for m in messages:
        key = (m.src_port, m.dst_port)
        if key not in qps:
            qps[key] = rng.randrange(49152, 65536)
    return qps


def _messages(fab: Fabric, plan: workload.Plan, split: str | None) -> list[Message]:
    parts = split_fractions(fab, split)
    out = []
    for i, t in enumerate(plan.transfers):
        for role, share in parts:
            sp = int(src_port_id(fab, t.src_gpu, role))
            da = int(dst_address(fab, t.src_gpu, role, t.dst_gpu))
            out.append(
                Message(
                    i,
                    fab.ports[sp].name,
                    fab.ports[da].name,
                    max(1, int(t.bytes * share)),
                    int(t.real_bytes * share),
                    share,
                )
            )
    return out


def _figures(fr: FabricRun, path_mtu: int) -> dict:
    """What the dry run prints: rates, scaling, volume, expected duration and peak packet rate.

    The duration and peak rate assume each NIC port sends its messages FIFO at line rate from
    their post times (the pacer's behaviour), with no fabric congestion: a lower bound on the
    duration and an upper bound on the packet rate the datapath must forward.
    """
    fab, plan, cfg = fr.fabric, fr.plan, fr.emulation
    port = {p.name: p for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]}
    frame = path_mtu + ETH_IP_UDP_BTH_BYTES + 16  # + RETH on first packets (upper bound per frame)
    rates = sorted({scaled_rate_bps(l.rate_bps, cfg) for l in fab.links})
    # switches crossed per message: every ECMP member has the same length, so one walk says it
    hops = {}
    for m in fr.messages:
        key = (m.src_port, m.dst_port)
        if key not in hops:
            sp, dp = port[m.src_port].id, port[m.dst_port].id
            hops[key] = int(walk(fab, [sp], [dp], -1).n_hops[0])
    busy_until: dict[str, float] = {}
    events = []  # (t, +/- frames per second, +/- forwards per second)
    for m in sorted(fr.messages, key=lambda m: plan.transfers[m.transfer].t_post_s):
        r = scaled_rate_bps(port[m.src_port].rate_bps, cfg)
        start = max(plan.transfers[m.transfer].t_post_s, busy_until.get(m.src_port, 0.0))
        n_frames = -(-m.size_bytes // path_mtu)
        dur = (m.size_bytes + n_frames * (frame - path_mtu)) * 8 / r
        busy_until[m.src_port] = start + dur
        fps = r / 8 / frame
        events += [
            (start, fps, fps * hops[(m.src_port, m.dst_port)]),
            (start + dur, -fps, -fps * hops[(m.src_port, m.dst_port)]),
        ]
    events.sort(key=lambda e: (e[0], e[1]))
    ev = np.array([(e[1], e[2]) for e in events]) if events else np.zeros((0, 2))
    run_fps = np.cumsum(ev[:, 0]) if len(ev) else np.zeros(1)
    run_fwd = np.cumsum(ev[:, 1]) if len(ev) else np.zeros(1)
    end = max(busy_until.values()) if busy_until else 0.0
    return {
        "link_rates_mbps": [r / 1e6 for r in rates],
        "rate_scale": plan.scaling.rate_scale,
        "size_scale": plan.scaling.size_scale,
        "dilation": plan.scaling.dilation,
        "load_factor": plan.scaling.load_factor,
        "requests": len(plan.requests),
        "transfers": len(plan.transfers),
        "messages": len(fr.messages),
        "emulated_bytes": int(sum(m.size_bytes for m in fr.messages)),
        "real_bytes": int(sum(m.real_bytes for m in fr.messages)),
        "frames_per_message_p50": float(np.median([-(-m.size_bytes // path_mtu) for m in fr.messages])),
        "expected_emulated_duration_s": float(end),
        "expected_real_duration_s": float(end / plan.scaling.dilation),
        "peak_nic_frames_per_s": float(run_fps.max(initial=0.0)),
        "peak_switch_forwards_per_s": float(run_fwd.max(initial=0.0)),
        # what ovs-vswitchd polls on every wake-up: the planner scales its capacity by it
        "switch_ports": fab.n_switch_ports,
    }
