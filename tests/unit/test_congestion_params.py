"""The spec's `congestion:` section: defaults, contract B's ns-3 names, validation, the mode name."""

import pytest

from testbed.congestion import params
from testbed.errors import UserInputError
from testbed.experiment import spec
from traffic.dcqcn import Dcqcn

CONTRACT_B = (
    "cc window_pkts window_bytes ecn_enabled ecn_kmin_bytes_per_25g ecn_kmax_bytes_per_25g ecn_pmax_ppm "
    "pfc_enabled buffer_bytes pfc_reserve_bytes pfc_resume_offset_bytes pfc_alpha_inv pfc_headroom_factor "
    "link_delay_ns switch_latency_ns dcqcn_g_inv dcqcn_alpha_update_ns dcqcn_rate_decrease_ns "
    "dcqcn_rate_increase_ns dcqcn_byte_counter_bytes dcqcn_f dcqcn_ai_bps_per_25g dcqcn_hai_bps_per_25g "
    "dcqcn_min_rate_bps cnp_interval_ns"
).split()


def test_ns3_params_are_exactly_contract_b_with_the_verified_defaults():
    got = params.ns3_params(spec.load()["congestion"])
    assert list(got) == CONTRACT_B
    assert all(type(v) is int for v in got.values())
    # contract B's table, except where HPCC's run.py says otherwise: F = 1 (FAST_RECOVERY_TIMES 1), min rate
    # 1 Gb/s (MIN_RATE 1000Mb/s), no byte counter
    assert got == {
        **dict.fromkeys(CONTRACT_B, None),
        "cc": 0,
        "window_pkts": 64,
        "window_bytes": 0,
        "ecn_enabled": 0,
        "ecn_kmin_bytes_per_25g": 100_000,
        "ecn_kmax_bytes_per_25g": 400_000,
        "ecn_pmax_ppm": 200_000,
        "pfc_enabled": 0,
        "buffer_bytes": 32 * 1024 * 1024,
        "pfc_reserve_bytes": 4096,
        "pfc_resume_offset_bytes": 3072,
        "pfc_alpha_inv": 8,
        "pfc_headroom_factor": 3,
        "link_delay_ns": 1000,
        "switch_latency_ns": 0,
        "dcqcn_g_inv": 256,
        "dcqcn_alpha_update_ns": 1000,
        "dcqcn_rate_decrease_ns": 4000,
        "dcqcn_rate_increase_ns": 300_000,
        "dcqcn_byte_counter_bytes": 0,
        "dcqcn_f": 1,
        "dcqcn_ai_bps_per_25g": 5_000_000,
        "dcqcn_hai_bps_per_25g": 50_000_000,
        "dcqcn_min_rate_bps": 1_000_000_000,
        "cnp_interval_ns": 50_000,
    }


def test_overrides_reach_the_ns3_names():
    s = spec.load(overrides=["congestion.cc=dcqcn", "congestion.ecn_enabled=true", "congestion.ecn_pmax=0.8"])
    got = params.ns3_params(s["congestion"])
    assert (got["cc"], got["ecn_enabled"], got["ecn_pmax_ppm"]) == (1, 1, 800_000)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["congestion.ecn_kmin_bytes_per_25g=500000"], "above kmax"),
        (["congestion.ecn_pmax=0"], "outside (0, 1]"),
        (["congestion.ecn_pmax=1.5"], "outside (0, 1]"),
        (["congestion.pfc_reserve_bytes=33554432"], "no shared buffer"),
        (["congestion.link_delay_ns=-1"], "congestion.link_delay_ns"),
        (["congestion.switch_latency_ns=-5"], "congestion.switch_latency_ns"),
        (["congestion.cc=timely"], "congestion.cc"),
        (["congestion.cc=dcqcn"], "reacts only to ECN marks"),
        (["congestion.dcqcn_rate_decrease_ns=0"], "congestion.dcqcn_rate_decrease_ns"),
        (["congestion.ecn.kmax=1"], "not a section"),
        (["congestion.ecn_kmax=1"], "valid fields"),
    ],
)
def test_bad_values_fail_in_one_line(overrides, words):
    with pytest.raises(UserInputError) as e:
        spec.load(overrides=overrides)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_validate_on_its_own_refuses_what_the_schema_would():
    with pytest.raises(UserInputError, match="unknown congestion control 'hpcc'"):
        params.validate({"cc": "hpcc"})
    with pytest.raises(UserInputError, match="link_delay_ns"):
        params.validate({"link_delay_ns": -1})
    with pytest.raises(UserInputError, match="unknown field 'ecn'"):
        params.validate({"ecn": {"enabled": True}})


def test_xoff_must_be_positive_on_every_switch():
    cfg = {"pfc_enabled": True, "pfc_buffer_bytes": 1_000_000}
    # 8 ports of 200 Gb/s, 1 us: headroom 3 x 25,000 = 75,000 B, + 4,096 reserve each = 632,768 B;
    # XOFF of the empty buffer = (1,000,000 - 632,768) / 8 = 45,904
    assert params.check_switch(cfg, [200e9] * 8) == 45_904
    with pytest.raises(UserInputError, match="za0's 16 ports need 1265536 B"):
        params.ns3_params(cfg, {"za0": [200e9] * 16})
    assert params.check_switch({"pfc_buffer_bytes": 100_000}, [200e9] * 16) < 0  # PFC off: not checked


def test_describe():
    assert params.describe(None) == "lossy, no congestion control, no ECN, window 64 packets"
    assert (
        params.describe({"cc": "dcqcn", "window_pkts": 0, "ecn_enabled": True, "pfc_enabled": True})
        == "lossless (PFC) + DCQCN, ECN 100/400 KB per 25G Pmax 0.2, window none"
    )
    assert params.describe({"window_bytes": 1_500_000}).endswith("window 1500 KB")


def test_dcqcn_params_scale_per_25g():
    p = params.dcqcn_params(None, 200e9)
    assert (p.ai_bps, p.hai_bps, p.g, p.fast_recovery_stages, p.min_rate_bps) == (40e6, 400e6, 1 / 256, 1, 1e9)
    assert Dcqcn(p).rate_bps == 200e9
