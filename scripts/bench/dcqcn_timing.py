"""Experiment: when DCQCN's cuts come, in the emulation and in ns-3, on the incast of dcqcn_engines.py
(DCQCN, no window). Needs root (the emulation) and provision.sh --referee (ns-3).

Why: with no window the emulation's QPs were cut deeper than ns-3's while its marker marked frames
as they entered the queue, so a marked frame still waited behind that queue before its receiver
could answer; both engines now mark as a frame leaves. This prints, per engine and repeat, over all
QPs in real microseconds from the schedule's start: the earliest and the latest first cut, the cuts
per QP (min-max) and the last cut; and how long the bottleneck port takes to drain a queue at Kmin
and at Kmax (the thresholds over its real rate: the delay a mark made on entry would add).

    sudo .venv/bin/python scripts/bench/dcqcn_timing.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dcqcn_engines  # noqa: E402

from testbed.congestion import params as ccparams  # noqa: E402
from testbed.congestion.red import per_25g  # noqa: E402

PORT_BPS = 200e9  # ZCube(4,2)'s ports


def cuts_emulation(root: Path) -> list[list[float]]:
    """Per repeat, per QP: the real us (from t0) of each rate cut."""
    d = json.loads((root / "experiment.json").read_text())["fabrics"]["zcube"]["scaling"]["dilation"]
    out = []
    for raw in sorted((root / "zcube" / "raw").glob("rep[0-9]")):
        t0 = json.loads((raw / "run_clock.json").read_text())["t0_ns"]
        qps = []
        for q in json.loads((raw / "counters.json").read_text())["qps"]:
            ch, prev, cuts = q["ecn"]["rate_changes"], None, []
            for t, r in ch:
                if prev is None or r < prev:
                    cuts.append((t - t0) / d / 1e3)
                prev = r
            qps.append(cuts)
        out.append(qps)
    return out


def cuts_ns3(root: Path) -> list[list[float]]:
    out = []
    for raw in sorted((root / "zcube" / "raw").glob("rep[0-9]")):
        r = pd.read_csv(raw / "ns3" / "rates.csv")
        qps = []
        for _, g in r.groupby("qp"):
            prev, cuts = None, []
            for t, rate in zip(g.t_ns, g.rate_bps):
                if prev is None or rate < prev:
                    cuts.append(t / 1e3)
                prev = rate
            qps.append(cuts)
        out.append(qps)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2, help="independent repeats per engine (default 2)")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        print("dcqcn_timing: --repeats must be >= 1", file=sys.stderr)
        return 2
    c = ccparams.defaults()
    kmin, kmax = per_25g(c["ecn_kmin_bytes_per_25g"], PORT_BPS), per_25g(c["ecn_kmax_bytes_per_25g"], PORT_BPS)
    print(
        f"a queue at Kmin ({kmin / 1e6:.1f} MB) drains in {kmin * 8 / PORT_BPS * 1e6:.0f} us on a 200 Gb/s port, "
        f"at Kmax ({kmax / 1e6:.1f} MB) {kmax * 8 / PORT_BPS * 1e6:.0f} us; a CNP may follow every "
        f"{c['cnp_interval_ns'] / 1e3:.0f} us per QP"
    )
    print(f"{'engine':10} {'repeat':>6} {'QPs cut':>8} {'first cut us':>16} {'cuts per QP':>12} {'last cut us':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for engine, read in (("emulation", cuts_emulation), ("ns3", cuts_ns3)):
            r = dcqcn_engines.run_one(engine, "DCQCN, no window", a.repeats, Path(tmp))
            for k, qps in enumerate(read(r["root"])):
                cut = [q for q in qps if q]
                first = [q[0] for q in cut]
                n = [len(q) for q in cut]
                print(
                    f"{engine:10} {k:>6} {len(cut):>8} {min(first):>7.1f}-{max(first):<8.1f} "
                    f"{min(n):>5}-{max(n):<6} {max(q[-1] for q in cut):>12.1f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
