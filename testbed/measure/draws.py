"""What one draw (one repeat: new QP source ports, so new ECMP choices) does to a fabric, and
intervals that describe draws that do not scatter normally.

Why: ROFT's default result is bimodal over ECMP draws. In four of five draws two queue pairs
that send at the same time hash onto one spine link and the KV p50 is 25 ms; in the fifth none
does and it is 3.7 ms. A Student-t interval over the five (20.8 ± 11.9 ms) describes neither
mode. What a draw does is better said as: the share of draws with a collision (an exact
Clopper-Pearson interval), the model's probability of one, and each mode's own figures, with
distribution-free (order-statistic) intervals for their medians.

An ECMP collision here (the model's, from the fabric's tables and the recorded UDP source ports):
a switch-to-switch link, in one direction, on the paths of two queue pairs from different NICs
that are on the wire at the same time by the schedule (each NIC sending FIFO at line rate from
the due times), when the link has room for only one NIC's line rate.
"""

from __future__ import annotations

import math

import numpy as np

from ..fabric.paths import walk
from ..records import read_json

SPORT_LO, SPORT_HI = 49152, 65536  # resolve._qps draws UDP source ports uniformly from this range


# ---- intervals -----------------------------------------------------------------------------------------


def _binom_cdf(k: int, n: int, p: float) -> float:
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return float(sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1)))


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (conservative) interval for a binomial share k/n: no normal approximation, valid
    for any n and for k = 0 or n."""
    if n <= 0:
        raise ValueError("clopper_pearson needs n >= 1")
    a = (1 - level) / 2

    def solve(f, target, increasing):  # bisection for f(p) = target, f monotone on [0, 1]
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if (f(mid) < target) == increasing:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    lower = 0.0 if k == 0 else solve(lambda p: 1 - _binom_cdf(k - 1, n, p), a, True)
    upper = 1.0 if k == n else solve(lambda p: _binom_cdf(k, n, p), a, False)
    return lower, upper


def median_interval(values, level: float = 0.95) -> dict:
    """The median and a distribution-free interval from order statistics: [x_(j), x_(n+1-j)]
    with the largest j whose coverage 1 - 2 P(Bin(n, 1/2) <= j - 1) is still >= level; when no
    j reaches the level (n <= 5 at 95 %), [min, max] and its coverage (93.8 % for n = 5)."""
    v = sorted(float(x) for x in values if x is not None and not (isinstance(x, float) and math.isnan(x)))
    n = len(v)
    if n == 0:
        return {"n": 0, "median": None, "lo": None, "hi": None, "coverage": None}
    j = 1
    while j + 1 <= (n + 1) // 2 and 1 - 2 * _binom_cdf(j, n, 0.5) >= level:
        j += 1
    coverage = 1 - 2 * _binom_cdf(j - 1, n, 0.5) if n > 1 else 0.0
    return {"n": n, "median": float(np.median(v)), "lo": v[j - 1], "hi": v[n - j], "coverage": coverage}


def draws_for_precision(p: float, half_width: float, level: float = 0.95, most: int = 50) -> int:
    """The fewest draws whose Clopper-Pearson interval for a share near p has a half-width of at
    most `half_width` (at k = round(n p)); `most` when even that many do not reach it."""
    for n in range(2, most + 1):
        lo, hi = clopper_pearson(round(n * p), n, level)
        if (hi - lo) / 2 <= half_width:
            return n
    return most


# ---- the model's collisions ----------------------------------------------------------------------------


def concurrent_pairs(messages: list[dict], rate_bps: dict[str, float]) -> tuple[list, list[tuple[int, int]]]:
    """(QP pairs, edges): two QPs (source, destination port) from different source NICs are
    concurrent when some of their messages are on the wire at the same time, each NIC sending its
    messages FIFO at line rate from their due times (the dry run's lower bound, as `cable:busiest`).
    messages: schedule.json's (src_port, dst_port, size_bytes, t_due_ns); rate_bps: emulated line
    rate per source port."""
    pairs = sorted({(m["src_port"], m["dst_port"]) for m in messages})
    index = {p: i for i, p in enumerate(pairs)}
    busy: dict[str, float] = {}
    spans = []
    for m in sorted(messages, key=lambda m: m["t_due_ns"]):
        start = max(m["t_due_ns"] / 1e9, busy.get(m["src_port"], 0.0))
        end = busy[m["src_port"]] = start + m["size_bytes"] * 8 / rate_bps[m["src_port"]]
        spans.append((start, end, index[(m["src_port"], m["dst_port"])]))
    spans.sort()
    edges = set()
    for i, (_s0, e0, a) in enumerate(spans):
        for s1, _e1, b in spans[i + 1 :]:
            if s1 >= e0:
                break
            if pairs[a][0] != pairs[b][0]:
                edges.add((min(a, b), max(a, b)))
    return pairs, sorted(edges)


def _fabric_links(fab) -> np.ndarray:
    return np.array([all(fab.nodes[fab.ports[int(p)].node].role == "switch" for p in ends) for ends in fab.link_ends])


DRAW_CHUNK = 256  # draws judged at once by collisions(): bounds its (draws, edges, links) masks


def collisions(fab, pairs, edges, sports) -> np.ndarray:
    """Per draw (rows of `sports`, one UDP source port per pair): do two concurrent QPs from
    different NICs share a switch-to-switch link in one direction that has room for only one NIC's
    line rate? (Links with room for several: more distinct concurrent sources than that.)

    Draws are independent, so they are judged DRAW_CHUNK at a time. Why: the masks are draws x
    concurrent pairs x directed links; the report's 4,000 model draws of a 256-GPU fabric (120
    concurrent pairs, 1,536 directed links) took 2.2 GB at once, 140 MB in chunks."""
    sports = np.atleast_2d(np.asarray(sports, dtype=np.int64))
    if sports.shape[0] > DRAW_CHUNK:
        return np.concatenate(
            [collisions(fab, pairs, edges, sports[i : i + DRAW_CHUNK]) for i in range(0, len(sports), DRAW_CHUNK)]
        )
    D, P = sports.shape
    if not edges:
        return np.zeros(D, dtype=bool)
    ids = {p.name: p.id for p in fab.ports}
    src = np.tile([ids[s] for s, _ in pairs], D)
    dst = np.tile([ids[d] for _, d in pairs], D)
    dl = walk(fab, src, dst, sports.ravel()).dlinks.reshape(D, P, -1)
    fabric = _fabric_links(fab)
    n_dl = 2 * len(fab.links)
    on = np.zeros((D, P, n_dl), dtype=bool)
    d_idx, p_idx, h_idx = np.nonzero(dl >= 0)
    links = dl[d_idx, p_idx, h_idx]
    keep = fabric[links // 2]
    on[d_idx[keep], p_idx[keep], links[keep]] = True
    nic = min(fab.ports[ids[s]].rate_bps for s, _ in pairs)
    room = np.array([max(1, int(fab.links[k // 2].rate_bps // nic)) for k in range(n_dl)])
    a, b = np.array(edges).T
    shared = on[:, a, :] & on[:, b, :]  # (D, E, links): concurrent pairs on one directed link
    out = (shared & (room == 1)).any(axis=(1, 2))
    if (room > 1).any():  # several NICs fit: count the distinct sources that share a link with a concurrent QP
        srcs = sorted({s for s, _ in pairs})
        src_of = np.array([srcs.index(s) for s, _ in pairs])
        busy = np.zeros((D, len(srcs), n_dl), dtype=bool)
        for e, (i, j) in enumerate(edges):
            busy[:, src_of[i], :] |= shared[:, e, :]
            busy[:, src_of[j], :] |= shared[:, e, :]
        out |= (busy.sum(axis=1) > room).any(axis=1)
    return out


def draw_collides(fab, messages: list[dict], rate_bps: dict[str, float]) -> bool:
    """Did this recorded draw (schedule.json's messages, with their UDP source ports) collide?"""
    pairs, edges = concurrent_pairs(messages, rate_bps)
    sport = {(m["src_port"], m["dst_port"]): m["sport"] for m in messages}
    return bool(collisions(fab, pairs, edges, [[sport[p] for p in pairs]])[0])


def collision_probability(
    fab, messages: list[dict], rate_bps: dict[str, float], draws: int = 4000, seed: int = 0
) -> float:
    """The model's probability that a draw collides, for this schedule: source ports drawn as
    resolve._qps draws them (uniform, independent per QP), walked through the fabric's tables;
    Monte Carlo with a fixed seed (standard error <= 0.8 points at 4,000 draws)."""
    pairs, edges = concurrent_pairs(messages, rate_bps)
    rng = np.random.default_rng(seed)
    sports = rng.integers(SPORT_LO, SPORT_HI, size=(draws, len(pairs)))
    return float(collisions(fab, pairs, edges, sports).mean())


# ---- per run -------------------------------------------------------------------------------------------


def schedule(fd) -> tuple[list[dict], dict[str, float]] | None:
    """A recorded repeat's messages as posted (raw/rep<k>/schedule.json) and each source port's emulated
    line rate; None for a run recorded before schedules were kept."""
    path = fd.raw / "schedule.json"
    if not path.exists():
        return None
    msgs = read_json(path)["messages"]
    srcs = sorted({m["src_port"] for m in msgs})
    return msgs, dict(zip(srcs, fd.port_rate_bps(srcs).tolist()))


def repeat_collides(fd) -> bool | None:
    s = schedule(fd)
    return None if s is None else draw_collides(fd.fabric, *s)


def summary(fds: list, repeats: list[dict], level: float = 0.95) -> dict | None:
    """What a draw does over a fabric's repeats: how many collide (share, Clopper-Pearson interval),
    the model's probability for the first repeat's schedule, and per mode the KV p50 and p99 medians
    with order-statistic intervals. None when no repeat has a schedule. Every draw counts (whether a
    draw collides depends on its source ports, not on the machine); each mode names its INVALID
    repeats, whose figures the reader may want to set aside."""
    flags = [r.get("ecmp_collision") for r in repeats]
    known = [(f, r) for f, r in zip(flags, repeats) if f is not None]
    if not known:
        return None
    n, k = len(known), sum(f for f, _ in known)
    lo, hi = clopper_pearson(k, n, level)
    s = schedule(fds[0])
    out = {
        "draws": n,
        "collisions": k,
        "share": k / n,
        "interval": [lo, hi],
        "level": level,
        "model_probability": collision_probability(fds[0].fabric, *s) if s else None,
        "model_draws": 4000,
        "modes": {},
    }
    for name, want in (("collision", True), ("no collision", False)):
        reps = [r for f, r in known if f == want]
        if reps:
            out["modes"][name] = {
                "repeats": [r["repeat"] for r in reps],
                "invalid": [r["repeat"] for r in reps if not r["fidelity"]["valid"]],
                **{
                    key: median_interval([r["kv_transfer_real_s"][q] for r in reps], level)
                    for key, q in (("kv_p50_real_s", "p50"), ("kv_p99_real_s", "p99"))
                },
            }
    out["bimodal"] = len(out["modes"]) == 2
    return out
