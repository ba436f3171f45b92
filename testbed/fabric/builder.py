"""Shared construction helper for the fabric generators.

Why: both generators must produce the same data type with the same id conventions (GPU
nodes and GPU ports first, identifiers from coordinates); one builder enforces that.
"""

from __future__ import annotations

from . import ids
from .model import Fabric, Link, Node, Port


class FabricBuilder:
    def __init__(self, kind: str):
        self.kind = kind
        self.nodes: list[Node] = []
        self.ports: list[Port] = []
        self.links: list[Link] = []
        self._switch_ports: dict[tuple[int, int], int] = {}
        self._switch_seen = False

    def gpu(self, gpu: int, server: int, local_rank: int, roles: tuple[str, ...], rate_bps: int,
            segment: int = -1, rail: int = -1) -> int:
        if self._switch_seen:
            raise RuntimeError("GPUs must be added before switches (GPU ports come first)")
        if gpu != len(self.nodes):
            raise RuntimeError("GPUs must be added in index order")
        name = ids.gpu_name(gpu)
        self.nodes.append(Node(id=gpu, name=name, role="gpu", group="gpu", tier=0, index=gpu,
                               server=server, local_rank=local_rank, segment=segment, rail=rail))
        for k, role in enumerate(roles):
            self.ports.append(Port(id=len(self.ports), node=gpu, number=k, name=ids.ifname(name, k),
                                   role=role, rate_bps=rate_bps, mac=ids.gpu_mac(gpu, role),
                                   ip=ids.gpu_ip(gpu, role)))
        return gpu

    def switch(self, group: str, tier: int, index: int, radix: int, segment: int = -1,
               rail: int = -1, pod: int = -1) -> int:
        self._switch_seen = True
        node_id = len(self.nodes)
        self.nodes.append(Node(id=node_id, name=ids.switch_name(group, index, segment, pod), role="switch",
                               group=group, tier=tier, index=index, segment=segment, rail=rail, pod=pod,
                               dpid=ids.dpid(group, index, segment if segment >= 0 else pod),
                               radix=radix))
        return node_id

    def switch_port(self, node: int, number: int, role: str, rate_bps: int) -> int:
        key = (node, number)
        if key in self._switch_ports:
            raise RuntimeError(f"port {number} of {self.nodes[node].name} created twice")
        pid = len(self.ports)
        sw = self.nodes[node]
        self.ports.append(Port(id=pid, node=node, number=number, name=ids.ifname(sw.name, number), role=role,
                               rate_bps=rate_bps, mac=ids.switch_port_mac(sw.dpid, number)))
        self._switch_ports[key] = pid
        return pid

    def link(self, a: int, b: int, rate_bps: int, kind: str, medium: str) -> int:
        lid = len(self.links)
        self.links.append(Link(id=lid, a=a, b=b, rate_bps=rate_bps, kind=kind, medium=medium))
        return lid

    def finish(self, spec: str, params: dict) -> Fabric:
        return Fabric(kind=self.kind, spec=spec, params=params, nodes=tuple(self.nodes),
                      ports=tuple(self.ports), links=tuple(self.links))


def gbps_to_bps(gbps: float) -> int:
    return int(round(gbps * 1e9))
