"""Experiment specs: YAML validated against a JSON Schema, merged over the built-in default.

Why a schema with no extra keys allowed: a misspelt field must fail naming itself, not be
ignored while a default silently runs a different experiment.
"""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import yaml

DEFAULT = {
    "name": "zcube-vs-roft",
    "fabrics": {
        "zcube": "zcube:n=4,gpus_per_server=4",
        "roft": "roft:gpus=16,gpus_per_server=4,segments=2",
    },
    "emulation": {"rate_scale": 2.5e-5, "mtu_bytes": 9000, "queue_limit_pkts": 1000},
    "workload": {
        "trace": "azure-code",
        "start_index": 0,
        "requests": 400,
        "model": "llama3-70b",
        "size_scale": 2.5e-4,
        "offered_load": 0.2,
        "prefix_reuse": False,
        "prefill_overhead_s": 0.005,
        "prefill_tokens_per_s": 1500000.0,
        "first_decode_step_s": 0.02,
    },
    "deployment": {"tp": 4, "prefill_instances": 2, "decode_instances": 2, "mapping": "rail-aligned",
                   "scheduler": "round-robin", "split": "half", "path_mtu": 4096},
    "measurement": {"queue_sample_ms": 10, "xoff_bytes": 65536, "util_window_ms": 100,
                    "calibrate": True, "max_cpu_fraction": 0.9, "max_late_sample_fraction": 0.05,
                    "min_calibration_ratio": 0.9, "controller_stats_interval_s": 5.0,
                    "lldp_interval_s": 30.0},
    "seed": 0,
    "timeout_s": 60,
}

_num = {"type": "number"}
_pos = {"type": "number", "exclusiveMinimum": 0}
_int1 = {"type": "integer", "minimum": 1}
SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["fabrics", "emulation", "workload", "deployment", "measurement"],
    "properties": {
        "name": {"type": "string"},
        "seed": {"type": "integer"},
        "timeout_s": _pos,
        "fabrics": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string", "pattern": "^(zcube|roft):"}},
        "emulation": {"type": "object", "additionalProperties": False, "properties": {
            "rate_scale": _pos, "mtu_bytes": {"type": "integer", "minimum": 576, "maximum": 9000},
            "queue_limit_pkts": _int1}},
        "workload": {"type": "object", "additionalProperties": False, "properties": {
            "trace": {"type": "string"}, "start_index": {"type": "integer", "minimum": 0}, "requests": _int1,
            "model": {"oneOf": [{"type": "string"}, {"type": "object"}]}, "size_scale": _pos,
            "offered_load": _pos, "load_factor": _pos, "prefix_reuse": {"type": "boolean"},
            "prefill_overhead_s": {"type": "number", "minimum": 0}, "prefill_tokens_per_s": _pos,
            "first_decode_step_s": {"type": "number", "minimum": 0}}},
        "deployment": {"type": "object", "additionalProperties": False, "properties": {
            "tp": _int1, "prefill_instances": _int1, "decode_instances": _int1,
            "mapping": {"enum": ["rail-aligned", "rank-shifted", "random", "incast"]},
            "scheduler": {"enum": ["round-robin", "least-loaded"]},
            "split": {"enum": ["half", "cons", "rail"]},
            "path_mtu": {"enum": [256, 512, 1024, 2048, 4096]}}},
        "measurement": {"type": "object", "additionalProperties": False, "properties": {
            "queue_sample_ms": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
            "xoff_bytes": _int1, "util_window_ms": _pos, "calibrate": {"type": "boolean"},
            "max_cpu_fraction": _pos, "max_late_sample_fraction": _num, "min_calibration_ratio": _num,
            "controller_stats_interval_s": _pos, "lldp_interval_s": _pos}},
    },
}


class ExperimentSpecError(ValueError):
    pass


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "fabrics":
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _coerce(text: str):
    return yaml.safe_load(text)


def apply_override(spec: dict, assignment: str) -> dict:
    """'workload.offered_load=0.5' -> spec with that field set (value parsed as YAML)."""
    key, eq, value = assignment.partition("=")
    if not eq or not key:
        raise ExperimentSpecError(f"override {assignment!r} is not KEY=VALUE (e.g. deployment.mapping=rank-shifted)")
    out = copy.deepcopy(spec)
    node = out
    parts = key.split(".")
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            raise ExperimentSpecError(f"override {assignment!r}: {p!r} is not a section of the spec")
        node = node[p]
    node[parts[-1]] = _coerce(value)
    return out


def validate(spec: dict) -> dict:
    v = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(v.iter_errors(spec), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ExperimentSpecError(f"spec error at {where}: {e.message}")
    w = spec["workload"]
    if ("offered_load" in w) == ("load_factor" in w):
        raise ExperimentSpecError("spec error at workload: give exactly one of offered_load or load_factor")
    return spec


def load(path: str | None = None, overrides: list[str] | None = None) -> dict:
    """The default, the YAML file merged over it, then KEY=VALUE overrides; validated."""
    spec = copy.deepcopy(DEFAULT)
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ExperimentSpecError(f"cannot read spec {path}: {exc.strerror}") from None
        try:
            user = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ExperimentSpecError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(user, dict):
            raise ExperimentSpecError(f"{path}: the spec must be a mapping")
        w = user.get("workload", {})
        if isinstance(w, dict) and "load_factor" in w:
            spec["workload"].pop("offered_load", None)
        spec = _merge(spec, user)
    for o in overrides or []:
        if o.startswith("workload.load_factor="):
            spec["workload"].pop("offered_load", None)
        if o.startswith("workload.offered_load="):
            spec["workload"].pop("load_factor", None)
        spec = apply_override(spec, o)
    return validate(spec)
