"""ECMP as a hash the switches execute exactly: seeded buckets over UDP source-port bits.

Why this form: RoCEv2 puts a flow's entropy in the UDP source port (the rest of its 5-tuple is
fixed per QP pair), and OVS's own select-group hash does not cover UDP ports. A per-switch
window of source-port bits XORed with a seed is installed as masked udp_src matches, so the
model and the emulation agree packet for packet.
"""

from __future__ import annotations

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


def ecmp_bits(k: int) -> int:
    """Bucket bits for a k-way group: >= 4 buckets per member, at least 16 buckets."""
    return min(12, max(4, int(np.ceil(np.log2(max(k, 1)))) + 2))


def ecmp_window(seed: int, k: int) -> tuple[int, int, int]:
    """(shift, bits, xor) of the UDP-source-port bits a switch hashes for a k-way group."""
    bits = ecmp_bits(k)
    seed = int(seed)
    return seed % (16 - bits + 1), bits, (seed >> 16) & ((1 << bits) - 1)


def ecmp_member(seed, sport, k):
    """ECMP choice: bucket = ((sport >> shift) ^ xor) & (2^bits - 1), member = bucket % k.

    RoCEv2 puts a flow's entropy in the UDP source port (the rest of its 5-tuple is fixed per
    QP pair), so hashing those bits with a per-switch window and XOR is a 5-tuple hash that an
    OpenFlow switch executes exactly as masked udp_src matches: model and emulation agree
    packet for packet. Non-UDP packets (probes) take member 0. Vectorised over arrays.
    """
    seed = np.asarray(seed, dtype=U64)
    k = np.asarray(k, dtype=np.int64)
    sport = np.asarray(sport, dtype=np.int64)
    bits = np.minimum(12, np.maximum(4, np.ceil(np.log2(np.maximum(k, 1))).astype(np.int64) + 2))
    shift = (seed % (16 - bits + 1).astype(U64)).astype(np.int64)
    xor = ((seed >> U64(16)).astype(np.int64)) & ((1 << bits) - 1)
    bucket = ((sport >> shift) ^ xor) & ((1 << bits) - 1)
    return np.where(sport >= 0, bucket % np.maximum(k, 1), 0)
