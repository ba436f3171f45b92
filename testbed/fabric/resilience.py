"""Resilience sweep: every single cable and every single switch failure (or a stated random sample
of them), each repaired by a policy and loaded with a traffic pattern; worst case and mean.

Why exhaustive where it fits: ZCube's unique path per source port makes its damage depend on
which cable fails (a NIC cable strands a port, an A-B cable removes one path for n x n port
pairs); a mean over a few draws would hide the worst case an operator must plan for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .failures import Failures, check_policy, degrade, single_failures
from .load import Traffic, estimate
from .model import Fabric


@dataclass
class Scenario:
    failure: str
    what: str  # nic cable | fabric cable | switch
    max_link_util: float
    lost_transfers: int
    failed_over_subflows: int
    throughput_fraction: float  # max-min aggregate over demand


def _what(fab: Fabric, f: Failures) -> str:
    if f.switches:
        return "switch"
    return f"{fab.links[next(iter(f.cables))].kind} cable"


def sweep(
    fab: Fabric,
    traffic: Traffic,
    policy: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    split: str | None = None,
    progress=None,
) -> dict:
    """Run every single failure (or `sample` of them, drawn with `seed`) and summarise per class."""
    policy = check_policy(fab, policy)
    scenarios = single_failures(fab)
    total = len(scenarios)
    if sample is not None and sample < total:
        rng = np.random.default_rng(seed)
        scenarios = [scenarios[i] for i in sorted(rng.choice(total, size=sample, replace=False))]
    healthy = estimate(fab, traffic, split=split, seed=seed)
    t0 = time.perf_counter()
    rows = []
    for k, f in enumerate(scenarios):
        res = estimate(fab, traffic, split=split, seed=seed, degraded=degrade(fab, f, policy))
        rows.append(
            Scenario(
                f.describe(fab),
                _what(fab, f),
                float(res.util.max()),
                res.lost_transfers,
                res.failed_over_subflows,
                float(res.flow_rate_bps.sum() / res.demand_bps.sum()),
            )
        )
        if progress and (k + 1) % 200 == 0:
            progress(k + 1, len(scenarios))
    took = time.perf_counter() - t0
    base_tp = float(healthy.flow_rate_bps.sum() / healthy.demand_bps.sum())
    classes = {}
    for what in ("nic cable", "fabric cable", "switch"):
        rs = [r for r in rows if r.what == what]
        if not rs:
            continue
        util = np.array([r.max_link_util for r in rs])
        lost = np.array([r.lost_transfers for r in rs])
        tp = np.array([r.throughput_fraction for r in rs])
        worst = rs[int(np.argmax(util))]
        classes[what] = {
            "scenarios": len(rs),
            "max_link_util_mean": float(util.mean()),
            "max_link_util_worst": float(util.max()),
            "worst_failure": worst.failure,
            "scenarios_losing_transfers": int((lost > 0).sum()),
            "lost_transfers_max": int(lost.max()),
            "lost_transfers_mean": float(lost.mean()),
            "throughput_lost_mean": float(base_tp - tp.mean()),
            "throughput_lost_worst": float(base_tp - tp.min()),
        }
    return {
        "spec": fab.spec,
        "pattern": traffic.name,
        "policy": policy,
        "scenarios_run": len(scenarios),
        "scenarios_total": total,
        "sampled": len(scenarios) < total,
        "seed": seed,
        "healthy_max_link_util": float(healthy.util.max()),
        "healthy_throughput_fraction": base_tp,
        "classes": classes,
        "seconds": took,
        "rows": [r.__dict__ for r in rows],
    }
