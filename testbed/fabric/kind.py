"""What a fabric kind is: a plug-in that supplies everything kind-specific.

Why: ZCube and ROFT are two generators of one data type. Everything generic (validation,
walks, flow entries, the load estimator, the emulation) asks the fabric's kind through these
hooks instead of testing the kind's name, so a new kind is one module and one registration.
A kind whose GPUs have one NIC port each can leave the address and split hooks at their
defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .ids import SINGLE_PORT_PLANES, SwitchGroup
from .params import Param, SpecError

if TYPE_CHECKING:  # pragma: no cover
    from .model import Fabric, Node
    from .tables import Tables


def single_port_dst_address(fab: Fabric, src_gpu, src_role: str, dst_gpu):
    """One NIC port per GPU: address index == GPU id (GPU ports come first)."""
    return np.asarray(dst_gpu).copy()


def single_port_split(fab: Fabric, policy: str | None = None) -> list[tuple[str, float]]:
    """One NIC port per GPU: every byte leaves through it; a split policy does not apply."""
    return [(fab.gpu_port(0, 0).role, 1.0)]


def no_identity_checks(fab: Fabric) -> list[tuple[str, str | None]]:
    return []


def tier_row(node: Node) -> int:
    return node.tier


@dataclass(frozen=True)
class FabricKind:
    name: str
    summary: str
    params: tuple[Param, ...]
    build: Callable[[dict], Fabric]  # explicitly given, typed params -> Fabric
    tables: Callable[[Fabric], Tables]  # the forwarding tables the controller installs
    expected_diameter: Callable[[Fabric], int]  # switches on the longest GPU-GPU path
    # destination address (port id) for traffic leaving src_gpu's `src_role` port (vectorised)
    dst_address: Callable = single_port_dst_address
    # port-split policy -> [(source port role, share of bytes)]
    split: Callable[[Fabric, str | None], list[tuple[str, float]]] = single_port_split
    split_policies: tuple[str, ...] = ()
    # [(check name, failure or None)]: the kind's count identities and structural promises
    identity_checks: Callable[[Fabric], list[tuple[str, str | None]]] = no_identity_checks
    # drawing hints: node -> row, row -> label, a legend line
    draw_row: Callable[[Node], int] = tier_row
    row_labels: dict = field(default_factory=lambda: {0: "GPUs", 1: "tier 1", 2: "tier 2", 3: "tier 3"})
    draw_note: str = ""
    # failure repair (failures.py): policy names (first = default), those that move broken subflows to the
    # GPU's other port, and the kind's table repair(fab, next_group, link_down, policy, failures) -> entries changed
    # the kind's switch groups (Node.group: dpid code, name format, colour) and the address plane of each
    # GPU port role (10.<plane>.x.y); the kind's builder uses the same declarations (ids.py turns them
    # into identifiers), so a new kind brings its own groups and planes
    switch_groups: tuple[SwitchGroup, ...] = ()
    address_planes: dict = field(default_factory=lambda: dict(SINGLE_PORT_PLANES))
    repair_policies: tuple[str, ...] = ("withdraw",)
    failover_policies: tuple[str, ...] = ()
    repair: Callable | None = None
    controller_policy: str | None = None  # the policy a rerouting controller installs (None: the first)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise SpecError(
            f"{self.name}: unknown parameter {name!r}; valid parameters: {', '.join(p.name for p in self.params)}"
        )

    def switch_group(self, name: str) -> SwitchGroup:
        for g in self.switch_groups:
            if g.name == name:
                return g
        raise ValueError(
            f"{self.name}: no switch group {name!r}; the kind declares "
            f"{', '.join(g.name for g in self.switch_groups) or 'none'}"
        )

    def check_split(self, policy: str | None) -> None:
        if policy is not None and self.split_policies and policy not in self.split_policies:
            raise SpecError(f"{self.name}: unknown split policy {policy!r}; valid: {', '.join(self.split_policies)}")

    def describe(self) -> str:
        lines = [f"{self.name}: {self.summary}"]
        for p in self.params:
            default = (
                "required"
                if p.default is None and "derived" not in p.help
                else ("derived" if p.default is None else f"default {p.default}")
            )
            lines.append(f"  {p.name:<20} {p.type.__name__:<6} {default:<14} {p.help}")
        return "\n".join(lines)
