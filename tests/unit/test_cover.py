"""The cover proof's offline half (testbed/emulation/cover.py): which probes it picks, and how it
reads and judges a host's tables. The oracle for coverage is routing.route, the one-flow path
function, not the vectorised walk the selection uses."""

import socket
import struct

import numpy as np
import pytest

from testbed.emulation import cover
from testbed.emulation.probes import PROBE_UDP_PORT, all_pairs
from testbed.fabric.hostconf import neighbours, routes
from testbed.fabric.kinds import build_fabric
from testbed.fabric.paths import route, walk


def _chosen(spec):
    fab = build_fabric(spec)
    pairs = all_pairs(fab)
    sps = np.array([a for a, _ in pairs])
    das = np.array([b for _, b in pairs])
    w = walk(fab, sps, das, PROBE_UDP_PORT)
    return fab, pairs, cover.select(fab, sps, das, w.out_ports, w.n_hops)


def _decisions(fab, sp, da):
    r = route(fab, fab.ports[sp].name, fab.ports[da].name, sport=PROBE_UDP_PORT)
    return {(h.switch, da) for h in r.hops}


@pytest.mark.parametrize("spec", ["zcube:n=4", "zcube:n=8", "roft:gpus=16,gpus_per_server=4,segments=2"])
def test_every_switch_decision_and_source_port_is_crossed_by_a_chosen_probe(spec):
    fab, pairs, idx = _chosen(spec)
    want = set().union(*(_decisions(fab, sp, da) for sp, da in pairs))
    got = set().union(*(_decisions(fab, *pairs[i]) for i in idx))
    assert got == want
    assert {pairs[i][0] for i in idx} == {sp for sp, _ in pairs}
    assert len(idx) <= len(want) < len(pairs)


def test_at_1024_gpus_the_cover_is_a_thirtieth_of_the_pairs():
    """ZCube(32,2): 2,095,104 pairs, 67,584 (switch, destination) decisions; the cover needs no
    more probes than decisions (measured 67,456)."""
    fab, pairs, idx = _chosen("zcube:n=32")
    assert len(pairs) == 2_095_104 and len(idx) <= 67_584


def test_a_pair_the_model_cannot_route_is_always_probed():
    fab = build_fabric("zcube:n=4")
    pairs = all_pairs(fab)
    sps, das = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
    w = walk(fab, sps, das, PROBE_UDP_PORT)
    baseline = set(cover.select(fab, sps, das, w.out_ports, w.n_hops).tolist())
    lonely = next(i for i in range(len(pairs)) if i not in baseline)
    n_hops = w.n_hops.copy()
    n_hops[lonely] = -1
    assert lonely in cover.select(fab, sps, das, w.out_ports, n_hops)


def _hex(ip: str) -> str:
    return f"{struct.unpack('<I', socket.inet_aton(ip))[0]:08X}"


def _write_tables(tmp_path, pid, route_rows, arp_rows):
    d = tmp_path / str(pid) / "net"
    d.mkdir(parents=True)
    head = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    lines = [
        f"{dev}\t{_hex(dst)}\t00000000\t{flags:04X}\t0\t0\t0\t{_hex(mask)}\t0\t0\t0\n"
        for dev, dst, mask, flags in route_rows
    ]
    (d / "route").write_text(head + "".join(lines))
    ahead = "IP address       HW type     Flags       HW address            Mask     Device\n"
    (d / "arp").write_text(ahead + "".join(f"{ip} 0x1 0x6 {mac} * {dev}\n" for ip, mac, dev in arp_rows))


def test_route_and_neighbour_tables_read_as_the_kernel_writes_them(tmp_path):
    """Hand-written /proc/net/route lines: 10.2.0.0/16 out of g0-p0, and an unreachable /32."""
    _write_tables(
        tmp_path,
        7,
        [("g0-p0", "10.2.0.0", "255.255.0.0", 0x0001), ("*", "10.3.0.9", "255.255.255.255", 0x0201)],
        [("10.2.0.5", "AA:bb:cc:dd:ee:01", "g0-p0")],
    )
    assert cover.read_routes(7, str(tmp_path)) == {("10.2.0.0/16", "g0-p0"), ("10.3.0.9/32", None)}
    assert cover.read_neighbours(7, str(tmp_path)) == {("10.2.0.5", "g0-p0"): "aa:bb:cc:dd:ee:01"}


def _planned_tables(fab, gpu):
    rows = []
    for pre, dev in routes(fab, gpu):
        net, plen = pre.split("/")
        mask = socket.inet_ntoa(struct.pack(">I", (0xFFFFFFFF << (32 - int(plen))) & 0xFFFFFFFF))
        rows.append((dev or "*", net, mask, 0x0001 if dev else 0x0201))
    arp = [(ip, mac, dev) for (ip, dev), mac in neighbours(fab, gpu).items()]
    return rows, arp


def test_a_host_whose_tables_are_the_plan_passes_and_one_missing_route_or_neighbour_is_named(tmp_path):
    fab = build_fabric("zcube:n=4")
    for g in range(fab.n_gpus):
        rows, arp = _planned_tables(fab, g)
        if g == 1:
            rows = rows[1:]  # a route removed
        if g == 2:
            arp = arp[:-1]  # a neighbour removed
        if g == 3:
            arp = arp + [("10.9.9.9", "02:00:00:00:00:99", "g3-p0")]  # an extra one is harmless
        _write_tables(tmp_path, 100 + g, rows, arp)
    bad = cover.host_table_mismatches(fab, lambda name: 100 + fab.node_by_name[name].id, str(tmp_path))
    assert sorted(bad) == [1, 2]
    assert "routes missing" in bad[1] and "1 neighbour entries missing or wrong" in bad[2]
