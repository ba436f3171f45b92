"""Offline checks of the netlink qdisc parsers on real dump bytes.

tests/data/qdisc/dump_4ports.bin is one RTM_GETQDISC dump (all chunks, seq 1) captured by
`scripts/bench/collector_cost.py --ports 4 --rate 8kbit --limit 5 --traffic 8 --capture ...`:
four veths (ifindex 3, 5, 7, 9) shaped as zlab shapes a switch port (htb 1:, pfifo 10: with
limit 5, clsact) whose peers (2, 4, 6, 8: noqueue) are in the same namespace; port i was sent
8 + i frames of 1000 bytes at 8 kbit/s, so each pfifo holds 5 frames and dropped some.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.measure.collector import LEAF_HANDLE, LEAF_KINDS
from testbed.qdisc_netlink import _NLH, RTM_NEWQDISC, LeafSampler, QdiscReader

DUMP = Path(__file__).resolve().parents[1] / "data" / "qdisc" / "dump_4ports.bin"
PORTS = [3, 5, 7, 9]


def dump_bytes() -> bytes:
    return DUMP.read_bytes()


def reader_parse(data: bytes, want_kind=None) -> dict:
    """What QdiscReader.dump returns for these bytes (its per-message parser, no socket)."""
    out, off = {}, 0
    while off + _NLH.size <= len(data):
        length, mtype, _flags, _seq, _pid = _NLH.unpack_from(data, off)
        if mtype == RTM_NEWQDISC:
            QdiscReader._parse(data, off + _NLH.size, off + length, out, want_kind)
        off += (length + 3) & ~3
    return out


def feed(sampler: LeafSampler, data: bytes, seq: int = 1):
    """(whether the bytes end the dump, the four lists) as LeafSampler.sample() would return them."""
    out = sampler.parse(bytearray(data) + bytes(64), len(data), seq)
    return out is not None, out


@pytest.fixture
def sampler():
    s = LeafSampler(PORTS, LEAF_HANDLE, LEAF_KINDS)
    yield s
    s.close()


def test_reader_sees_the_captured_layout():
    stats = reader_parse(dump_bytes())
    kinds = sorted({v[0] for v in stats.values()})
    assert kinds == ["clsact", "htb", "noqueue", "pfifo"]
    assert len(stats) == 16
    # (kind, bytes, packets, qlen, backlog, drops) of each pfifo leaf
    assert [stats[(i, LEAF_HANDLE)] for i in PORTS] == [
        ("pfifo", 2090, 3, 5, 5000, 1),
        ("pfifo", 2090, 3, 5, 5000, 2),
        ("pfifo", 2090, 3, 5, 5000, 3),
        ("pfifo", 2176, 4, 5, 5000, 4),
    ]


def test_leaf_sampler_values(sampler):
    done, (sent, qlen, backlog, drops) = feed(sampler, dump_bytes())
    assert done  # the capture ends with NLMSG_DONE
    assert sent == [2090, 2090, 2090, 2176]
    assert qlen == [5, 5, 5, 5]
    assert backlog == [5000, 5000, 5000, 5000]
    assert drops == [1, 2, 3, 4]


def test_leaf_sampler_agrees_with_reader(sampler):
    """LeafSampler reads the legacy TCA_STATS block, QdiscReader the nested TCA_STATS2: the
    collector's record must not change, so both must give the same numbers."""
    stats = reader_parse(dump_bytes(), LEAF_KINDS)
    _, (sent, qlen, backlog, drops) = feed(sampler, dump_bytes())
    want = [stats[(i, LEAF_HANDLE)] for i in PORTS]
    assert sent == [v[1] for v in want]
    assert qlen == [v[3] for v in want]
    assert backlog == [v[4] for v in want]
    assert drops == [v[5] for v in want]


def test_leaf_sampler_order_follows_the_port_list():
    s = LeafSampler([9, 3], LEAF_HANDLE, LEAF_KINDS)
    try:
        _, (sent, _q, _b, drops) = feed(s, dump_bytes())
    finally:
        s.close()
    assert sent == [2176, 2090] and drops == [4, 1]


def test_missing_port_wrong_kind_and_other_handle_are_none():
    s = LeafSampler([3, 42], LEAF_HANDLE, LEAF_KINDS)  # 42: no such interface in the dump
    t = LeafSampler([3], LEAF_HANDLE, (b"tbf",))  # the leaf is a pfifo, not a tbf
    h = LeafSampler([3, 2], 0x00010000, (b"htb",))  # the htb root 1: instead (2 has none)
    try:
        assert feed(s, dump_bytes())[1] == ([2090, None], [5, None], [5000, None], [1, None])
        assert feed(t, dump_bytes())[1] == ([None], [None], [None], [None])
        assert feed(h, dump_bytes())[1] == ([2090, None], [5, None], [5000, None], [1, None])
    finally:
        s.close(), t.close(), h.close()


def test_other_sequence_numbers_are_ignored(sampler):
    """A late answer to an earlier request must not be taken for this sample's."""
    _, out = feed(sampler, dump_bytes(), seq=2)
    assert out == ([None] * 4,) * 4


def test_cached_chain_is_rechecked(sampler):
    """The message chain is reused only while it still fits: a different dump is walked anew."""
    data = dump_bytes()
    assert feed(sampler, data)[1][0] == [2090, 2090, 2090, 2176]
    chain = sampler.chain.copy()
    assert feed(sampler, data)[1][0] == [2090, 2090, 2090, 2176]  # reused
    assert (sampler.chain == chain).all()
    first = (_NLH.unpack_from(data, 0)[0] + 3) & ~3
    assert feed(sampler, data[first:])[1][0] == [2090, 2090, 2090, 2176]  # one message fewer: rewalked
    assert sampler.chain.size == chain.size - 1


def test_partial_chunk_is_not_done(sampler):
    """Without its NLMSG_DONE the bytes are not a whole dump (the next recv continues it)."""
    data = dump_bytes()
    off = 0
    while True:  # cut just before the DONE message
        length = _NLH.unpack_from(data, off)[0]
        if off + ((length + 3) & ~3) >= len(data):
            break
        off += (length + 3) & ~3
    done, out = feed(sampler, data[:off])
    assert not done and out is None


def test_duplicate_interfaces_are_refused():
    with pytest.raises(ValueError):
        LeafSampler([3, 3], LEAF_HANDLE, LEAF_KINDS)
