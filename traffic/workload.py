"""PD-disaggregated serving workload: requests -> prefill -> KV-cache shard transfers.

Deployment: prefill (P) and decode (D) instances of `tp` GPUs (whole servers); each request
is prefilled on one P instance (FIFO), then every P rank sends its KV shard to a D rank
chosen by the mapping (rail-aligned r->r, rank-shifted r->r+1, random per request, incast
all->rank 0). Everything is planned in real-cluster seconds, then scaled explicitly:

    emulated time = real time x dilation,  dilation = size_scale / rate_scale
    emulated bytes = real bytes x size_scale

so a transfer's emulated duration is exactly its real duration x dilation. The load factor
compresses trace arrivals; `offered_load` picks it so the mean KV traffic is that fraction of
the P side's NIC capacity.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from .kvmodel import ModelShape, TimeModel
from .traces import MOONCAKE_BLOCK_TOKENS, TraceRequest

MAPPINGS = ("rail-aligned", "rank-shifted", "random", "incast")
SCHEDULERS = ("round-robin", "least-loaded")


@dataclass(frozen=True)
class Scaling:
    rate_scale: float
    size_scale: float
    load_factor: float

    @property
    def dilation(self) -> float:
        return self.size_scale / self.rate_scale


@dataclass
class Instance:
    kind: str  # P | D
    index: int
    gpus: list[int]  # rank -> GPU id


@dataclass
class Transfer:
    req: int
    shard: int  # P rank
    src_gpu: int
    dst_gpu: int
    real_bytes: int
    bytes: int  # emulated
    t_post_s: float  # emulated, from the run's start


@dataclass
class PlannedRequest:
    req: int
    t_arrival_s: float  # emulated
    input_tokens: int
    output_tokens: int
    kv_tokens: int  # tokens whose KV moves (after prefix reuse)
    p_instance: int
    d_instance: int
    prefill_wait_s: float  # emulated
    prefill_s: float  # emulated
    first_decode_step_s: float  # emulated
    transfers: list[int] = field(default_factory=list)


@dataclass
class Plan:
    scaling: Scaling
    instances: list[Instance]
    requests: list[PlannedRequest]
    transfers: list[Transfer]
    kv_bytes_per_token: int
    natural_load: float  # the trace's own mean KV traffic / P-side NIC capacity
    offered_load: float  # after the load factor
    prefill_utilisation: float
    horizon_s: float  # emulated time of the last post

    def summary(self) -> dict:
        return {
            "requests": len(self.requests),
            "transfers": len(self.transfers),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "scaling": asdict(self.scaling),
            "dilation": self.scaling.dilation,
            "natural_load": self.natural_load,
            "offered_load": self.offered_load,
            "prefill_utilisation": self.prefill_utilisation,
            "horizon_s": self.horizon_s,
            "emulated_kv_bytes": sum(t.bytes for t in self.transfers),
            "real_kv_bytes": sum(t.real_bytes for t in self.transfers),
        }


def instances(n_gpus: int, gpus_per_server: int, tp: int, prefill: int, decode: int) -> list[Instance]:
    if tp < 1 or tp % gpus_per_server and gpus_per_server % tp:
        raise ValueError(f"tp={tp} must be a multiple or a divisor of gpus_per_server={gpus_per_server}")
    need = (prefill + decode) * tp
    if need > n_gpus:
        raise ValueError(f"{prefill} P + {decode} D instances of tp={tp} need {need} GPUs; the fabric has {n_gpus}")
    out = []
    for i in range(prefill):
        out.append(Instance("P", i, list(range(i * tp, (i + 1) * tp))))
    base = n_gpus - decode * tp  # decode instances take the last GPUs
    for i in range(decode):
        out.append(Instance("D", i, list(range(base + i * tp, base + (i + 1) * tp))))
    return out


def rank_map(mapping: str, tp: int, rng: random.Random) -> list[int]:
    if mapping == "rail-aligned":
        return list(range(tp))
    if mapping == "rank-shifted":
        return [(r + 1) % tp for r in range(tp)]
    if mapping == "random":
        perm = list(range(tp))
        rng.shuffle(perm)
        return perm
    if mapping == "incast":
        return [0] * tp
    raise ValueError(f"unknown mapping {mapping!r}; valid: {', '.join(MAPPINGS)}")


def plan(
    trace: list[TraceRequest],
    model: ModelShape,
    times: TimeModel,
    n_gpus: int,
    gpus_per_server: int,
    gpu_bps: float,
    *,
    offered_load: float | None = None,
    load_factor: float | None = None,
    **kw,
) -> Plan:
    """Plan a replay. `offered_load` counts the KV bytes that actually move (after prefix reuse):
    the load factor is corrected until the plan offers what was asked (offered bytes scale
    linearly with it, so one correction is exact unless reuse depends on timing)."""
    if (offered_load is None) == (load_factor is None):
        raise ValueError("give exactly one of offered_load or load_factor")
    if load_factor is not None:
        return _plan_once(trace, model, times, n_gpus, gpus_per_server, gpu_bps, load_factor=load_factor, **kw)
    p = _plan_once(trace, model, times, n_gpus, gpus_per_server, gpu_bps, offered_load=offered_load, **kw)
    for _ in range(4):
        if abs(p.offered_load / offered_load - 1) < 1e-6:
            break
        lf = p.scaling.load_factor * offered_load / p.offered_load
        p = _plan_once(trace, model, times, n_gpus, gpus_per_server, gpu_bps, load_factor=lf, **kw)
    return p


def _plan_once(
    trace: list[TraceRequest],
    model: ModelShape,
    times: TimeModel,
    n_gpus: int,
    gpus_per_server: int,
    gpu_bps: float,
    *,
    rate_scale: float,
    size_scale: float,
    tp: int,
    prefill_instances: int,
    decode_instances: int,
    mapping: str = "rail-aligned",
    scheduler: str = "round-robin",
    offered_load: float | None = None,
    load_factor: float | None = None,
    start_index: int = 0,
    requests: int = 200,
    prefix_reuse: bool = False,
    seed: int = 0,
) -> Plan:
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; valid: {', '.join(SCHEDULERS)}")
    if (offered_load is None) == (load_factor is None):
        raise ValueError("give exactly one of offered_load or load_factor")
    window = trace[start_index : start_index + requests]
    if len(window) < requests:
        raise ValueError(f"the trace has {len(trace)} requests; start_index {start_index} + {requests} requested")
    insts = instances(n_gpus, gpus_per_server, tp, prefill_instances, decode_instances)
    P = [i for i in insts if i.kind == "P"]
    D = [i for i in insts if i.kind == "D"]
    bpt = model.kv_bytes_per_token()
    rng = random.Random(seed)
    # prefix reuse: a 512-token block a D instance already holds does not move again
    seen: list[set] = [set() for _ in D]
    t0 = window[0].t_s
    span = max(window[-1].t_s - t0, 1e-9)
    kv_tokens_natural = sum(r.input_tokens for r in window)
    p_capacity_bps = len(P) * tp * gpu_bps
    natural = kv_tokens_natural * bpt * 8 / span / p_capacity_bps
    lf = load_factor if load_factor is not None else offered_load / natural
    if not lf > 0:
        raise ValueError("load factor must be > 0")
    scaling = Scaling(rate_scale, size_scale, lf)
    dil = scaling.dilation
    p_free = [0.0] * len(P)
    d_busy = [0.0] * len(D)
    busy_prefill = 0.0
    out_reqs, out_tx = [], []
    for k, r in enumerate(window):
        arrival = (r.t_s - t0) / lf  # real seconds
        pi = k % len(P) if scheduler == "round-robin" else min(range(len(P)), key=lambda i: p_free[i])
        di = k % len(D) if scheduler == "round-robin" else min(range(len(D)), key=lambda i: d_busy[i])
        if prefix_reuse and r.hash_ids:
            kv_tokens = sum(
                min(MOONCAKE_BLOCK_TOKENS, r.input_tokens - i * MOONCAKE_BLOCK_TOKENS)
                for i, h in enumerate(r.hash_ids)
                if h not in seen[di]
            )
            seen[di].update(r.hash_ids)
        else:
            kv_tokens = r.input_tokens
        start = max(arrival, p_free[pi])
        pre = times.prefill_s(r.input_tokens)
        p_free[pi] = start + pre
        busy_prefill += pre
        ready = start + pre
        kv_real = kv_tokens * bpt
        d_busy[di] = max(d_busy[di], ready) + kv_real * 8 / (tp * gpu_bps)
        pr = PlannedRequest(
            k,
            arrival * dil,
            r.input_tokens,
            r.output_tokens,
            kv_tokens,
            pi,
            di,
            (start - arrival) * dil,
            pre * dil,
            times.first_decode_step_s * dil,
        )
        ranks = rank_map(mapping, tp, rng)
        per_shard = kv_real // tp
        for rank in range(tp):
            real = per_shard + (kv_real - per_shard * tp if rank == 0 else 0)
            emu = max(1, int(round(real * size_scale)))
            t = Transfer(k, rank, P[pi].gpus[rank], D[di].gpus[ranks[rank]], real, emu, ready * dil)
            pr.transfers.append(len(out_tx))
            out_tx.append(t)
        out_reqs.append(pr)
    horizon = max(t.t_post_s for t in out_tx)
    offered = (sum(t.real_bytes for t in out_tx) * 8 / max(span / lf, 1e-9)) / p_capacity_bps
    util = busy_prefill / max(len(P) * max(p_free), 1e-9)
    return Plan(scaling, insts, out_reqs, out_tx, bpt, natural, offered, util, horizon)
