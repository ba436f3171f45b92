"""The packet engine's congestion machinery (zlab_referee.cc: ECN, PFC, DCQCN), validated on
hand-built scenarios against references written separately: the marking curve
(testbed/congestion/red.py), HPCC's buffer model (testbed/congestion/mmu.py) and the DCQCN reaction
point (traffic/dcqcn.py). Every case prints its figure; docs/congestion.md quotes them.

Parameters come from the spec section's defaults (testbed/congestion/params.py, HPCC's run.py)
unless a case says otherwise: Kmin/Kmax 100/400 KB per 25 Gb/s, Pmax 0.2, 1 us links, DCQCN g 1/256,
timers 1/4/300 us, F 1, AI/HAI 5/50 Mb/s per 25 Gb/s."""

import math

import numpy as np
import pandas as pd
import pytest

from testbed.congestion import params as cc
from testbed.congestion.mmu import headroom_bytes, xoff_bytes
from testbed.congestion.red import mark_probability, per_25g
from testbed.measure import congestion
from testbed.referee.handbuilt import Net
from traffic.dcqcn import DcqcnQp

G = 1_000_000_000


def net(**cfg) -> Net:
    """A network whose program params are the spec section's (cfg overrides its defaults)."""
    extra = {k: cfg.pop(k) for k in ("rng_seed", "ecn_trace") if k in cfg}
    return Net(params={**cc.ns3_params(cfg), **extra})


def incast(n: int, size_bytes: int, rate_bps: int, stagger_ns: int = 0, **cfg) -> Net:
    """n GPUs on one switch send to one GPU on it."""
    x = net(**cfg)
    sw, r = x.switch("s0"), x.gpu("r")
    x.link(sw, r, rate_bps)
    for i in range(n):
        g = x.gpu(f"g{i}")
        x.link(g, sw, rate_bps)
        x.msg(x.qp(g, r, 49152 + i), i * stagger_ns, size_bytes)
    return x


def test_marking_follows_the_configured_curve():
    """4 -> 1 at 100 Gb/s, ECN on, no congestion control and no window: the egress queue sweeps
    through Kmin..Kmax and beyond. Every ECT frame the switch sent is traced (queue bytes, marked);
    per queue-length bin the marks are within 4.5 standard deviations of red.py's expectation
    (8 runs with different marking seeds, so each bin of the ramp holds about a thousand frames)."""
    runs = [
        incast(4, 3_000_000, 100 * G, window_pkts=0, ecn_enabled=True, rng_seed=seed, ecn_trace=1).run()
        for seed in range(1, 9)
    ]
    t = pd.concat([r.ecn[r.ecn.port == "s0-p0"] for r in runs])
    kmin, kmax = per_25g(100_000, 100 * G), per_25g(400_000, 100 * G)
    p = np.array([mark_probability(int(q), kmin, kmax, 0.2) for q in t.queue_bytes])
    edges = [0, kmin, kmin + (kmax - kmin) // 3, kmin + 2 * (kmax - kmin) // 3, kmax, 10 * kmax]
    rows = []
    for lo, hi in zip(edges, edges[1:]):
        sel = ((t.queue_bytes > lo) & (t.queue_bytes <= hi)).to_numpy()
        if sel.sum() < 400:
            continue
        got, want = int(t.marked[sel].sum()), float(p[sel].sum())
        sd = math.sqrt(float((p[sel] * (1 - p[sel])).sum()))
        rows.append((lo, hi, int(sel.sum()), got, want))
        assert abs(got - want) <= 4.5 * sd + 1, (lo, hi, got, want, sd)
    print("ECN marking per queue bin (bytes): frames, marked, expected from red.py")
    for lo, hi, n, got, want in rows:
        print(f"  ({lo:>9,}, {hi:>9,}]  {n:6d}  {got:6d}  {want:9.1f}  ({got / n:.3f} vs {want / n:.3f})")
    assert len(rows) >= 4  # the sweep covered below Kmin, the ramp and above Kmax
    assert sum(r.port("s0-p0")["marks"] for r in runs) == int(t.marked.sum()) > 0


def replay_reference(cnp_times: list[int], line_bps: float) -> list[tuple[int, float]]:
    """traffic/dcqcn.py's DcqcnQp (the DCQCN machine with zlab's timer rules) driven by the CNPs
    one QP took, run past the last CNP until its rates are back at line rate. Returns every rate
    change (t_ns, rate_bps)."""
    q = DcqcnQp(cc.dcqcn_params(None, line_bps))
    for t in cnp_times:
        q.on_cnp(t)
    while q.increase_ns is not None:
        q.advance(q.increase_ns)
    return q.changes


@pytest.mark.slow  # about 2 s: 900 MB through one 25 Gb/s port, twice
@pytest.mark.parametrize("n, size_bytes", [(2, 600_000_000), (4, 300_000_000)])
def test_dcqcn_matches_the_reference_and_converges_to_the_fair_share(n, size_bytes):
    """n flows on one 25 Gb/s bottleneck, starting 2 ms apart, lossless + ECN + DCQCN, no window.
    (1) Each QP's rate changes (rates.csv) equal traffic/dcqcn.py's fed the same CNP times (cnp.csv),
        up to the simulation's end.
    (2) Over the second half of the time all n run, each QP's mean rate is within 10 % of 25/n Gb/s."""
    rate = 25 * G
    run = incast(n, size_bytes, rate, 2_000_000, window_pkts=0, ecn_enabled=True, pfc_enabled=True, cc="dcqcn").run()
    assert (run.messages.received_bytes == run.messages.size_bytes).all()
    for q in range(n):
        mine = run.rates[run.rates.qp == q]
        ref = replay_reference(run.cnps[run.cnps.qp == q].t_ns.tolist(), rate)
        ref = [
            (t, r) for t, r in ref if t <= int(run.summary["end_ns"])
        ]  # the simulation stops at the end        assert len(ref) == len(mine) > 10, (q, len(ref), len(mine))
        assert np.array_equal(mine.t_ns.to_numpy(), [t for t, _ in ref])
        assert np.allclose(mine.rate_bps.to_numpy(), [r for _, r in ref], rtol=0, atol=1.0)
    start, end = (n - 1) * 2_000_000, int(run.messages.t_last_rx_ns.min())
    grid = np.linspace(start + (end - start) / 2, end, 4000)
    means = []
    for q in range(n):
        r = run.rates[run.rates.qp == q]
        t, v = np.r_[0, r.t_ns.to_numpy()], np.r_[rate, r.rate_bps.to_numpy()]
        means.append(float(v[np.searchsorted(t, grid, side="right") - 1].mean()))
    fair = rate / n
    print(
        f"DCQCN, {n} flows on 25 Gb/s: mean rate per QP over the second half {[round(m / G, 2) for m in means]} "
        f"Gb/s (fair {fair / G:.2f}); {len(run.cnps)} CNPs, {len(run.rates)} rate changes, all equal to the reference"
    )
    assert all(abs(m / fair - 1) <= 0.10 for m in means), means


def test_incast_in_lossless_mode_pauses_and_loses_nothing():
    """8 -> 1 at 100 Gb/s, 4 MB each, no congestion control and no window, a 2 MB buffer: PFC
    must pause the senders, drop nothing and deliver every byte; no ingress port ever holds more
    than its reserve + XOFF of an empty buffer + its headroom (mmu.py's numbers)."""
    buf = 2_000_000
    run = incast(8, 4_000_000, 100 * G, window_pkts=0, pfc_enabled=True, pfc_buffer_bytes=buf).run()
    m = run.messages
    assert (m.received_bytes == m.size_bytes).all() and (m.t_complete_ns > 0).all()
    assert run.ports.drops.sum() == 0 and run.ports.headroom_drops.sum() == 0
    pauses = run.pfc[run.pfc.event == 1]
    assert len(pauses) > 0 and run.ports.pauses_rx.sum() == len(pauses)
    hdrm = headroom_bytes(100 * G, 1_000, 3)
    xoff0 = xoff_bytes(buf, 9 * hdrm, 9 * 4_096, 0, 8)
    ing = run.ports[run.ports.port.str.startswith("s0-") & (run.ports.port != "s0-p0")]
    assert (ing.headroom_bytes == hdrm).all()
    assert ing.max_ingress_bytes.max() <= 4_096 + xoff0 + hdrm
    print(
        f"8->1 lossless incast: {len(pauses)} PAUSE frames, 0 drops, {m.received_bytes.sum():,} B delivered; "
        f"deepest ingress {ing.max_ingress_bytes.max():,} B <= reserve + XOFF + headroom "
        f"= 4,096 + {xoff0:,} + {hdrm:,} B; paused {run.ports.paused_ns.sum() / 1e6:.2f} ms in all"
    )


def test_pauses_spread_two_hops_upstream_and_slow_a_victim():
    """A chain s3 - s2 - s1 at 100 Gb/s. Four GPUs on s1 and four on s3 send 4 MB each to r on s1
    (no window, no congestion control, 1 MB buffers); a victim flow v -> w (s3 -> s2) never
    crosses the congested port s1 -> r. PFC must pause back to s2 (s1 pauses it), then from s2 to
    s3 (two hops upstream of the congested port), and the victim finishes later than alone."""

    def chain(incast_on: bool):
        x = net(window_pkts=0, pfc_enabled=True, pfc_buffer_bytes=1_000_000)
        s1, s2, s3 = x.switch("s1"), x.switch("s2"), x.switch("s3")
        x.link(s3, s2, 100 * G)
        x.link(s2, s1, 100 * G)
        r = x.gpu("r")
        x.link(s1, r, 100 * G)
        v, w = x.gpu("v"), x.gpu("w")
        x.link(v, s3, 100 * G)
        x.link(w, s2, 100 * G)
        victim = x.qp(v, w, 40000)
        x.msg(victim, 100_000, 8_000_000)
        for k, sw in enumerate((s1, s1, s1, s1, s3, s3, s3, s3)):
            g = x.gpu(f"g{k}")
            x.link(g, sw, 100 * G)
            if incast_on:
                x.msg(x.qp(g, r, 49152 + k), 0, 4_000_000)
        return x.run(), victim

    alone, vq = chain(False)
    run, vq = chain(True)
    assert run.ports.drops.sum() == 0 and run.ports.headroom_drops.sum() == 0
    assert (run.messages.received_bytes == run.messages.size_bytes).all()
    senders = set(run.pfc[run.pfc.event == 1].port.str.split("-").str[0])
    assert {"s1", "s2"} <= senders, senders  # s2 pausing s3: two hops upstream of s1 -> r
    t_alone = float(alone.messages.loc[alone.messages.qp == vq, "t_last_rx_ns"].iloc[0] - 100_000)
    t_hit = float(run.messages.loc[run.messages.qp == vq, "t_last_rx_ns"].iloc[0] - 100_000)
    print(
        f"two-tier incast: switches sending PAUSE {sorted(senders)}; victim v->w (8 MB, never on s1 -> r) "
        f"{t_alone / 1e6:.3f} ms alone, {t_hit / 1e6:.3f} ms beside the incast ({t_hit / t_alone:.1f}x)"
    )
    assert t_hit >= 1.5 * t_alone
    # victims, worked by hand. Two ports congest on their own: s1 -> r (s1-p1, eight senders) and
    # s3 -> s2 (s3-p0: five senders at line rate into one link). Every pause reacts to one of them,
    # directly or through a port that was itself held (s2 -> s1 while s1 held it). The incast
    # flows cross s1-p1; the victim crosses s3-p0 but not s1-p1, so the pauses rooted at s1-p1
    # that held it (at s3 -> s2 or at its NIC) make it a victim.
    iv = congestion.with_roots(congestion.intervals_from_pfc(run.pfc, int(run.summary["end_ns"])))
    print(f"pause roots: {iv.root.value_counts().to_dict()}")
    assert set(iv.root) == {"s1-p1", "s3-p0"}, iv.root.value_counts()
    paths = {vq: ["v-p0", "s3-p0", "s2-p2"]}  # port numbers follow the order links were added
    for k in range(8):
        paths[k + 1] = [f"g{k}-p0", "s1-p1"] if k < 4 else [f"g{k}-p0", "s3-p0", "s2-p1", "s1-p1"]
    m = run.messages
    flows = pd.DataFrame(
        {"msg_id": m.qp, "t_start_ns": m.t_first_tx_ns, "t_end_ns": m.t_last_rx_ns, "path": [paths[q] for q in m.qp]}
    )
    got = congestion.flow_pauses(flows, iv).set_index("msg_id")
    print(f"paused ns per flow: {got.paused_ns.to_dict()}; victims {sorted(got.index[got.victim])}")
    assert list(got.index[got.victim]) == [vq]
    assert (got.paused_ns > 0).all()  # every incast flow was held too, but by its own congestion
