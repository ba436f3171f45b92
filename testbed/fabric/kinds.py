"""The registry of fabric kinds, and spec strings -> fabrics.

Why a registry: the kind named in a spec or a fabric file is looked up here once; nothing
else in zlab tests a kind's name. Tests and extensions add kinds with `register`.
"""

from __future__ import annotations

from typing import Any

from . import roft, zcube
from .kind import FabricKind
from .model import Fabric
from .params import SpecError

KINDS: dict[str, FabricKind] = {k.name: k for k in (zcube.KIND, roft.KIND)}


def register(kind: FabricKind) -> None:
    if kind.name in KINDS and KINDS[kind.name] is not kind:
        raise ValueError(f"fabric kind {kind.name!r} is already registered")
    KINDS[kind.name] = kind


def unregister(name: str) -> None:
    KINDS.pop(name, None)


def get(name: str) -> FabricKind:
    try:
        return KINDS[name]
    except KeyError:
        raise SpecError(f"unknown fabric kind {name!r}; valid kinds: {', '.join(sorted(KINDS))}") from None


def kind_of(fab: Fabric) -> FabricKind:
    return get(fab.kind)


def parse_spec(spec: str) -> tuple[FabricKind, dict[str, Any]]:
    """Split `kind:k=v,...` into the kind and its explicitly given, typed parameters."""
    if not isinstance(spec, str) or not spec.strip():
        raise SpecError(f"empty fabric spec; expected e.g. 'zcube:n=4' (kinds: {', '.join(KINDS)})")
    name, _, rest = spec.strip().partition(":")
    kind = get(name)
    given: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise SpecError(f"{name}: {item!r} is not key=value")
        prm = kind.param(key)
        if key in given:
            raise SpecError(f"{name}: parameter {key!r} given twice")
        given[key] = prm.convert(name, raw.strip())
    return kind, given


def build_fabric(spec: str, **overrides) -> Fabric:
    """Build a Fabric from a spec string; keyword overrides win over the string's values."""
    kind, given = parse_spec(spec)
    for key, value in overrides.items():
        given[key] = kind.param(key).convert(kind.name, value)
    return kind.build(given)
