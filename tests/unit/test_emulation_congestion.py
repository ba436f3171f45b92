"""The congestion section converted to the emulation's units (testbed/emulation/congestion.py),
hand-worked: thresholds per 25 Gb/s x size scale, DCQCN timers x dilation, windows in frames."""

from testbed.emulation import congestion as emcc
from testbed.fabric import build_fabric

SC = emcc.Scaling(dilation=20.0, rate_scale=1.25e-5, size_scale=2.5e-4)  # the default spec's scaling


def test_thresholds_scale_per_25g_then_by_size_scale():
    # 400 Gb/s: Kmin 100 KB x 16 = 1.6 MB real -> 400 B emulated; Kmax 6.4 MB -> 1,600 B
    assert emcc.port_thresholds({"ecn_enabled": True}, 400e9, SC) == (400, 1600)
    big = {"ecn_enabled": True, "ecn_kmin_bytes_per_25g": 9_000_000, "ecn_kmax_bytes_per_25g": 36_000_000}
    assert emcc.port_thresholds(big, 400e9, SC) == (36_000, 144_000)


def test_every_switch_egress_port_is_configured_and_coarse_ones_named():
    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    switch_ports = [p for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0]
    cfgs, coarse = emcc.marker_configs(fab, {"ecn_enabled": True}, SC, frame_bytes=9000)
    assert set(cfgs) == {p.name for p in switch_ports} and sorted(coarse) == sorted(cfgs)  # 1,600 B < 4 frames
    p = switch_ports[0]
    c = cfgs[p.name]
    assert c.rate_bytes_per_s == round(p.rate_bps * SC.rate_scale / 8) and c.pmax == 0.2
    # every switch port is 200 Gb/s: Kmax 18 MB per 25G is 144 MB real, 36,000 B emulated, exactly 4 frames
    at4 = {"ecn_enabled": True, "ecn_kmin_bytes_per_25g": 9_000_000, "ecn_kmax_bytes_per_25g": 18_000_000}
    assert emcc.marker_configs(fab, at4, SC, frame_bytes=9000)[1] == []
    below = dict(at4, ecn_kmax_bytes_per_25g=17_000_000)  # 34,000 B: under 4 frames
    assert len(emcc.marker_configs(fab, below, SC, frame_bytes=9000)[1]) == len(switch_ports)


def test_every_marked_port_is_heard_at_its_cables_far_end():
    """ZCube(4,2): an A switch's port to GPU 0's cons port is heard at g0-p0 in g0's namespace
    (known by its MAC); its port to B0 at B0's port in this namespace. Every marked port once."""
    from types import SimpleNamespace as NS

    fab = build_fabric("zcube:n=4,gpus_per_server=4")
    cfgs, _ = emcc.marker_configs(fab, {"ecn_enabled": True}, SC, frame_bytes=9000)
    pids = {g.name: 1000 + i for i, g in enumerate(fab.gpus)}
    ends = emcc.far_ends(fab, NS(host_pid=pids.__getitem__), cfgs)
    assert set(ends) == set(cfgs)
    by_name = {p.name: p for p in fab.ports}
    g0 = by_name["g0-p0"]
    (to_g0,) = [n for n, (far, _, _) in ends.items() if far == "g0-p0"]
    assert ends[to_g0] == ("g0-p0", pids["g0"], g0.mac) and fab.nodes[by_name[to_g0].node].role == "switch"
    switch_ends = [(n, far) for n, (far, pid, mac) in ends.items() if pid is None]
    assert len(switch_ends) == 2 * 16  # ZCube(4,2): 16 fabric cables, each heard at both ends
    for n, far in switch_ends:
        assert fab.nodes[by_name[far].node].role == "switch" and ends[far][0] == n  # each the other's far end
    assert len({mac for _, _, mac in ends.values() if mac}) == 2 * fab.n_gpus  # one NIC MAC per GPU port


def test_dcqcn_timers_take_the_dilation_and_rates_the_rate_scale():
    q = emcc.dcqcn({"ecn_enabled": True, "cc": "dcqcn"}, 5e6, SC)  # a 400 Gb/s port emulated at 5 Mb/s
    p = q.p
    assert (p.alpha_update_ns, p.rate_decrease_ns, p.rate_increase_ns) == (20_000, 80_000, 6_000_000)
    assert p.min_rate_bps == 1e9 * SC.rate_scale and p.line_rate_bps == 5e6
    assert abs(p.ai_bps - 5e6 * 5e6 / 25e9) < 1e-9  # per 25 Gb/s of the (emulated) line rate


def test_agent_options_cnps_and_windows():
    o = emcc.agent_options({"ecn_enabled": True, "cc": "dcqcn", "window_pkts": 0}, SC, 4096)
    assert o == {"cnp_interval_ns": 1_000_000, "rc_opts": {"window_pkts": emcc.NO_WINDOW_PKTS}}
    o = emcc.agent_options({"ecn_enabled": True, "window_bytes": 100_000_000}, SC, 4096)
    assert o == {"cnp_interval_ns": None, "rc_opts": {"window_pkts": 7}}  # 25,000 emulated B / 4,096


def _fake_fd(tmp_path, ecn_ports=None, qps=None, ecn_doc=True):
    import json
    from types import SimpleNamespace as NS

    import numpy as np

    raw = tmp_path / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    if ecn_doc:
        (raw / "ecn.json").write_text(json.dumps({"bins": 2, "qualitative_ports": [], "ports": ecn_ports or {}}))
    run = {"emulation_congestion": {"mode": "lossy + DCQCN", "ecn_ports": len(ecn_ports or {}) or 1}}
    counters = {"qps": qps if qps is not None else []}
    return NS(raw=raw, repeat=0, run=run, counters=counters, port_rate_bps=lambda ports: np.array([5e6] * len(ports)))


def test_the_emulation_summary_adds_up_the_marker_and_the_agents(tmp_path):
    from testbed.measure import emcongestion

    ports = {
        "za0-p1": {"frames": [10, 5], "marked": [0, 5], "unmarkable": [0, 0]},
        "zb0-p2": {"frames": [4, 0], "marked": [1, 0], "unmarkable": [0, 0]},
    }
    ecn = {"ce_rx": 6, "cnps_tx": 3, "cnps_rx": 3, "rate_changes": [[1, 2.5e6], [2, 4e6]]}
    qps = [{"qp": 0, "src": "g0-p0", "ecn": ecn}, {"qp": 1, "src": "g1-p0", "ecn": dict(ecn, rate_changes=[])}]
    r = emcongestion.repeat_summary(_fake_fd(tmp_path, ports, qps))
    assert (r["ect_frames"], r["marks"], r["ce_rx"], r["cnps_tx"], r["rate_changes"]) == (19, 6, 12, 6, 2)
    assert abs(r["marked_fraction"] - 6 / 19) < 1e-12 and r["lowest_rate_fraction"] == 0.5


def test_the_emulation_summary_fails_closed(tmp_path):
    import pytest

    from testbed.measure import emcongestion
    from testbed.measure.congestion import CongestionRecordsMissing

    with pytest.raises(CongestionRecordsMissing, match="ecn.json: missing"):
        emcongestion.repeat_summary(_fake_fd(tmp_path / "a", qps=[], ecn_doc=False))
    bad = {"za0-p1": {"frames": [3, 0], "marked": [1, 0], "unmarkable": [2, 0]}}
    with pytest.raises(CongestionRecordsMissing, match="could not mark 2"):
        emcongestion.repeat_summary(_fake_fd(tmp_path / "b", bad, qps=[]))
    ok = {"za0-p1": {"frames": [3, 0], "marked": [1, 0], "unmarkable": [0, 0]}}
    with pytest.raises(CongestionRecordsMissing, match="no ECN counters"):
        emcongestion.repeat_summary(_fake_fd(tmp_path / "c", ok, qps=[{"qp": 4, "src": "g0-p0"}]))
