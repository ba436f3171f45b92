"""Exact masked covers of address sets: (value, mask) pairs whose OpenFlow ipv4_dst matches
select exactly a given set of the fabric's addresses.

Why: a spine of a 1,024-GPU ROFT sends each of 1,024 destinations to a two-link ECMP group,
and an ECMP group is 128 masked udp_src entries; one set of buckets per destination made
128,099 entries per spine, more than ovs-vswitchd installed in 29 minutes. All destinations
behind one leaf share one group, and a leaf's addresses are a few bit patterns (a rail's GPUs
differ only in their server bits), so a handful of masked matches per group carry the same
forwarding in at most 6,192 entries per spine (tests/unit/test_addrcover.py).

Exact means: among the fabric's addresses, a cover matches the set and nothing else. Addresses
that are not the fabric's (gaps in the plan) may match; zlab's tables already forward those by
a /8 default, and no host owns them.
"""

from __future__ import annotations

import numpy as np

FULL = 0xFFFFFFFF


def masked_cover(members, others) -> list[tuple[int, int]]:
    """(value, mask) pairs whose matches, among members and others, are exactly the members.

    members, others: disjoint sets of 32-bit addresses (ints). The tightest pattern of all
    members (their common bits) is kept if no other address shares it; otherwise the members
    are split on their highest differing bit and each half is covered the same way. Every
    member ends up in exactly one pattern; a single member is its own /32, so a cover always
    exists. Not minimal in general (that is two-level logic minimisation), but exact, and
    on rail-structured address plans a few patterns per group.
    """
    a = np.unique(np.asarray(list(members), dtype=np.int64))
    o = np.unique(np.asarray(list(others), dtype=np.int64))
    if np.intersect1d(a, o).size:
        raise ValueError("an address cannot be both a member and not one")
    out: list[tuple[int, int]] = []
    _cover(a, o, out)
    return out


def _cover(a: np.ndarray, o: np.ndarray, out: list[tuple[int, int]]) -> None:
    if a.size == 0:
        return
    varying = int(np.bitwise_or.reduce(a ^ a[0]))
    mask = FULL & ~varying
    value = int(a[0]) & mask
    inside = o[(o & mask) == value]
    if inside.size == 0:
        out.append((value, mask))
        return
    bit = 1 << (varying.bit_length() - 1)  # varying != 0 here: a single member has no outsider
    high = (a & bit) != 0
    _cover(a[high], inside, out)
    _cover(a[~high], inside, out)


def matches(value: int, mask: int, addresses) -> np.ndarray:
    """Which of `addresses` a (value, mask) match selects (for checks and tests)."""
    x = np.asarray(addresses, dtype=np.int64)
    return (x & mask) == (value & mask)
