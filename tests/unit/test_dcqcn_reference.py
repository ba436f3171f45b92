"""The DCQCN reference state machine on sequences worked by hand (100 Gb/s line rate)."""

import pytest

from traffic.dcqcn import Dcqcn, DcqcnParams

G = 1e9
P = DcqcnParams(line_rate_bps=100 * G)


def test_one_cnp_from_line_rate_halves_the_rate():
    """alpha starts at 1: Rc = 100 (1 - 1/2) = 50 Gb/s, Rt = 100, alpha = 255/256 + 1/256 = 1."""
    d = Dcqcn(P)
    assert d.on_cnp(0)
    assert d.rc == 50 * G and d.rt == 100 * G and d.alpha == pytest.approx(1.0)


def test_at_most_one_cut_per_decrease_interval():
    d = Dcqcn(P)
    assert d.on_cnp(0) and not d.on_cnp(3_999) and d.rc == 50 * G
    assert d.on_cnp(4_000) and d.rc == 25 * G  # alpha still 1: halved again


def test_alpha_decays_only_in_intervals_without_a_cnp():
    d = Dcqcn(P)
    d.on_cnp(0)
    d.on_alpha_timer(1_000)  # the CNP fell in this interval: no decay
    assert d.alpha == pytest.approx(1.0)
    d.on_alpha_timer(2_000)
    d.on_alpha_timer(3_000)
    assert d.alpha == pytest.approx((255 / 256) ** 2)
    # the next cut uses the decayed alpha: Rc = 50 (1 - alpha/2)
    d.on_cnp(10_000)
    assert d.rc == pytest.approx(50 * G * (1 - (255 / 256) ** 2 / 2))


def test_fast_recovery_halves_the_gap_to_the_target_each_stage():
    """After one cut (Rc 50, Rt 100): stages 1-4 of the timer are fast recovery, Rc = (Rt + Rc)/2:
    75, 87.5, 93.75, 96.875 Gb/s; Rt stays 100."""
    d = Dcqcn(P)
    d.on_cnp(0)
    seen = []
    for k in range(1, 5):
        d.on_increase_timer(k * 300_000)
        seen.append(d.rc / G)
    assert seen == [75, 87.5, 93.75, 96.875] and d.rt == 100 * G


def test_timer_only_stages_fast_additive_hyper():
    """Line rate 100, no byte counter (HPCC's way): after a cut to 50 and two more cuts (alpha ~1):
    Rc 12.5, Rt 25. The timer's stage before each event decides: stages 0-4 (< F = 5) fast
    recovery, five halvings of the gap; stage 5 (= F): additive, Rt = 25 + AI (AI = 5 Mb/s x 100/25
    = 20 Mb/s); stage 6 (> F): hyper, Rt += HAI (50 Mb/s x 4 = 200 Mb/s)."""
    d = Dcqcn(P)
    for t in (0, 4_000, 8_000):
        d.on_cnp(t)
    assert d.rc == pytest.approx(12.5 * G, rel=1e-3) and d.rt == pytest.approx(25 * G, rel=1e-3)
    rc0, rt0 = d.rc, d.rt
    for k in range(1, 6):
        d.on_increase_timer(k)
    expect = rc0
    for _ in range(5):
        expect = (rt0 + expect) / 2
    assert d.rc == pytest.approx(expect) and d.rt == rt0
    d.on_increase_timer(6)
    assert d.rt == pytest.approx(rt0 + 20e6)
    assert d.rc == pytest.approx((rt0 + 20e6 + expect) / 2)
    rc1 = d.rc
    d.on_increase_timer(7)
    assert d.rt == pytest.approx(rt0 + 20e6 + 200e6)
    assert d.rc == pytest.approx((rt0 + 220e6 + rc1) / 2)


def test_hyper_increase_needs_both_counters_past_f():
    """Byte counter of 1 MB: after 5 MB sent (BC = 5) and 5 timer events (T = 5) the next event
    is hyper: Rt grows by HAI = 50 Mb/s x 4 = 200 Mb/s."""
    d = Dcqcn(DcqcnParams(line_rate_bps=100 * G, byte_counter_bytes=1_000_000))
    d.on_cnp(0)
    d.on_bytes_sent(5_000_000, 1)  # BC 1..5: fast recovery x4, then additive (T = 0 < F)
    rt_after_bc = d.rt
    assert rt_after_bc == pytest.approx(100 * G)  # capped at line rate already
    d2 = Dcqcn(DcqcnParams(line_rate_bps=100 * G, byte_counter_bytes=1_000_000))
    for t in (0, 4_000, 8_000, 12_000):
        d2.on_cnp(t)  # Rc ~6.25, Rt ~12.5
    for k in range(5):
        d2.on_increase_timer(k)
    d2.on_bytes_sent(4_000_000, 10)  # BC = 4: still additive (min < F)
    rt = d2.rt
    d2.on_bytes_sent(1_000_000, 11)  # BC = 5, T = 5: hyper
    assert d2.rt == pytest.approx(rt + 200e6)


def test_rate_never_below_the_floor_nor_above_line_rate():
    d = Dcqcn(P)
    for k in range(40):
        d.on_cnp(k * 4_000)
    assert d.rc == P.min_rate_bps
    for k in range(200):
        d.on_increase_timer(k)
    assert d.rc <= P.line_rate_bps and d.rt <= P.line_rate_bps


@pytest.mark.parametrize(
    "bad", [{"g": 0}, {"g": 1.5}, {"rate_increase_ns": 0}, {"min_rate_bps": 200e9}, {"fast_recovery_stages": 0}]
)
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError):
        DcqcnParams(line_rate_bps=100 * G, **bad)
