"""Shared construction helper for the fabric generators.

Why: both generators must produce the same data type with the same id conventions (GPU
nodes and GPU ports first, identifiers from coordinates); one builder enforces that.
"""

from __future__ import annotations

from . import ids
from .model import Fabric, Link, Node, Port


class FabricBuilder:
    """Adds GPUs, switches, ports and links with their identifiers; `groups` and `planes` are the
    kind's own declarations (its switch groups; GPU port role -> address plane)."""

    def __init__(self, kind: str, groups: tuple[ids.SwitchGroup, ...], planes: dict[str, int] = ids.SINGLE_PORT_PLANES):
        self.kind = kind
        self.groups = {g.name: g for g in groups}
        self.planes = dict(planes)
        self.nodes: list[Node] = []
        self.ports: list[Port] = []
        self.links: list[Link] = []
        self._switch_ports: dict[tuple[int, int], int] = {}
        self._switch_seen = False

    def gpu(
        self,
        gpu: int,
        server: int,
        local_rank: int,
        roles: tuple[str, ...],
        rate_bps: int,
        segment: int = -1,
        rail: int = -1,
    ) -> int:
        if self._switch_seen:
            raise RuntimeError("GPUs must be added before switches (GPU ports come first)")
        if gpu != len(self.nodes):
            raise RuntimeError("GPUs must be added in index order")
        name = ids.gpu_name(gpu)
        unknown = [r for r in roles if r not in self.planes]
        if unknown:
            raise ValueError(
                f"{self.kind}: GPU port role {unknown[0]!r} has no address plane; the kind declares "
                f"{', '.join(self.planes) or 'none'}"
            )
        self.nodes.append(
            Node(
                id=gpu,
                name=name,
                role="gpu",
                group="gpu",
                tier=0,
                index=gpu,
                server=server,
                local_rank=local_rank,
                segment=segment,
                rail=rail,
            )
        )
        for k, role in enumerate(roles):
            self.ports.append(
                Port(
                    id=len(self.ports),
                    node=gpu,
                    number=k,
                    name=ids.ifname(name, k),
                    role=role,
                    rate_bps=rate_bps,
                    mac=ids.gpu_mac(gpu, self.planes[role]),
                    ip=ids.gpu_ip(gpu, self.planes[role]),
                )
            )
        return gpu

    def switch(
        self, group: str, tier: int, index: int, radix: int, segment: int = -1, rail: int = -1, pod: int = -1
    ) -> int:
        self._switch_seen = True
        g = self.groups.get(group)
        if g is None:
            raise ValueError(
                f"{self.kind}: switch group {group!r} is not declared by the kind; it declares "
                f"{', '.join(self.groups) or 'none'}"
            )
        node_id = len(self.nodes)
        self.nodes.append(
            Node(
                id=node_id,
                name=g.switch_name(index, segment, pod),
                role="switch",
                group=group,
                tier=tier,
                index=index,
                segment=segment,
                rail=rail,
                pod=pod,
                dpid=ids.dpid(g.code, index, segment if segment >= 0 else pod),
                radix=radix,
            )
        )
        return node_id

    def switch_port(self, node: int, number: int, role: str, rate_bps: int) -> int:
        key = (node, number)
        if key in self._switch_ports:
            raise RuntimeError(f"port {number} of {self.nodes[node].name} created twice")
        pid = len(self.ports)
        sw = self.nodes[node]
        self.ports.append(
            Port(
                id=pid,
                node=node,
                number=number,
                name=ids.ifname(sw.name, number),
                role=role,
                rate_bps=rate_bps,
                mac=ids.switch_port_mac(sw.dpid, number),
            )
        )
        self._switch_ports[key] = pid
        return pid

    def link(self, a: int, b: int, rate_bps: int, kind: str, medium: str) -> int:
        lid = len(self.links)
        self.links.append(Link(id=lid, a=a, b=b, rate_bps=rate_bps, kind=kind, medium=medium))
        return lid

    def finish(self, spec: str, params: dict) -> Fabric:
        return Fabric(
            kind=self.kind,
            spec=spec,
            params=params,
            nodes=tuple(self.nodes),
            ports=tuple(self.ports),
            links=tuple(self.links),
        )


def gbps_to_bps(gbps: float) -> int:
    return int(round(gbps * 1e9))
