"""The report's memory stays proportional to the samples it reads, offline and in seconds.

Why: `zlab report` on a 256-GPU run with a cable failure took 9.3 GB (19 M queue port-samples per
fabric): the samples held as dicts of Python ints, one new port-name and tier string per row, a
deep copy to add the repeat column, a tuple per link_util row, and 4,000 model draws judged at
once (2.2 GB of masks). These tests widen the mini-run to many ports and bound the bytes per
port-sample with tracemalloc (numpy's buffers are traced; before the fix: 429 B peak, 251 held;
after: 115 and 75), and bound the draws' masks."""

import json
import tracemalloc

import numpy as np

from testbed.measure import draws
from testbed.measure.tables import FabricData
from tests.unit.minirun import MINI
from tests.unit.minirun import raw as _raw

WIDEN = 16  # the mini-run's 48 ROFT switch ports x 16: 768 columns, a 256-GPU fabric's width


def _widen(folder) -> None:
    """Every queue sample of roft's repeat 0 repeated over WIDEN copies of its ports."""
    q = _raw(folder, "roft") / "queues.jsonl"
    recs = [json.loads(line) for line in q.read_text().splitlines() if line.strip()]
    for r in recs:
        if r.get("type") == "header":
            r["ports"] = r["ports"] * WIDEN
        for k in ("b", "q", "d", "x"):
            if k in r:
                r[k] = r[k] * WIDEN
    q.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_tables_cost_bytes_per_port_sample_not_objects(run):
    _widen(run)
    exp = json.loads((run / "experiment.json").read_text())
    tracemalloc.start()
    try:
        fd = FabricData(run / "roft", exp["fabrics"]["roft"], 0)
        t = fd.write_tables(run / "tables", 10**6, 0.1)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    qs = t["queue_samples"]
    n = len(qs)
    assert n == len(fd.queue_arrays()[0]) * 48 * WIDEN
    assert peak / n < 200, f"{peak / n:.0f} B per port-sample at the peak"
    assert held / n < 120, f"{held / n:.0f} B per port-sample held"
    # one str object per port name, shared by every row (a new one per row was 2.3 GB at 256 GPUs)
    assert len({id(p) for p in qs["port"].to_numpy()}) <= 48 * WIDEN
    assert "repeat" not in qs.columns  # the written copy has it, the returned table does not


def _draws(label: str, n: int):
    exp = json.loads((MINI / "experiment.json").read_text())
    fd = FabricData(MINI / label, exp["fabrics"][label], 0)
    msgs, rate = draws.schedule(fd)
    pairs, edges = draws.concurrent_pairs(msgs, rate)
    sports = np.random.default_rng(0).integers(draws.SPORT_LO, draws.SPORT_HI, size=(n, len(pairs)))
    return fd.fabric, pairs, edges, sports


def test_model_draws_are_judged_in_chunks_with_the_same_answer(monkeypatch):
    fab, pairs, edges, sports = _draws("zcube", 4000)
    full_mask = len(sports) * len(edges) * 2 * len(fab.links)  # bytes of one all-draws mask (46 MB here)
    tracemalloc.start()
    try:
        chunked = draws.collisions(fab, pairs, edges, sports)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < full_mask / 2, (peak, full_mask)
    fab, pairs, edges, sports = _draws("roft", 600)  # most of its draws collide, some do not
    chunked = draws.collisions(fab, pairs, edges, sports)
    assert 0 < chunked.sum() < len(chunked)
    monkeypatch.setattr(draws, "DRAW_CHUNK", 7)
    assert np.array_equal(draws.collisions(fab, pairs, edges, sports), chunked)
    monkeypatch.setattr(draws, "DRAW_CHUNK", 10**9)  # all at once, as before the chunks
    assert np.array_equal(draws.collisions(fab, pairs, edges, sports), chunked)
