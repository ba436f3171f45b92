"""Experiment specs: YAML validated against one JSON Schema that also holds every default.

Why one source: the schema says what each field may be *and* what it is when not given, so
the defaults cannot drift from the validation. No extra keys are allowed anywhere: a misspelt
field fails naming itself instead of being ignored while a default runs another experiment.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import jsonschema
import yaml

from traffic.workload import MAPPINGS, SCHEDULERS

from ..congestion import params as congestion
from ..emulation.failplan import ACTIONS, RECOVERY_MODES
from ..errors import UserInputError
from ..fabric.kinds import KINDS


class ExperimentSpecError(UserInputError):
    """An experiment spec (file, field or override) that cannot be used."""


def _n(default, minimum=None, exclusive=True, maximum=None, integer=False):
    s = {"type": "integer" if integer else "number", "default": default}
    if minimum is not None:
        s["exclusiveMinimum" if exclusive else "minimum"] = minimum
    if maximum is not None:
        s["maximum"] = maximum
    return s


def _enum(default, *values):
    return {"enum": list(values), "default": default}


def _split_policies() -> tuple[str, ...]:
    """Every registered kind's port-split policies, in registration order (a single-port kind has none)."""
    return tuple(dict.fromkeys(p for kind in KINDS.values() for p in kind.split_policies))


def _section(**props):
    return {"type": "object", "additionalProperties": False, "properties": props, "default": {}}


FAILURE_EVENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["at_emulated_s", "action", "target"],
    "properties": {
        # emulated seconds after the replay's start (x 1/dilation = real seconds)
        "at_emulated_s": {"type": "number", "minimum": 0},
        "action": {"enum": list(ACTIONS)},
        "target": {"type": "string", "pattern": "^(cable|switch):.+"},  # as in zlab load --fail
        "loss_percent": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100},  # gray only
        "duration_emulated_s": {"type": "number", "exclusiveMinimum": 0},  # gray: cleared after this long
        "period_emulated_s": {"type": "number", "exclusiveMinimum": 0},  # flap: one down + up cycle
        "count": {"type": "integer", "minimum": 1},  # flap: cycles
    },
}

DEFAULT_FABRICS = {"zcube": "zcube:n=4,gpus_per_server=4", "roft": "roft:gpus=16,gpus_per_server=4,segments=2"}

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "default": "zcube-vs-roft"},
        "seed": {"type": "integer", "default": 0},
        # independent draws per fabric on the same built fabric: repeat k uses seed + k for its QP
        # source ports (ECMP entropy) and its scheduler/mapping draws
        "repeats": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
        "timeout_s": _n(60),
        # where the experiment runs: the emulation (Mininet/OVS, scaled, root) or ns-3 at real scale (no root)
        "engine": _enum("emulation", "emulation", "ns3"),
        # the framework running the zlab OpenFlow app (the same app file): os-ken, or real Ryu from .venv-ryu
        "controller": _enum("os-ken", "os-ken", "ryu"),
        "fabrics": {
            "type": "object",
            "minProperties": 1,
            "default": DEFAULT_FABRICS,
            "propertyNames": {"pattern": "^[a-z][a-z0-9_-]{0,15}$"},
            "additionalProperties": {"type": "string"},
        },
        "emulation": _section(
            rate_scale=_n(1.25e-5, 0),
            mtu_bytes=_n(9000, 576, False, 9000, integer=True),
            queue_limit_pkts=_n(1000, 1, False, integer=True),
            # the agent's packet-socket buffers (send and receive): too small and frames die there
            agent_socket_buffer_bytes=_n(8388608, 2304, False, integer=True),
        ),
        "workload": _section(
            trace={"type": "string", "default": "azure-code"},
            start_index=_n(0, 0, False, integer=True),
            requests=_n(150, 1, False, integer=True),
            model={"oneOf": [{"type": "string"}, {"type": "object"}], "default": "llama3-70b"},
            size_scale=_n(2.5e-4, 0),
            offered_load=_n(0.2, 0),  # exactly one of offered_load / load_factor (load() enforces it)
            load_factor={"type": "number", "exclusiveMinimum": 0},
            prefix_reuse={"type": "boolean", "default": False},
            prefill_overhead_s=_n(0.005, 0, False),
            prefill_tokens_per_s=_n(1500000.0, 0),
            first_decode_step_s=_n(0.02, 0, False),
        ),
        "deployment": _section(
            tp=_n(4, 1, False, integer=True),
            prefill_instances=_n(2, 1, False, integer=True),
            decode_instances=_n(2, 1, False, integer=True),
            mapping=_enum(MAPPINGS[0], *MAPPINGS),  # the enums come from the registries that use them
            scheduler=_enum(SCHEDULERS[0], *SCHEDULERS),
            split=_enum(_split_policies()[0], *_split_policies()),
            path_mtu=_enum(4096, 256, 512, 1024, 2048, 4096),
        ),
        "measurement": _section(
            queue_sample_ms=_n(10, 0, maximum=10),
            # the PFC stand-in's XOFF threshold in REAL bytes (x size_scale = emulated bytes)
            xoff_real_bytes=_n(800000, 1, False, integer=True),
            util_window_ms=_n(100, 0),
            calibrate={"type": "boolean", "default": True},
            max_cpu_fraction=_n(0.9, 0),
            max_machine_cpu_fraction=_n(0.9, 0),
            # the VM's host may take CPU from it; above this share of the cores in any ~250 ms interval the
            # agent's stalls stretch transfers (measured: 54 % steal moved ZCube's KV p99 by 20 % between runs)
            max_steal_fraction=_n(0.2, 0),
            # a repeat voided by steal alone (a cause outside the run) is re-taken up to this many times; the
            # voided attempt stays on disk (raw/rep<k>.void<n>/) and the report lists it
            steal_retakes=_n(2, 0, False, integer=True),
            # before each retake, wait until the steal stays under max_steal_fraction for 3 s, at most this long
            # (steal comes in episodes: a retake at once lands in the same one)
            steal_wait_s=_n(120, 0, False),
            max_late_sample_fraction=_n(0.05, 0, False),
            min_calibration_ratio=_n(0.9, 0, False),
            max_carried_util=_n(1.02, 0),
            # how far the agent's late releases may move KV p50/p99 (vs the same run with them removed)
            max_lateness_shift=_n(0.05, 0),
            max_link_bytes_error=_n(0.03, 0),
            controller_stats_interval_s=_n(5.0, 0),
            # 0: no LLDP during replays (it is the cabling check's, and a GPU's kernel drops it)
            lldp_interval_s=_n(0, 0, False),
        ),
        # timed failures injected during every replay (fabric label -> events), and how each fabric recovers
        "failures": _section(
            events={"type": "object", "default": {}, "additionalProperties": {"type": "array", "items": FAILURE_EVENT}},
            # fabric label -> controller | fast-failover | host | both | none (a fabric not named: controller)
            recovery={"type": "object", "default": {}, "additionalProperties": {"enum": list(RECOVERY_MODES)}},
            # the controller's failure detection: port status always; these set its link probes (gray failures)
            probe_hz=_n(10.0, 0),  # probes per second per switch-to-switch cable direction
            # a direction's last N probes, of which this many lost = gray (routed around); 5 of 20 ignores the
            # short packet-in loss bursts a busy datapath has when traffic starts (measured: 3 of 10 at once)
            probe_window=_n(20, 1, False, integer=True),
            probe_min_lost=_n(5, 1, False, integer=True),
            probe_timeout_s=_n(1.5, 0),  # a probe not back by then is lost (emulated queues can be deep)
            poll_s=_n(0.1, 0),  # the controller's port-state poll (confirms port-status messages)
            # the controller's recovery sends at most this many flow-mods a second (0: as fast as it can); on
            # a 2-core machine an unpaced ROFT recovery (17,337 entries at 256 GPUs) held both cores busy
            install_mods_per_s=_n(0, 0, False),
            # host recovery: a QP moves to its GPU's other port after this many timeouts without progress
            apm_timeouts=_n(1, 1, False, integer=True),
            # agent: a QP whose acknowledgements stop this long while data is outstanding records a stall
            stall_emulated_s=_n(0.05, 0),
        ),
        "referee": _section(  # replay the finished run in ns-3 (zlab referee); needs provision.sh --referee
            scales={"type": "array", "items": {"enum": ["same", "real"]}, "uniqueItems": True, "default": []},
            real_requests={"type": ["integer", "null"], "minimum": 1, "default": None},
        ),
        "congestion": congestion.SCHEMA,  # ECN, PFC, DCQCN in real units (testbed/congestion/params.py)
    },
}


# What each field means, for people: the generated reference (docs/reference/spec.md) and the
# exported schema (zlab.schema.json, which editors show on hover) read these. A test checks that
# every field has one.
DESCRIPTIONS = {
    "name": "the experiment's name, written into its run folder",
    "seed": "first seed of every random draw; repeat k uses seed + k",
    "repeats": "independent draws per fabric on the same built fabric (QP source ports, scheduler and mapping draws)",
    "timeout_s": "wall-clock limit of one replay, seconds",
    "engine": "where it runs: emulation (Mininet/OVS, time-dilated, scaled sizes, root) or ns3 (the ns-3 packet "
    "engine at real rates and sizes, no root; emulation.rate_scale and workload.size_scale are then 1)",
    "controller": "framework running the zlab OpenFlow app: os-ken, or real Ryu from .venv-ryu",
    "fabrics": "fabric label -> fabric spec (kind:key=value,...; `zlab fabric kinds` lists them); every fabric "
    "replays the same schedule",
    "emulation": "how the real cluster is scaled onto this machine",
    "emulation.rate_scale": "emulated link rate = real rate x rate_scale",
    "emulation.mtu_bytes": "MTU of every emulated link, bytes",
    "emulation.queue_limit_pkts": "switch egress queue limit per port, packets",
    "emulation.agent_socket_buffer_bytes": "the agent's packet-socket buffers (send and receive); too small and "
    "frames die there",
    "workload": "the trace replayed and how requests become KV-cache transfers",
    "workload.trace": "azure-code or azure-conv (shipped: Azure 2023 code and conversation services), or a path to a CSV or Mooncake JSONL trace",
    "workload.start_index": "first request of the trace replayed",
    "workload.requests": "requests replayed per repeat",
    "workload.model": "model preset (llama3-8b, llama3-70b, qwen2.5-coder-32b, glm-4.5, deepseek-v3, glm-5) or its "
    "shape {layers, kv_heads, head_dim, dtype_bytes} / MLA {kv_lora_rank, qk_rope_head_dim}",
    "workload.size_scale": "emulated bytes = real bytes x size_scale (dilation = size_scale / rate_scale)",
    "workload.offered_load": "mean KV traffic as a fraction of the prefill side's NIC capacity (exactly one of "
    "offered_load and load_factor)",
    "workload.load_factor": "compress the trace's arrivals by this factor instead of giving offered_load",
    "workload.prefix_reuse": "Mooncake traces: a block the decode instance already holds does not move",
    "workload.prefill_overhead_s": "fixed prefill time per request, seconds (an assumption)",
    "workload.prefill_tokens_per_s": "prefill rate per P instance, tokens/s (an assumption, high so that the network "
    "limits)",
    "workload.first_decode_step_s": "time of the first decode step, seconds (an assumption)",
    "deployment": "where prefill (P) and decode (D) instances sit and how KV shards map between them",
    "deployment.tp": "tensor-parallel GPUs per instance",
    "deployment.prefill_instances": "P instances (on the first servers)",
    "deployment.decode_instances": "D instances (on the last servers)",
    "deployment.mapping": "KV shard mapping from P ranks to D ranks",
    "deployment.scheduler": "how requests are assigned to instances",
    "deployment.split": "port-split policy of a multi-port fabric kind (a single-port kind ignores it)",
    "deployment.path_mtu": "RoCE path MTU, bytes (4096 needs a link MTU of 9000)",
    "measurement": "what is sampled, and the fidelity guard's limits (a run beyond them is INVALID)",
    "measurement.queue_sample_ms": "switch queue sampling period, emulated ms",
    "measurement.xoff_real_bytes": "the PFC stand-in's XOFF threshold, real bytes (x size_scale = emulated bytes)",
    "measurement.util_window_ms": "window of the link-utilisation figures, emulated ms",
    "measurement.calibrate": "measure every path's goodput with iperf3 before the replays",
    "measurement.max_cpu_fraction": "largest share of a core ovs-vswitchd or the agent may use",
    "measurement.max_machine_cpu_fraction": "largest share of the machine's cores in use",
    "measurement.max_steal_fraction": "largest share of the cores the hypervisor may steal in any ~250 ms interval",
    "measurement.steal_retakes": "times a repeat voided by steal alone is re-taken (the voided one stays on disk)",
    "measurement.steal_wait_s": "longest wait, seconds, for the steal to calm down before a retake",
    "measurement.max_late_sample_fraction": "largest share of queue samples that may come late",
    "measurement.min_calibration_ratio": "smallest calibrated goodput as a share of a path's configured rate",
    "measurement.max_carried_util": "largest carried link utilisation (above 1: the shaper leaked)",
    "measurement.max_lateness_shift": "how far the agent's late releases may move KV p50/p99",
    "measurement.max_link_bytes_error": "largest error of link bytes against the plan",
    "measurement.controller_stats_interval_s": "the controller's flow and port statistics period, seconds",
    "measurement.lldp_interval_s": "LLDP period during replays, seconds (0: none)",
    "failures": "timed failures injected during every replay, and how each fabric recovers",
    "failures.events": "fabric label -> list of events",
    "failures.recovery": "fabric label -> recovery mode (a fabric not named: controller)",
    "failures.probe_hz": "link probes per second per switch-to-switch cable direction",
    "failures.probe_window": "a direction's last N probes considered",
    "failures.probe_min_lost": "probes of the window lost to call a direction gray (routed around)",
    "failures.probe_timeout_s": "a probe not back by then is lost, seconds",
    "failures.poll_s": "the controller's port-state poll, seconds",
    "failures.install_mods_per_s": "the controller's recovery pace, flow-mods per second (0: unpaced)",
    "failures.apm_timeouts": "host recovery: timeouts without progress before a QP moves to its GPU's other port",
    "failures.stall_emulated_s": "a QP whose acknowledgements stop this long with data outstanding records a stall",
    "referee": "replay the finished run in ns-3 (zlab referee); needs provision.sh --referee",
    "referee.scales": "same (the emulation's units) and/or real (real rates and sizes)",
    "referee.real_requests": "real scale: replay only the first N requests (null: all)",
    **congestion.DESCRIPTIONS,
}
EVENT_DESCRIPTIONS = {
    "at_emulated_s": "emulated seconds after the replay's start (x 1/dilation = real seconds)",
    "action": "down, up, gray (silent random loss) or flap",
    "target": "cable:PORT, cable:NODE1,NODE2, cable:busiest or switch:NAME (as in zlab load --fail)",
    "loss_percent": "gray only: the share of frames lost",
    "duration_emulated_s": "gray: cleared after this long",
    "period_emulated_s": "flap: one down + up cycle",
    "count": "flap: cycles",
}


def _describe(schema: dict, texts: dict, prefix: str = "") -> None:
    for key, prop in schema.get("properties", {}).items():
        path = prefix + key
        if path in texts:
            prop["description"] = texts[path]
        _describe(prop, texts, path + ".")


_describe(SCHEMA, DESCRIPTIONS)
_describe(FAILURE_EVENT, EVENT_DESCRIPTIONS)


def defaults(schema: dict = SCHEMA) -> dict:
    """The default spec, read off the schema."""
    out = {}
    for key, prop in schema["properties"].items():
        if prop.get("type") == "object" and "properties" in prop:
            out[key] = defaults(prop)
        elif "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
    return out


DEFAULT = defaults()


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "fabrics":
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _allowed(path: list) -> str:
    node = SCHEMA
    for p in path:
        node = node.get("properties", {}).get(p, {})
    props = node.get("properties")
    return f"; valid fields: {', '.join(props)}" if props else ""


def apply_override(spec: dict, assignment: str) -> dict:
    """'workload.offered_load=0.5' -> spec with that field set (value parsed as YAML)."""
    key, eq, value = assignment.partition("=")
    if not eq or not key:
        raise ExperimentSpecError(f"override {assignment!r} is not KEY=VALUE (e.g. deployment.mapping=rank-shifted)")
    out = copy.deepcopy(spec)
    node = out
    parts = key.split(".")
    for i, p in enumerate(parts[:-1]):
        if not isinstance(node.get(p), dict):
            raise ExperimentSpecError(
                f"override {assignment!r}: {'.'.join(parts[: i + 1])!r} is not a section of the "
                f"spec{_allowed(parts[:i])}"
            )
        node = node[p]
    node[parts[-1]] = _value(value, assignment)
    return out


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _value(text: str, assignment: str):
    """An override's value as YAML, except that 1e-2 is a number (YAML 1.1 wants 1.0e-2)."""
    if _NUMBER.fullmatch(text.strip()):
        num = float(text)
        return int(num) if num.is_integer() else num
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise ExperimentSpecError(f"override {assignment!r}: the value is not valid YAML") from None


def validate(spec: dict) -> dict:
    v = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(v.iter_errors(spec), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        path = list(e.absolute_path)
        where = ".".join(str(p) for p in path) or "(top level)"
        hint = _allowed(path) if e.validator == "additionalProperties" else ""
        raise ExperimentSpecError(f"spec error at {where}: {e.message}{hint}")
    w = spec["workload"]
    if ("offered_load" in w) == ("load_factor" in w):
        raise ExperimentSpecError("spec error at workload: give exactly one of offered_load or load_factor")
    congestion.validate(spec.get("congestion"))  # a run folder from before the section has none
    return spec


def load(path: str | None = None, overrides: list[str] | None = None) -> dict:
    """The default, the YAML file merged over it, then KEY=VALUE overrides; validated."""
    spec = copy.deepcopy(DEFAULT)
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ExperimentSpecError(f"cannot read spec {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ExperimentSpecError(f"{path}: not a UTF-8 text file") from None
        try:
            user = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ExperimentSpecError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(user, dict):
            raise ExperimentSpecError(f"{path}: the spec must be a mapping")
        w = user.get("workload", {})
        if isinstance(w, dict) and "load_factor" in w and "offered_load" not in w:
            spec["workload"].pop("offered_load", None)
        spec = _merge(spec, user)
    for o in overrides or []:
        if o.startswith("workload.load_factor="):
            spec["workload"].pop("offered_load", None)
        if o.startswith("workload.offered_load="):
            spec["workload"].pop("load_factor", None)
        spec = apply_override(spec, o)
    return validate(spec)
