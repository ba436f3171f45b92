"""The one fabric data type that ZCube and ROFT generators both produce.

Plain data (nodes, ports, links, addresses) so that every consumer — Mininet builder,
controller, load estimator, analysis — reads the same resolved object, serialised as
versioned JSON in the run folder. Ports of GPUs come first (id = gpu * ports_per_gpu + k),
which lets routing index addresses by port id without lookups.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import UserInputError

SCHEMA = "zlab.fabric/1"


class FabricFileError(UserInputError):
    """A file that is not a fabric this zlab can read."""


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    name: str
    role: str  # "gpu" | "switch"
    group: str  # gpu | A | B | leaf | spine | agg | core
    tier: int  # 0 GPU, 1 A/B/leaf, 2 spine/agg, 3 core
    index: int  # index within its group
    server: int = -1
    local_rank: int = -1  # GPU's rank inside its server (its rail in ROFT)
    segment: int = -1
    rail: int = -1
    pod: int = -1
    dpid: int = 0
    radix: int = 0  # switch port budget


@dataclass(frozen=True, slots=True)
class Port:
    id: int
    node: int
    number: int  # OpenFlow port number on switches (1-based); NIC index on GPUs (0-based)
    name: str  # interface name, <= 15 characters
    role: str  # GPU: nic | cons | rail; switch: down | up | fabric
    rate_bps: int
    mac: str = ""
    ip: str = ""


@dataclass(frozen=True, slots=True)
class Link:
    """An undirected cable. Directed link ids: 2*id is a->b, 2*id+1 is b->a."""

    id: int
    a: int  # port id, the lower-tier end (GPU side for NIC links)
    b: int  # port id
    rate_bps: int
    kind: str  # nic | fabric
    medium: str  # copper | fibre


@dataclass(frozen=True)
class Fabric:
    kind: str  # zcube | roft
    spec: str  # canonical spec string, e.g. "zcube:n=4,gpus_per_server=4"
    params: Mapping[str, Any]
    nodes: tuple[Node, ...]
    ports: tuple[Port, ...]
    links: tuple[Link, ...]
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    # ---- structure -------------------------------------------------------------------
    @cached_property
    def gpus(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.role == "gpu")

    @cached_property
    def switches(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.role == "switch")

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)

    @cached_property
    def ports_per_gpu(self) -> int:
        """NIC ports per GPU, from the data (every GPU has the same ports, GPU 0's first)."""
        return sum(1 for p in self.ports if p.node == 0)

    @cached_property
    def gpu_port_roles(self) -> tuple[str, ...]:
        """Roles of a GPU's ports in port order, e.g. ("cons", "rail") or ("nic",)."""
        return tuple(self.ports[k].role for k in range(self.ports_per_gpu))

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def port_by_ip(self) -> dict[str, Port]:
        return {p.ip: p for p in self.ports if p.ip}

    def gpu_port(self, gpu: int, k: int) -> Port:
        return self.ports[gpu * self.ports_per_gpu + k]

    def gpu_port_by_role(self, gpu: int, role: str) -> Port:
        for k in range(self.ports_per_gpu):
            p = self.gpu_port(gpu, k)
            if p.role == role:
                return p
        raise KeyError(f"GPU {gpu} has no {role!r} port (fabric {self.kind})")

    @cached_property
    def port_link(self) -> np.ndarray:
        """port id -> link id (-1 for an unused switch port)."""
        out = np.full(len(self.ports), -1, dtype=np.int64)
        for link in self.links:
            out[link.a] = link.id
            out[link.b] = link.id
        return out

    @cached_property
    def port_node(self) -> np.ndarray:
        return np.fromiter((p.node for p in self.ports), dtype=np.int64, count=len(self.ports))

    @cached_property
    def link_ends(self) -> np.ndarray:
        """(L, 2) array of port ids."""
        return np.array([(l.a, l.b) for l in self.links], dtype=np.int64).reshape(-1, 2)

    @cached_property
    def link_rate_bps(self) -> np.ndarray:
        return np.fromiter((l.rate_bps for l in self.links), dtype=np.float64, count=len(self.links))

    @cached_property
    def switch_port_ids(self) -> dict[int, dict[int, int]]:
        """switch node id -> {port number: port id}."""
        out: dict[int, dict[int, int]] = {}
        for p in self.ports:
            if self.nodes[p.node].role == "switch":
                out.setdefault(p.node, {})[p.number] = p.id
        return out

    def peer_port(self, port_id: int) -> int:
        link = self.links[int(self.port_link[port_id])]
        return link.b if link.a == port_id else link.a

    def attach_switch(self, gpu_port_id: int) -> int:
        """Switch node id a GPU port is cabled to."""
        return self.ports[self.peer_port(gpu_port_id)].node

    # ---- serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "kind": self.kind,
            "spec": self.spec,
            "params": dict(self.params),
            "counts": self.counts(),
            "node_fields": [f.name for f in fields(Node)],
            "nodes": [list(asdict(n).values()) for n in self.nodes],
            "port_fields": [f.name for f in fields(Port)],
            "ports": [list(asdict(p).values()) for p in self.ports],
            "link_fields": [f.name for f in fields(Link)],
            "links": [list(asdict(l).values()) for l in self.links],
        }

    def to_json(self) -> str:
        """Deterministic: the same spec gives byte-identical output."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping) -> Fabric:
        if data.get("schema") != SCHEMA:
            raise FabricFileError(f"not a zlab fabric file: schema {data.get('schema')!r}, expected {SCHEMA!r}")

        def rows(kind, typ):
            names = data[f"{kind}_fields"]
            expected = [f.name for f in fields(typ)]
            if names != expected:
                raise FabricFileError(f"fabric file {kind} fields {names} do not match this zlab ({expected})")
            return tuple(typ(*row) for row in data[f"{kind}s"])

        return cls(
            kind=data["kind"],
            spec=data["spec"],
            params=dict(data["params"]),
            nodes=rows("node", Node),
            ports=rows("port", Port),
            links=rows("link", Link),
        )

    @classmethod
    def from_json(cls, text: str) -> Fabric:
        return cls.from_dict(json.loads(text))

    @classmethod
    def load(cls, path) -> Fabric:
        with open(path, encoding="utf-8") as fh:
            return cls.from_json(fh.read())

    # ---- summaries -------------------------------------------------------------------
    @property
    def n_switch_ports(self) -> int:
        """Ports on switches (the OVS ports of the emulated fabric): every port that is not a GPU NIC's."""
        return len(self.ports) - self.n_gpus * self.ports_per_gpu

    def counts(self) -> dict[str, int]:
        nic = sum(1 for l in self.links if l.kind == "nic")
        by_group: dict[str, int] = {}
        for n in self.switches:
            by_group[n.group] = by_group.get(n.group, 0) + 1
        return {
            "gpus": self.n_gpus,
            "switches": len(self.switches),
            "nic_links": nic,
            "fabric_links": len(self.links) - nic,
            "cables": len(self.links),
            **{f"switches_{g}": c for g, c in sorted(by_group.items())},
        }
