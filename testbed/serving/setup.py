"""One serving scenario resolved from an experiment spec: fabric, deployment, compute, KV flows, arrivals.

Why its own module: the KV transfers must go where `zlab run` would send them -- the same P and D
instances (traffic/workload.instances), the same TP rank mapping, one shard per P rank, split over
the GPU's ports by the fabric kind's split policy, one QP (UDP source port) per port pair drawn
from the repeat's seed. Only the timing differs: here the serving model decides when each starts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from traffic import traces, workload

from ..fabric import Fabric, build_fabric
from ..fabric.kinds import kind_of
from ..fabric.paths import dst_address, split_fractions, src_port_id
from .compute import InstanceCompute
from .model import Deployment, Request
from .presets import Efficiency, gpu, model


@dataclass
class Scenario:
    label: str
    fabric: Fabric
    compute: InstanceCompute
    deployment: Deployment
    instances: list[workload.Instance]
    split: str | None
    mapping: str
    scheduler: str
    trace: list[traces.TraceRequest]

    @property
    def n_gpus(self) -> int:
        """GPUs that serve (P and D instances): the per-GPU rates' denominator."""
        return sum(len(i.gpus) for i in self.instances)

    def port_rates_bps(self) -> dict[str, float]:
        fab = self.fabric
        return {p.name: float(p.rate_bps) for p in fab.ports[: fab.n_gpus * fab.ports_per_gpu]}

    def flow_planner(self, seed: int):
        """(p, d, request, KV bytes) -> the request's flows: TP shards per GPU port pair, as zlab run plans them."""
        fab = self.fabric
        P = [i for i in self.instances if i.kind == "P"]
        D = [i for i in self.instances if i.kind == "D"]
        parts = split_fractions(fab, self.split)
        tp = len(P[0].gpus)
        qp_rng = random.Random(seed)
        qps: dict[tuple[str, str], int] = {}
        names: dict[tuple[int, str, int], tuple[str, str]] = {}

        def port_names(src_gpu: int, role: str, dst_gpu: int) -> tuple[str, str]:
            """(source port, destination port) names of a shard's part: the address rule, once per triple."""
            key = (src_gpu, role, dst_gpu)
            if key not in names:
                names[key] = (
                    fab.ports[int(src_port_id(fab, src_gpu, role))].name,
                    fab.ports[int(dst_address(fab, src_gpu, role, dst_gpu))].name,
                )
            return names[key]

        def flows(p: int, d: int, req: int, kv_bytes: int):
            ranks = workload.rank_map(self.mapping, tp, random.Random(seed * 1_000_003 + req))
            per_shard = kv_bytes // tp
            out = []
            for rank in range(tp):
                shard = per_shard + (kv_bytes - per_shard * tp if rank == 0 else 0)
                src_gpu, dst_gpu = P[p].gpus[rank], D[d].gpus[ranks[rank]]
                for role, share in parts:
                    src, dst = port_names(src_gpu, role, dst_gpu)
                    if (src, dst) not in qps:
                        qps[(src, dst)] = qp_rng.randrange(49152, 65536)
                    out.append((src, dst, int(shard * share), qps[(src, dst)]))
            return out

        return flows

    def requests(self, rate_per_gpu: float, n: int, start_index: int, seed: int) -> list[Request]:
        """n requests with the trace's token counts (from start_index, in order) and Poisson arrivals
        at rate_per_gpu x serving GPUs. The seed draws unit-rate gaps scaled by the rate, so two
        rates (and two fabrics) see the same arrival pattern: common random numbers for the search."""
        if not rate_per_gpu > 0:
            raise ValueError("the request rate must be > 0")
        if not 0 <= start_index < len(self.trace):
            raise ValueError(f"the trace has {len(self.trace)} requests; start_index {start_index} is outside it")
        # past the trace's end its rows are reused in order: a long window at a high rate needs more
        # requests than a trace holds, and the token counts stay the trace's own distribution
        window = [self.trace[(start_index + k) % len(self.trace)] for k in range(n)]
        rng = random.Random(seed)
        rate_per_s = rate_per_gpu * self.n_gpus
        t_s, out = 0.0, []
        for k, r in enumerate(window):
            t_s += rng.expovariate(1.0) / rate_per_s
            out.append(Request(k, int(t_s * 1e9), max(1, r.input_tokens), max(1, r.output_tokens)))
        return out


def scenario(spec: dict, label: str, gpu_name: str, eff: Efficiency | None = None) -> Scenario:
    """Resolve one fabric of a validated spec for serving; ValueError names what does not fit."""
    eff = eff or Efficiency()
    w, d = spec["workload"], spec["deployment"]
    fab = build_fabric(spec["fabrics"][label])
    mc = model(w["model"])
    comp = InstanceCompute(mc, gpu(gpu_name), d["tp"], eff)
    kv_tokens = comp.kv_capacity_tokens()
    insts = workload.instances(
        fab.n_gpus, int(fab.params["gpus_per_server"]), d["tp"], d["prefill_instances"], d["decode_instances"]
    )
    dep = Deployment(
        d["prefill_instances"],
        d["decode_instances"],
        kv_tokens,
        kv_tokens,
        eff.max_decode_batch,
        eff.max_prefill_tokens,
        comp.kv_bytes_per_token,
    )
    split = d["split"] if kind_of(fab).split_policies else None
    return Scenario(label, fab, comp, dep, insts, split, d["mapping"], d["scheduler"], traces.read(w["trace"]))
