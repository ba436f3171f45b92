"""KV-cache bytes per token from a model's shape, and a prefill/decode time model.

Presets come from public model configs (sizes in docs/experiments.md, "Workload"). The time model's
parameters are explicit and overridable: they are assumptions, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    kv_heads: int = 0  # GQA/MHA
    head_dim: int = 0
    kv_lora_rank: int = 0  # MLA latent
    qk_rope_head_dim: int = 0
    dtype_bytes: int = 2

    def kv_bytes_per_token(self) -> int:
        if self.kv_lora_rank:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        if not (self.kv_heads and self.head_dim):
            raise ValueError(f"{self.name}: give kv_heads and head_dim (GQA) or kv_lora_rank (MLA)")
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


PRESETS = {
    "llama3-8b": ModelShape("llama3-8b", 32, 8, 128),
    "llama3-70b": ModelShape("llama3-70b", 80, 8, 128),
    "qwen2.5-coder-32b": ModelShape("qwen2.5-coder-32b", 64, 8, 128),
    "glm-4.5": ModelShape("glm-4.5", 92, 8, 128),
    "deepseek-v3": ModelShape("deepseek-v3", 61, kv_lora_rank=512, qk_rope_head_dim=64),
    "glm-5": ModelShape("glm-5", 78, kv_lora_rank=512, qk_rope_head_dim=64),
}


def model(spec: str | dict) -> ModelShape:
    if isinstance(spec, str):
        if spec not in PRESETS:
            raise ValueError(f"unknown model preset {spec!r}; presets: {', '.join(PRESETS)}")
        return PRESETS[spec]
    return ModelShape(**spec)


@dataclass(frozen=True)
class TimeModel:
    """Real-cluster seconds. prefill = overhead + tokens / tokens_per_s on one P instance
    (FIFO, one request at a time); the first decode step after the KV has arrived."""

    prefill_overhead_s: float = 0.005
    prefill_tokens_per_s: float = 1_500_000.0  # per P instance; high on purpose: the network, not compute, limits
    first_decode_step_s: float = 0.02

    def prefill_s(self, tokens: int) -> float:
        return self.prefill_overhead_s + tokens / self.prefill_tokens_per_s
