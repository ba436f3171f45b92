"""ECN marking curve and the PFC shared-buffer MMU against numbers worked by hand."""

import pytest

from testbed.congestion.mmu import SharedBufferMmu, headroom_bytes, xoff_bytes
from testbed.congestion.red import mark_probability, per_25g


def test_thresholds_scale_per_25g():
    assert per_25g(100_000, 25e9) == 100_000
    assert per_25g(100_000, 200e9) == 800_000  # run.py: 100 x 200 / 25 KB
    assert per_25g(400_000, 100e9) == 1_600_000
    assert per_25g(5_000_000, 400e9) == 80_000_000  # DCQCN AI: 5 Mb/s per 25G at 400G


@pytest.mark.parametrize(
    "queue_bytes, p",
    [(0, 0.0), (100_000, 0.0), (100_001, 0.2 / 300_000), (250_000, 0.1), (400_000, 0.2), (400_001, 1.0)],
)
def test_marking_curve(queue_bytes, p):
    # Kmin 100 KB, Kmax 400 KB, Pmax 0.2: halfway between them 0.2 x 150/300 = 0.1
    assert mark_probability(queue_bytes, 100_000, 400_000, 0.2) == pytest.approx(p)


def test_equal_thresholds_make_a_step():
    assert mark_probability(5_000, 5_000, 5_000, 0.5) == 0.0
    assert mark_probability(5_001, 5_000, 5_000, 0.5) == 1.0


def test_headroom():
    assert headroom_bytes(100e9, 1_000, 3) == 37_500  # 100 Gb/s x 1 us = 12,500 B, x 3
    assert headroom_bytes(200e9, 1_000, 3) == 75_000
    assert headroom_bytes(25e9, 1_500, 3) == 4_687 * 3  # 4,687.5 B rounds down before x 3


def test_xoff_shrinks_as_the_shared_pool_fills():
    # 1 MB, 4 ports of 37.5 KB headroom and 4 KiB reserve: (1,000,000 - 150,000 - 16,384) / 8
    assert xoff_bytes(1_000_000, 150_000, 16_384, 0, 8) == 104_202
    assert xoff_bytes(1_000_000, 150_000, 16_384, 1_000, 8) == 104_077  # 832,616 / 8
    assert xoff_bytes(100_000, 150_000, 16_384, 0, 8) == 0  # nothing left to share


def test_mmu_pause_headroom_drop_and_resume():
    m = SharedBufferMmu(1_000_000, {1: 37_500, 2: 37_500, 3: 37_500, 4: 37_500})
    assert m.xoff_bytes == 104_202
    assert m.enqueue(1, 4_096) == "reserve"
    assert m.enqueue(1, 1_000) == "shared"
    assert (m.shared_used_bytes, m.xoff_bytes) == (1_000, 104_077)
    # port 1 alone in the shared pool pauses at s >= (833,616 - s) / 8, i.e. s = 92,624 (XOFF 92,624)
    assert m.enqueue(1, 91_624) == "shared"
    assert (m.port_shared_bytes(1), m.xoff_bytes) == (92_624, 92_624)
    assert m.should_pause(1) and not m.should_pause(2)
    m.paused[1] = True
    assert not m.should_pause(1)  # already paused
    assert m.enqueue(1, 1_000) == "headroom"  # in flight while the pause travels
    assert m.admits(1, 36_500)  # 1,000 + 36,500 = the whole headroom
    assert not m.admits(1, 36_501)  # headroom full and above XOFF: dropped
    m.dequeue(1, 1_000)  # headroom drains first
    assert m.hdrm_used_bytes[1] == 0 and m.port_shared_bytes(1) == 92_624
    assert not m.should_resume(1)
    # resume once s + 3,072 <= (833,616 - s) // 8: s = 89,894 gives XOFF 92,965 and 92,966 > it; s = 89,893 fits
    m.dequeue(1, 92_624 - 89_894)
    assert m.xoff_bytes == 92_965 and not m.should_resume(1)
    m.dequeue(1, 1)
    assert m.port_shared_bytes(1) == 89_893 and m.should_resume(1)
    m.dequeue(1, 89_893 + 4_096)
    assert (m.ingress_bytes[1], m.shared_used_bytes) == (0, 0)
