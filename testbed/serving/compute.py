"""Step times and KV memory of one serving instance: a roofline over the GPU and model presets.

Why a roofline and not a profile: Vidur and DistServe profile kernels on the GPU they model; zlab
has no GPU. A prefill is compute-bound (FLOPs / achieved FLOP/s), a decode step memory-bound
(weights + the batch's KV read once per step / achieved HBM bandwidth); each step takes the larger
of its two bounds. This is enough for the coupling the serving model exists for -- decode steps
that grow with batch size and context, prefill that grows with prompt length -- and every factor
is a named assumption (presets.Efficiency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .presets import Efficiency, Gpu, ModelCompute


@dataclass(frozen=True)
class InstanceCompute:
    """One instance of `tp` GPUs running `model` on `gpu`."""

    model: ModelCompute
    gpu: Gpu
    tp: int
    eff: Efficiency = Efficiency()

    @property
    def kv_bytes_per_token(self) -> int:
        return self.model.kv_bytes_per_token()

    def kv_capacity_tokens(self) -> int:
        """Vidur's memory planner: (memory_fraction x HBM - parameters) / KV bytes per token, over
        the instance's tp GPUs. Raises when the weights alone do not fit."""
        free = self.eff.memory_fraction * self.gpu.hbm_bytes * self.tp - self.model.weight_bytes
        if free <= self.kv_bytes_per_token:
            raise ValueError(
                f"{self.model.name} ({self.model.weight_bytes / 1e9:.0f} GB of weights) does not fit in "
                f"{self.tp} x {self.gpu.name} ({self.eff.memory_fraction:.0%} of "
                f"{self.gpu.hbm_bytes / 1e9:.0f} GB each); raise deployment.tp"
            )
        return int(free // self.kv_bytes_per_token)

    def _flops_ns(self, flops: float) -> float:
        return flops / (self.tp * self.gpu.peak_flops * self.eff.mfu) * 1e9

    def _hbm_ns(self, size_bytes: float) -> float:
        return size_bytes / (self.tp * self.gpu.hbm_bytes_per_s * self.eff.hbm_efficiency) * 1e9

    def prefill_ns(self, prompt_tokens: list[int]) -> int:
        """One prefill batch: 2 x active parameters FLOPs per token, plus causal attention
        (2 x layers x T^2 x attn_dim per prompt); at least one read of the weights."""
        m = self.model
        flops = sum(2 * m.active_params * t + 2 * m.layers * t * t * m.attn_dim for t in prompt_tokens)
        t_ns = max(self._flops_ns(flops), self._hbm_ns(m.weight_bytes))
        return self.eff.prefill_overhead_ns + math.ceil(t_ns)

    def decode_step_ns(self, batch: int, context_tokens: int) -> int:
        """One decode step for `batch` requests holding `context_tokens` of KV in all: the weights
        and every context token's KV are read once; FLOPs are 2 x active parameters per request
        plus 4 x layers x attn_dim per context token."""
        m = self.model
        read = m.weight_bytes + context_tokens * self.kv_bytes_per_token
        flops = 2 * m.active_params * batch + 4 * m.layers * m.attn_dim * context_tokens
        t_ns = max(self._hbm_ns(read), self._flops_ns(flops))
        return self.eff.decode_overhead_ns + math.ceil(t_ns)
