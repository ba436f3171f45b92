"""A toy third fabric kind, whole in this one module: two edge switches, two hub switches, every
edge to every hub. Its switch groups ("edge", "hub") are its own — no other kind has them — so
the tests that register it prove a new kind needs no edit anywhere else (test_fabric_kinds_plugin.py)."""

import numpy as np

from testbed.fabric import Fabric
from testbed.fabric.builder import FabricBuilder, gbps_to_bps
from testbed.fabric.ids import SwitchGroup
from testbed.fabric.kind import FabricKind
from testbed.fabric.params import Param, canonical_spec, require, resolve_params
from testbed.fabric.tables import GroupIndex, Tables, port_peer, ports_between

NAME = "toy"
PARAMS = (
    Param("gpus", int, None, "GPUs, split over two edge switches"),
    Param("gpus_per_server", int, 2, "GPUs per server"),
    Param("gpu_gbps", float, 400.0, "per GPU"),
)
GROUPS = (SwitchGroup("edge", 0xE, "e{index}", "#fdd0a2"), SwitchGroup("hub", 0xF, "h{index}", "#c7e9c0"))


def build(given: dict) -> Fabric:
    """Two edges, two hubs, every edge to every hub: the smallest two-tier Clos."""
    p = resolve_params(NAME, PARAMS, given)
    require(p["gpus"] and p["gpus"] % 4 == 0, NAME, "gpus must be a multiple of 4")
    rate = gbps_to_bps(p["gpu_gbps"])
    half = p["gpus"] // 2
    b = FabricBuilder(NAME, GROUPS)
    for g in range(p["gpus"]):
        b.gpu(g, server=g // p["gpus_per_server"], local_rank=g % p["gpus_per_server"], roles=("nic",), rate_bps=rate)
    edges = [b.switch("edge", 1, i, half + 2, segment=i) for i in range(2)]
    hubs = [b.switch("hub", 2, k, 2) for k in range(2)]
    ep = {(e, n): b.switch_port(e, n, "down" if n <= half else "up", rate) for e in edges for n in range(1, half + 3)}
    hp = {(h, n): b.switch_port(h, n, "down", rate) for h in hubs for n in (1, 2)}
    for g in range(p["gpus"]):
        b.link(g, ep[(edges[g // half], g % half + 1)], rate, "nic", "fibre")
    for i, e in enumerate(edges):
        for k, h in enumerate(hubs):
            b.link(ep[(e, half + 1 + k)], hp[(h, i + 1)], rate, "fabric", "fibre")
    return b.finish(canonical_spec(NAME, PARAMS, p), p)


def tables(fab: Fabric) -> Tables:
    """An edge sends its own GPUs down and everything else up over both hubs (ECMP)."""
    peer, between, group = port_peer(fab), ports_between(fab), GroupIndex(fab)
    rows = {sw.id: r for r, sw in enumerate(fab.switches)}
    ng = np.full((len(fab.switches), fab.n_gpus), -1, dtype=np.int64)
    half = fab.n_gpus // 2
    edges = [sw for sw in fab.switches if sw.group == "edge"]
    hubs = [sw for sw in fab.switches if sw.group == "hub"]
    for i, edge in enumerate(edges):
        ng[rows[edge.id], :] = group([between[(edge.id, h.id)][0] for h in hubs])
        local = np.arange(i * half, (i + 1) * half)
        ng[rows[edge.id], local] = peer[local]
        for h in hubs:
            ng[rows[h.id], local] = between[(h.id, edge.id)][0]
    return Tables(fab, ng, group.multi)


KIND = FabricKind(
    NAME,
    "two edges, two hubs (a test's kind)",
    PARAMS,
    build=build,
    tables=tables,
    expected_diameter=lambda fab: 3,
    switch_groups=GROUPS,
    row_labels={0: "GPUs", 1: "edge", 2: "hub"},
    identity_checks=lambda fab: [("toy counts", None if len(fab.switches) == 4 else "not 4 switches")],
)
