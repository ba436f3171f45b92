"""The flow-level engine against the packet engine: scripts/bench/flow_ns3.py (docs/flow-engine.md,
"Against the packet engine") at a reduced size, its documented band asserted. Needs the compiled
ns-3 program, as test_engine_ns3.py does (provision.sh --referee)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from testbed.referee import binary

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "flow_ns3.py"
REPEATS, REQUESTS = 2, 10


def _bench():
    spec = importlib.util.spec_from_file_location("flow_ns3_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.slow  # ns-3 at real scale, 2 fabrics x 2 repeats
@pytest.mark.parametrize("case", ["16-rank", "64-rank"])
def test_flow_engine_kv_completion_is_ns3s_within_the_documented_band(case, tmp_path):
    """ns-3 runs the case (2 repeats x 10 requests, zlab's default transport); each repeat's schedule
    is replayed in the flow engine on the same fabric, tables and QP order. On both fabrics the flow
    engine's KV completion p50 and p99, as its ratio to ns-3's, is within 2 % of 1 as the mean over
    repeats and within 6 % in every repeat. Why 2 %: the replay counts every packet's RoCEv2 headers
    on the wire, so what the flow engine leaves out is propagation and store-and-forward (microseconds)
    and how a drop-tail queue shares a link, against transfers of tens of MB (milliseconds); measured
    at the docs' size the ratios are 0.995 to 1.003. Why 6 % per repeat: the 64-GPU ROFT's repeats
    differ most (the docs' band: its ratio's interval within 6 %; two repeats are too few for a
    useful interval). The size still tells: a replay that starts each message when due, ignoring its
    QP, gave KV p50 ratios of 0.51 (16-GPU ZCube) and 0.72 (64-GPU ROFT); one without the header
    bytes, 0.97 and 0.95: both fail here."""
    binary.build(log=lambda *_: None)
    bench = _bench()
    got = bench.compare(bench.run_ns3(case, REPEATS, REQUESTS, tmp_path))
    assert set(got) == {"zcube", "roft"}
    for fabric, rows in got.items():
        assert len(rows) == REPEATS
        for key in ("kv_p50_ms", "kv_p99_ms"):
            ratios = [r["flow"][key] / r["ns3"][key] for r in rows]
            print(f"{case} {fabric} {key} flow/ns-3: {np.round(ratios, 4).tolist()}")
            assert abs(np.mean(ratios) - 1) <= 0.02, (case, fabric, key, ratios)
            assert all(abs(x - 1) <= 0.06 for x in ratios), (case, fabric, key, ratios)
