"""ECMP as a hash the switches execute exactly: seeded buckets over UDP source-port bits.

Why this form: RoCEv2 puts a flow's entropy in the UDP source port (the rest of its 5-tuple is
fixed per QP pair), and OVS's own select-group hash does not cover UDP ports. A per-switch
window of source-port bits, mapped to members by a per-switch seeded table, is installed as
masked udp_src matches, so the model and the emulation agree packet for packet.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

U64 = np.uint64


def splitmix64(x):
    """Stateless 64-bit mixer (SplitMix64 finaliser); vectorised over uint64 arrays."""
    x = np.asarray(x, dtype=U64)
    with np.errstate(over="ignore"):
        x = x + U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def switch_seed(dpid):
    """Per-switch ECMP seed, from the dpid: different seeds avoid hash polarisation."""
    return splitmix64(np.asarray(dpid, dtype=U64) ^ U64(0x5A4C4142))  # "ZLAB"


SPORT_ENTROPY_BITS = 14  # RoCE source ports are drawn from 49152..65535: the low 14 bits vary


def ecmp_bits(k: int) -> int:
    """Bucket bits for a k-way group: >= 64 buckets per member, at most 4,096 buckets.

    Why so many: two flows whose windows hold the same value make the same choice at every
    switch; with few buckets that happens often enough to correlate hops (measured: 4 spare bits
    left a 1,024-GPU three-tier ROFT 4 % above independent per-hop choices, 6 spare bits 1.4 %).
    """
    return min(12, max(4, int(np.ceil(np.log2(max(k, 1)))) + 6))


def ecmp_window(seed: int, k: int) -> tuple[int, int]:
    """(shift, bits): the UDP-source-port bits a switch looks at for a k-way group, placed by its
    seed inside the bits a RoCE NIC actually varies."""
    bits = ecmp_bits(k)
    return int(seed) % (SPORT_ENTROPY_BITS - bits + 1), bits


@lru_cache(maxsize=65536)
def ecmp_table(seed: int, k: int) -> np.ndarray:
    """bucket -> member for one switch's k-way group: a seeded random permutation of the
    2^bits buckets, taken mod k (so members get equal bucket counts, +-1).

    Why a table and not XOR: XOR with a constant is a bijection of the same bits at every hop,
    so a flow's later choices stayed correlated with its earlier ones (measured: mean max
    utilisation 7.3 vs 5.6 for independent per-hop choices on a 1,024-GPU three-tier ROFT).
    Independent random tables per switch make the choices at different hops independent, and a
    table is still exactly what a switch executes: one masked udp_src entry per bucket.
    """
    bits = ecmp_bits(k)
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, k])
    return (rng.permutation(1 << bits) % k).astype(np.int64)


def ecmp_member(seed, sport, k):
    """ECMP choice: bucket = (sport >> shift) & (2^bits - 1), member = table[bucket].

    RoCEv2 puts a flow's entropy in the UDP source port (the rest of its 5-tuple is fixed per
    QP pair), so a per-switch window of those bits looked up in a per-switch table is a 5-tuple
    hash that an OpenFlow switch executes exactly as masked udp_src matches: model and
    emulation agree packet for packet. Non-UDP packets (probes) take member 0. Vectorised.
    """
    seed = np.asarray(seed, dtype=U64)
    k = np.asarray(k, dtype=np.int64)
    sport = np.asarray(sport, dtype=np.int64)
    seed, k, sport = np.broadcast_arrays(seed, k, sport)
    out = np.zeros(sport.shape, dtype=np.int64)
    udp = sport >= 0
    if not udp.any():
        return out
    pairs = np.stack([seed[udp].astype(np.int64).view(np.int64), k[udp]], axis=1)
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    sp = sport[udp]
    res = np.empty(sp.size, dtype=np.int64)
    for j, (s, kk) in enumerate(uniq):
        s = int(np.int64(s).view(np.uint64))
        shift, bits = ecmp_window(s, int(kk))
        sel = inverse.ravel() == j
        res[sel] = ecmp_table(s, int(kk))[(sp[sel] >> shift) & ((1 << bits) - 1)]
    out[udp] = res
    return out
