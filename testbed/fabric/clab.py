"""A fabric as a containerlab topology (`NAME.clab.yml`), and back.

Why: network engineers take a fabric to containerlab. The export uses containerlab's documented
topology format: switches are `ovs-bridge` nodes (containerlab attaches interfaces to bridges that
must exist, so `setup_script` creates them, with the zlab controller as theirs), GPUs are `linux`
nodes whose `exec` commands give each NIC port its address, routes and neighbours (the same `ip`
commands the Mininet builder runs), and every cable is a link between the same interface names.
Everything the zlab model holds that containerlab has no field for travels as `zlab.*` labels
(strings), so `load` rebuilds the identical fabric: a round trip reproduces the fabric JSON byte
for byte. Pure data: no containerlab, Docker or root needed to export or import.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, fields

import yaml

from .hostconf import ip_commands
from .model import Fabric, FabricFileError, Link, Node, Port

DEFAULT_IMAGE = "ghcr.io/hellt/network-multitool"  # any image with iproute2 (the exec commands are `ip ...`)
NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def lab_name(fab: Fabric) -> str:
    return "zlab-" + re.sub(r"[^A-Za-z0-9_-]+", "-", fab.spec.split(",")[0].replace(":", "-")).strip("-")


def to_dict(
    fab: Fabric,
    name: str | None = None,
    image: str = DEFAULT_IMAGE,
    mtu_bytes: int = 9000,
    controller: str = "tcp:127.0.0.1:6653",
) -> dict:
    name = name or lab_name(fab)
    if not NAME_RE.match(name):
        raise FabricFileError(f"lab name {name!r}: letters, digits, '-' and '_' only")
    ports_of: dict[int, list[Port]] = {}
    for p in fab.ports:
        ports_of.setdefault(p.node, []).append(p)
    nodes = {}
    for n in fab.nodes:
        labels = {
            "zlab.node": json.dumps(list(asdict(n).values()), separators=(",", ":")),
            "zlab.ports": json.dumps([list(asdict(p).values()) for p in ports_of.get(n.id, [])], separators=(",", ":")),
        }
        if n.role == "switch":
            nodes[n.name] = {"kind": "ovs-bridge", "labels": labels}
        else:
            nodes[n.name] = {
                "kind": "linux",
                "image": image,
                "labels": labels,
                "exec": [f"ip {c}" for c in ip_commands(fab, n.id, mtu_bytes)],
            }
    links = []
    for l in fab.links:
        a, b = fab.ports[l.a], fab.ports[l.b]
        links.append(
            {
                "endpoints": [f"{fab.nodes[a.node].name}:{a.name}", f"{fab.nodes[b.node].name}:{b.name}"],
                "mtu": mtu_bytes,
                "labels": {"zlab.link": json.dumps([l.id, l.rate_bps, l.kind, l.medium], separators=(",", ":"))},
            }
        )
    return {
        "name": name,
        "topology": {
            "defaults": {
                "labels": {
                    "zlab.schema": "zlab.clab/1",
                    "zlab.kind": fab.kind,
                    "zlab.spec": fab.spec,
                    "zlab.params": json.dumps(dict(fab.params), sort_keys=True, separators=(",", ":")),
                    "zlab.node-fields": ",".join(f.name for f in fields(Node)),
                    "zlab.port-fields": ",".join(f.name for f in fields(Port)),
                    "zlab.controller": controller,
                }
            },
            "nodes": nodes,
            "links": links,
        },
    }


def dumps(fab: Fabric, **kw) -> str:
    head = (
        f"# containerlab topology of {fab.spec}, written by zlab (zlab fabric export).\n"
        f"# Switches are ovs-bridge nodes: create them first with the setup script written next to this file.\n"
    )
    return head + yaml.safe_dump(to_dict(fab, **kw), sort_keys=False, width=1 << 20)


def setup_script(fab: Fabric, controller: str = "tcp:127.0.0.1:6653", datapath: str = "netdev") -> str:
    """Shell steps around `containerlab deploy` (containerlab does not create ovs-bridge nodes):
    `up` creates every switch bridge pointed at the zlab controller; `ports` (after deploy) pins each
    switch interface to its model port number, which the flow entries use (OVS would otherwise number
    them in attachment order); `down` removes the bridges."""
    lines = [
        "#!/bin/sh",
        f"# zlab: the OVS side of this lab ({fab.spec})",
        "#   ./THIS.sh up; containerlab deploy -t THIS.clab.yml; ./THIS.sh ports; zlab controller THIS.controller",
        "set -e",
        'case "$1" in',
        "  up)",
    ]
    for sw in fab.switches:
        lines.append(
            f"    ovs-vsctl --may-exist add-br {sw.name} -- set bridge {sw.name} datapath_type={datapath} "
            f"fail-mode=secure protocols=OpenFlow13 other-config:datapath-id={sw.dpid:016x} "
            f"-- set-controller {sw.name} {controller}"
        )
    lines += ["    ;;", "  ports)"]
    for p in fab.ports:
        if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0:
            lines.append(f"    ovs-vsctl set Interface {p.name} ofport_request={p.number}")
    lines += ["    ;;", "  down)"]
    lines += [f"    ovs-vsctl --if-exists del-br {sw.name}" for sw in fab.switches]
    lines += ["    ;;", '  *) echo "usage: $0 up|ports|down" >&2; exit 2 ;;', "esac", ""]
    return "\n".join(lines)


def loads(text: str) -> Fabric:
    """The zlab fabric a `zlab fabric export` containerlab file describes (errors name what is wrong)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FabricFileError(f"not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("topology"), dict):
        raise FabricFileError("not a containerlab topology (no 'topology' mapping)")
    topo = doc["topology"]
    d = (topo.get("defaults") or {}).get("labels") or {}
    if d.get("zlab.schema") != "zlab.clab/1":
        raise FabricFileError(
            "not a topology zlab exported (topology.defaults.labels has no zlab.schema "
            "'zlab.clab/1'); zlab imports only its own exports"
        )
    if d.get("zlab.node-fields") != ",".join(f.name for f in fields(Node)) or d.get("zlab.port-fields") != ",".join(
        f.name for f in fields(Port)
    ):
        raise FabricFileError("the file was written by a zlab with other node/port fields")
    nodes, ports = [], []
    for name, nd in (topo.get("nodes") or {}).items():
        try:
            node = Node(*json.loads(nd["labels"]["zlab.node"]))
            node_ports = [Port(*row) for row in json.loads(nd["labels"]["zlab.ports"])]
        except (KeyError, TypeError, ValueError) as exc:
            raise FabricFileError(f"node {name}: missing or bad zlab labels ({exc})") from None
        if node.name != name:
            raise FabricFileError(f"node {name}: its zlab.node label names {node.name!r}")
        want_kind = "ovs-bridge" if node.role == "switch" else "linux"
        if nd.get("kind") != want_kind:
            raise FabricFileError(f"node {name}: kind {nd.get('kind')!r}, expected {want_kind!r} for a {node.role}")
        nodes.append(node)
        ports += node_ports
    nodes.sort(key=lambda n: n.id)
    ports.sort(key=lambda p: p.id)
    if [n.id for n in nodes] != list(range(len(nodes))) or [p.id for p in ports] != list(range(len(ports))):
        raise FabricFileError("node or port ids are not 0..N-1: nodes were added or removed by hand")
    by_name = {(nodes[p.node].name, p.name): p for p in ports}
    links = []
    for i, lk in enumerate(topo.get("links") or []):
        try:
            ends = [by_name[tuple(e.split(":", 1))] for e in lk["endpoints"]]
            lid, rate, kind, medium = json.loads(lk["labels"]["zlab.link"])
        except (KeyError, TypeError, ValueError) as exc:
            raise FabricFileError(
                f"links[{i}] {lk.get('endpoints') if isinstance(lk, dict) else lk}: unknown "
                f"endpoint or missing zlab.link label ({exc})"
            ) from None
        links.append(Link(lid, ends[0].id, ends[1].id, rate, kind, medium))
    links.sort(key=lambda l: l.id)
    if [l.id for l in links] != list(range(len(links))):
        raise FabricFileError("link ids are not 0..N-1: cables were added or removed by hand")
    return Fabric(
        kind=d["zlab.kind"],
        spec=d["zlab.spec"],
        params=json.loads(d["zlab.params"]),
        nodes=tuple(nodes),
        ports=tuple(ports),
        links=tuple(links),
    )
