"""Typed fabric parameters and the spec-string form (`zcube:n=4,gpus_per_server=4`).

Why a schema per kind: an unknown or mistyped parameter must fail with the list of valid ones,
never fall back to a default that silently changes an experiment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import UserInputError


class SpecError(UserInputError):
    """A fabric spec that cannot be built, with a message that says how to fix it."""


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any  # None = required or derived (see help)
    help: str
    choices: tuple = ()

    def convert(self, kind: str, raw: Any) -> Any:
        """A raw value (string from a spec, or a Python value) as this parameter's type."""
        try:
            if self.type is bool:
                text = str(raw).lower()
                if text in ("1", "true", "yes", "on"):
                    return True
                if text in ("0", "false", "no", "off"):
                    return False
                raise ValueError(raw)
            if self.type is int and isinstance(raw, float) and not raw.is_integer():
                raise ValueError(raw)
            value = self.type(raw)
        except (ValueError, TypeError, OverflowError):
            raise SpecError(f"{kind}: parameter {self.name}={raw!r} is not a valid {self.type.__name__}") from None
        if self.type is float and not math.isfinite(value):
            raise SpecError(f"{kind}: parameter {self.name}={raw!r} must be a finite number")
        if self.choices and value not in self.choices:
            raise SpecError(f"{kind}: {self.name}={raw!r}; valid values: {', '.join(map(str, self.choices))}")
        return value


def resolve_params(kind: str, params: tuple[Param, ...], given: dict) -> dict:
    """Every parameter's value: given ones, else the default."""
    return {p.name: given.get(p.name, p.default) for p in params}


def canonical_spec(kind: str, params: tuple[Param, ...], resolved: dict[str, Any]) -> str:
    def fmt(v):
        if isinstance(v, bool):
            return "1" if v else "0"
        if isinstance(v, float) and v.is_integer():
            return str(int(v))
        return str(v)

    return kind + ":" + ",".join(f"{p.name}={fmt(resolved[p.name])}" for p in params)


def require(cond: bool, kind: str, message: str) -> None:
    if not cond:
        raise SpecError(f"{kind}: {message}")
