"""What a serving run yields: latency percentiles, throughput per GPU, occupancy, and the KV wait
split into the part the network engine measured and the parts the model assumed.

Why the split: only the transfer time comes from the engine (and so differs between fabrics and
engines); waiting for decode memory or a batch slot is a consequence the serving model computes.
A report that merges them would credit the network with the model's assumptions.
"""

from __future__ import annotations

import numpy as np

from .model import Result

SLO_METRICS = {
    "ttft": "time to first token (s): arrival to the first token the decode instance emits",
    "tpot": "time per output token (s): (last token - first token) / (output tokens - 1)",
}
GOODPUT_ATTAINMENT = 0.9  # DistServe: >= 90 % of requests within each SLO


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summarise(res: Result, n_gpus: int, slo_s: dict[str, float]) -> dict:
    """The run's figures (seconds, per-GPU rates) and whether it meets the SLOs by DistServe's goodput."""
    recs = res.records
    ttft = [(r.t_first_token_ns - r.req.t_arrival_ns) / 1e9 for r in recs]
    tpot = [
        (r.t_done_ns - r.t_first_token_ns) / 1e9 / (r.req.output_tokens - 1) for r in recs if r.req.output_tokens > 1
    ]
    e2e = [(r.t_done_ns - r.req.t_arrival_ns) / 1e9 for r in recs]
    t0 = min(r.req.t_arrival_ns for r in recs)
    span_s = max(max(r.t_done_ns for r in recs) - t0, 1) / 1e9
    tokens = sum(r.req.output_tokens for r in recs)
    # served: completions inside the arrival window over its length. Why not requests / span: the
    # span ends with the drain (the last arrivals' decodes, tens of seconds with long outputs), so a
    # rate over it falls below the offered load even far from saturation; inside the window the
    # served rate follows the offered load until capacity and flattens past it.
    t_last = max(r.req.t_arrival_ns for r in recs)
    served = sum(r.t_done_ns <= t_last for r in recs) / ((t_last - t0) / 1e9) / n_gpus if t_last > t0 else None
    transfer = [(r.t_kv_done_ns - r.t_kv_start_ns) / 1e9 for r in recs]
    mem_wait = [(r.t_kv_start_ns - r.t_prefill_end_ns) / 1e9 for r in recs]
    slot_wait = [(r.t_decode_join_ns - r.t_kv_done_ns) / 1e9 for r in recs]
    prefill_wait = [(r.t_prefill_start_ns - r.req.t_arrival_ns) / 1e9 for r in recs]
    within = {
        "ttft": sum(x <= slo_s["ttft"] for x in ttft) / len(ttft),
        "tpot": (sum(x <= slo_s["tpot"] for x in tpot) / len(tpot)) if tpot else 1.0,
    }
    return {
        "requests": len(recs),
        "engine": res.engine,
        "ttft_s": {"p50": _pct(ttft, 50), "p90": _pct(ttft, 90), "p99": _pct(ttft, 99), "mean": _mean(ttft)},
        "tpot_s": {"p50": _pct(tpot, 50), "p90": _pct(tpot, 90), "p99": _pct(tpot, 99), "mean": _mean(tpot)},
        "e2e_s": {"p50": _pct(e2e, 50), "p99": _pct(e2e, 99), "mean": _mean(e2e)},
        "tokens_per_s_per_gpu": tokens / span_s / n_gpus,
        "requests_per_s_per_gpu": len(recs) / span_s / n_gpus,
        "served_in_window_per_s_per_gpu": served,
        "kv_wait_s": {
            "measured_transfer_mean": _mean(transfer),
            "measured_transfer_p99": _pct(transfer, 99),
            "modelled_decode_memory_mean": _mean(mem_wait),
            "modelled_batch_slot_mean": _mean(slot_wait),
        },
        "modelled_prefill_queue_mean_s": _mean(prefill_wait),
        "occupancy": occupancy(res),
        "within_slo": within,
        "meets_slo": all(v >= GOODPUT_ATTAINMENT for v in within.values()),
    }


def occupancy(res: Result) -> dict:
    """Time-weighted mean decode-slot and KV-memory occupancy (fractions), over each instance's
    samples from its first to its last change."""
    dep = res.deployment
    by_inst: dict[int, list[tuple[int, int, int]]] = {}
    for t, j, batch, used in res.occupancy.samples:
        by_inst.setdefault(j, []).append((t, batch, used))
    slot_area = mem_area = span = 0.0
    for samples in by_inst.values():
        for (t, batch, used), (t_next, _, _) in zip(samples, samples[1:]):
            slot_area += batch * (t_next - t)
            mem_area += used * (t_next - t)
            span += t_next - t
    if span <= 0:
        return {"decode_slots_mean": 0.0, "decode_memory_mean": 0.0}
    return {
        "decode_slots_mean": slot_area / span / dep.max_decode_batch,
        "decode_memory_mean": mem_area / span / dep.decode_kv_tokens,
    }


def occupancy_series(res: Result, points: int = 200) -> list[dict]:
    """Decode-slot and memory occupancy summed over instances, at most `points` samples (for the run folder)."""
    dep = res.deployment
    state: dict[int, tuple[int, int]] = {}
    out = []
    samples = sorted(res.occupancy.samples)
    stride = max(1, len(samples) // points)
    for k, (t, j, batch, used) in enumerate(samples):
        state[j] = (batch, used)
        if k % stride == 0 or k == len(samples) - 1:
            out.append(
                {
                    "t_s": t / 1e9,
                    "slots": sum(b for b, _ in state.values()) / (dep.max_decode_batch * dep.decode_instances),
                    "memory": sum(u for _, u in state.values()) / (dep.decode_kv_tokens * dep.decode_instances),
                }
            )
    return out
