"""Masked ECMP matches in OVS: a ROFT whose spines have two links to every leaf holds each leaf's
destinations as a few masked ipv4_dst matches (testbed/fabric/addrcover.py). Its own module: its
switch names are the other ROFT fixtures' (l0r0, sp0), and a module's fixtures live until it ends."""

import collections
import json
import random
from pathlib import Path

import pytest

from testbed.emulation import probes
from testbed.emulation.config import EmulationConfig
from testbed.emulation.up import LiveFabric
from testbed.fabric.paths import route

PARALLEL_ROFT = "roft:gpus=64,gpus_per_server=8,radix=16"


@pytest.fixture(scope="module")
def parallel_roft(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("p"))
    with LiveFabric(PARALLEL_ROFT, EmulationConfig(), results_dir=d, log=lambda *_: None) as f:
        yield f


def test_masked_ecmp_entries_forward_every_pair_and_each_flow_over_the_link_the_model_says(parallel_roft):
    """The spines hold each leaf's destinations as a few masked matches (testbed/fabric/addrcover.py),
    not one set of buckets per destination: OVS takes them, every pair is reachable, and UDP flows
    g0 -> g9 (rail 0 to rail 1, over a spine) leave the spine on the parallel link the model picks."""
    fab = parallel_roft.fabric
    assert parallel_roft.reach["pairs"] == 64 * 63 and parallel_roft.reach["failed"] == []
    flows = json.loads((Path(parallel_roft.dir) / "flows.json").read_text())["switches"]
    spines = [sw.name for sw in fab.switches if sw.group == "spine"]
    masked = [
        e for sw in spines for e in flows[sw]["entries"] if e["ipv4_mask"] not in ("255.255.255.255", "255.0.0.0")
    ]
    assert masked
    by_hop = collections.defaultdict(list)  # (spine, out port) the model picks -> source ports
    for s in random.Random(3).sample(range(49152, 65536), 200):
        hop = next((h.switch, h.out_port) for h in route(fab, "g0-p0", "g9", sport=s).hops if h.switch in spines)
        by_hop[hop].append(s)
    spine = next(sw for sw in spines if len([h for h in by_hop if h[0] == sw]) == 2)  # both links, one spine
    live = probes.LiveRun(parallel_roft.dir)
    for hop in [h for h in by_hop if h[0] == spine]:
        for s in by_hop[hop][:2]:
            proof = probes.prove_path(live, "g0-p0", "g9", sport=s, count=10)
            assert proof.ok and hop in proof.observed, proof
