"""The routing oracle (testbed/referee/routing.py): flows.json against fabric.json's cabling, with
shortest paths computed by the referee itself. It passes the flow entries zlab installs today (the
shipped mini-run, and a three-tier ROFT built here), and fails on entries built with the old XOR
ECMP hash (written below as it was before commit 9939eff) and on a shuffled table."""

import json
from pathlib import Path

import numpy as np
import pytest

from testbed.emulation.runfolder import flows_document
from testbed.fabric import build_fabric
from testbed.fabric.ecmp import switch_seed
from testbed.referee import routing

MINI = Path(__file__).resolve().parents[1] / "data" / "mini-run"
THREE_TIER = "roft:gpus=64,tiers=3,gpus_per_server=8,radix=8"
SOURCES = 4  # NICs walked to every other NIC in the three-tier fabric (252 pairs, ~2 s)


def old_xor_entries(entries: list[dict], dpid: int) -> list[dict]:
    """The ECMP entries as the old hash made them: bucket = ((sport >> shift) ^ xor) & mask,
    member = bucket % k, with 2 spare bits and the window anywhere in 16 bits."""
    seed = int(switch_seed(dpid))
    out = [e for e in entries if e["udp_src"] is None]
    groups: dict = {}
    for e in entries:
        if e["udp_src"] is not None:
            groups.setdefault((e["ipv4_dst"], e["ipv4_mask"], e["priority"]), set()).add(e["out_port"])
    for (dst, mask, prio), members in groups.items():
        ports, k = sorted(members), len(members)
        bits = min(12, max(4, int(np.ceil(np.log2(k))) + 2))
        shift, xor = seed % (16 - bits + 1), (seed >> 16) & ((1 << bits) - 1)
        for b in range(1 << bits):
            out.append(
                {
                    "priority": prio,
                    "ipv4_dst": dst,
                    "ipv4_mask": mask,
                    "udp_src": [b << shift, ((1 << bits) - 1) << shift],
                    "out_port": ports[((b ^ xor) & ((1 << bits) - 1)) % k],
                }
            )
    return out


@pytest.fixture(scope="module")
def three_tier(tmp_path_factory):
    d = tmp_path_factory.mktemp("roft3")
    fab = build_fabric(THREE_TIER)
    (d / "fabric.json").write_text(fab.to_json())
    doc = flows_document(fab)
    (d / "flows.json").write_text(json.dumps(doc))
    g = routing.Graph.load(d / "fabric.json")
    nics = g.nic_ports()
    pairs = [(g.port_name[a], g.port_name[b]) for a in nics[:SOURCES] for b in nics if g.port_node[a] != g.port_node[b]]
    return d, doc, pairs


def test_the_shipped_mini_run_routes_pass():
    """ZCube: every routed pair follows its unique shortest path; ROFT: shortest paths, exact
    bucket shares at the leaves; and every pair the schedule used is routed."""
    res = routing.check_run(MINI)
    assert res["zcube"]["ok"] and res["roft"]["ok"], res
    z = res["zcube"]
    assert z["unique_pairs"] == z["routed"] > 0 and z["not_the_unique_path"] == []
    assert res["roft"]["switch_checks"] > 0 and res["roft"]["max_share_deviation"] <= routing.SHARE_TOLERANCE
    for label in ("zcube", "roft"):
        sched = routing.scheduled_pairs(MINI / label)
        r = routing.check(MINI / label / "fabric.json", MINI / label / "flows.json", sched)
        assert r.ok and r.routed == len(sched) and not r.unrouted
    # a pair the fabric does not serve is fine in the all-pairs sweep, not when a schedule used it
    unserved = routing.check(MINI / "zcube" / "fabric.json", MINI / "zcube" / "flows.json", [("g0-p0", "g4-p0")])
    assert unserved.unrouted and not unserved.ok


def test_a_zcube_route_off_its_unique_shortest_path_fails(tmp_path):
    """One host entry on one ZCube switch sent out of another switch-facing port: the pair that
    used it is no longer on its unique shortest path (or no longer delivered)."""
    flows = json.loads((MINI / "zcube" / "flows.json").read_text())
    g = routing.Graph.load(MINI / "zcube" / "fabric.json")
    sw, doc = next(iter(flows["switches"].items()))
    node = next(n for n, name in g.node_name.items() if name == sw)
    facing = sorted(g.port_number[p] for p, _ in g.switch_hops(node))
    e = next(e for e in doc["entries"] if e["out_port"] in facing)
    e["out_port"] = next(p for p in facing if p != e["out_port"])
    (tmp_path / "flows.json").write_text(json.dumps(flows))
    r = routing.check(MINI / "zcube" / "fabric.json", tmp_path / "flows.json")
    assert not r.ok and (r.not_the_unique_path or r.not_shortest or r.misdelivered)


def test_three_tier_roft_passes_with_todays_hash(three_tier):
    d, _, pairs = three_tier
    r = routing.check(d / "fabric.json", d / "flows.json", pairs)
    assert r.ok, r.as_dict()
    assert r.routed == len(pairs) and r.ecmp_checks > 100
    assert r.max_share_deviation <= routing.SHARE_TOLERANCE and r.min_member_share >= routing.STARVE_FLOOR


def test_the_old_xor_hash_fails(three_tier, tmp_path):
    """Same fabric, same members, only the hash changed: polarised choices leave members of
    downstream switches with nothing of what arrives."""
    d, doc, pairs = three_tier
    doc = json.loads(json.dumps(doc))
    for sw in doc["switches"].values():
        sw["entries"] = old_xor_entries(sw["entries"], sw["dpid"])
    (tmp_path / "flows.json").write_text(json.dumps(doc))
    r = routing.check(d / "fabric.json", tmp_path / "flows.json", pairs)
    assert not r.ok
    assert r.starved > 0 and r.min_member_share < routing.STARVE_FLOOR
    assert not r.not_shortest and not r.misdelivered  # every path is still a shortest one: only the hash is wrong


def test_a_shuffled_table_fails(three_tier, tmp_path):
    """Each switch's out ports shuffled over its entries (buckets and host routes alike)."""
    d, doc, pairs = three_tier
    doc = json.loads(json.dumps(doc))
    rng = np.random.default_rng(7)
    for sw in doc["switches"].values():
        outs = [e["out_port"] for e in sw["entries"]]
        for e, o in zip(sw["entries"], rng.permutation(outs)):
            e["out_port"] = int(o)
    (tmp_path / "flows.json").write_text(json.dumps(doc))
    r = routing.check(d / "fabric.json", tmp_path / "flows.json", pairs)
    assert not r.ok and (r.misdelivered or r.not_shortest or r.starved or r.share_failures)


@pytest.mark.slow
def test_the_256_gpu_three_tier_roft_spreads_every_arrival(tmp_path):
    """The oracle's finding on ECMP windows that overlapped from tier to tier (members left with 0.11
    of their fair share): with a lane of source-port bits per ECMP tier, every switch's members get
    their fair share of every source's arrivals."""
    fab = build_fabric("roft:gpus=256,tiers=3,gpus_per_server=8,radix=16")
    (tmp_path / "fabric.json").write_text(fab.to_json())
    (tmp_path / "flows.json").write_text(json.dumps(flows_document(fab)))
    g = routing.Graph.load(tmp_path / "fabric.json")
    nics = g.nic_ports()
    sources = nics[:: len(nics) // 4][:4]
    pairs = [(g.port_name[a], g.port_name[b]) for a in sources for b in nics if g.port_node[a] != g.port_node[b]]
    r = routing.check(tmp_path / "fabric.json", tmp_path / "flows.json", pairs)
    assert r.ok, r.as_dict()
    assert r.min_member_share >= routing.STARVE_FLOOR and r.max_share_deviation <= routing.SHARE_TOLERANCE
