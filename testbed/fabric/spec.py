"""Fabric spec strings (`zcube:n=4,gpus_per_server=4`) and their parameter schemas.

Why a schema: an unknown or mistyped parameter must fail with the list of valid ones, never
fall back to a default that silently changes an experiment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class SpecError(ValueError):
    """A fabric spec that cannot be built, with a message that says how to fix it."""


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any  # None = required or derived (see help)
    help: str
    choices: tuple = ()

    def convert(self, kind: str, raw: str) -> Any:
        try:
            if self.type is bool:
                if raw.lower() in ("1", "true", "yes", "on"):
                    return True
                if raw.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(raw)
            value = self.type(raw)
        except ValueError:
            raise SpecError(f"{kind}: parameter {self.name}={raw!r} is not a valid {self.type.__name__}") from None
        if self.choices and value not in self.choices:
            raise SpecError(f"{kind}: {self.name}={raw!r}; valid values: {', '.join(map(str, self.choices))}")
        return value


@dataclass(frozen=True)
class FabricKind:
    name: str
    summary: str
    params: tuple[Param, ...]
    build: Callable  # (resolved params dict, canonical spec) -> Fabric

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def describe(self) -> str:
        lines = [f"{self.name}: {self.summary}"]
        for p in self.params:
            default = "required" if p.default is None and "derived" not in p.help else (
                "derived" if p.default is None else f"default {p.default}")
            lines.append(f"  {p.name:<20} {p.type.__name__:<6} {default:<14} {p.help}")
        return "\n".join(lines)


KINDS: dict[str, FabricKind] = {}


def register(kind: FabricKind) -> None:
    KINDS[kind.name] = kind


def _kinds() -> dict[str, FabricKind]:
    # Import generators lazily so spec parsing has no import cycle.
    from . import roft, zcube  # noqa: F401

    return KINDS


def parse_spec(spec: str) -> tuple[FabricKind, dict[str, Any]]:
    """Split `kind:k=v,...` into the kind and its explicitly given, typed parameters."""
    kinds = _kinds()
    if not isinstance(spec, str) or not spec.strip():
        raise SpecError(f"empty fabric spec; expected e.g. 'zcube:n=4' (kinds: {', '.join(kinds)})")
    name, _, rest = spec.strip().partition(":")
    if name not in kinds:
        raise SpecError(f"unknown fabric kind {name!r}; valid kinds: {', '.join(kinds)}")
    kind = kinds[name]
    given: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise SpecError(f"{name}: {item!r} is not key=value")
        valid = [p.name for p in kind.params]
        if key not in valid:
            raise SpecError(f"{name}: unknown parameter {key!r}; valid parameters: {', '.join(valid)}")
        if key in given:
            raise SpecError(f"{name}: parameter {key!r} given twice")
        given[key] = kind.param(key).convert(name, raw.strip())
    return kind, given


def canonical_spec(kind: FabricKind, resolved: dict[str, Any]) -> str:
    def fmt(v):
        if isinstance(v, bool):
            return "1" if v else "0"
        if isinstance(v, float) and v.is_integer():
            return str(int(v))
        return str(v)

    return kind.name + ":" + ",".join(f"{p.name}={fmt(resolved[p.name])}" for p in kind.params)


def build_fabric(spec: str, **overrides):
    """Build a Fabric from a spec string; keyword overrides win over the string's values."""
    kind, given = parse_spec(spec)
    for key, value in overrides.items():
        try:
            p = kind.param(key)
        except KeyError:
            raise SpecError(f"{kind.name}: unknown parameter {key!r}; valid parameters: "
                            f"{', '.join(p.name for p in kind.params)}") from None
        given[key] = p.convert(kind.name, str(value)) if isinstance(value, str) else value
    return kind.build(given)


def require(cond: bool, kind: str, message: str) -> None:
    if not cond:
        raise SpecError(f"{kind}: {message}")
