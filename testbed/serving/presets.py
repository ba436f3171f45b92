"""GPU and model presets for the serving model: the compute and memory figures, each with its source.

Why a table of its own: the serving model turns tokens into nanoseconds and bytes of HBM, and a
capacity figure is only as good as these numbers. Every figure names where it comes from; what
could not be sourced is marked [assumption] and can be overridden (ServingParams).
"""

from __future__ import annotations

from dataclasses import dataclass

from traffic import kvmodel


@dataclass(frozen=True)
class Gpu:
    name: str
    hbm_bytes: int
    peak_flops: float  # dense BF16, FLOP/s
    hbm_bytes_per_s: float
    source: str


# H800 is the export variant of H100 SXM5: same SMs, HBM3 and BF16 rate; NVLink cut to 400 GB/s,
# which the serving model does not use (TP traffic is inside a step's time model).
GPUS = {
    "h100": Gpu(
        "h100",
        80 * 10**9,
        989e12,
        3.35e12,
        "NVIDIA H100 SXM5 datasheet: 80 GB HBM3, 3.35 TB/s, 989 TFLOPS dense BF16",
    ),
    "h800": Gpu(
        "h800",
        80 * 10**9,
        989e12,
        3.35e12,
        "NVIDIA H800 SXM5: H100 SXM5's HBM and BF16 figures (NVLink 400 GB/s, not modelled) [assumption: "
        "no public datasheet states them separately]",
    ),
}


@dataclass(frozen=True)
class ModelCompute:
    """What a step costs: weights read per step, FLOPs per token, attention width."""

    name: str  # also the KV-shape preset in traffic/kvmodel.py
    params: float  # total parameters held in HBM
    active_params: float  # parameters used per token (MoE: the activated experts)
    weight_bytes_per_param: float
    attn_dim: int  # query heads x head dim (the attention FLOPs' width)
    source: str

    @property
    def weight_bytes(self) -> int:
        return int(self.params * self.weight_bytes_per_param)

    @property
    def layers(self) -> int:
        return kvmodel.PRESETS[self.name].layers

    def kv_bytes_per_token(self) -> int:
        return kvmodel.PRESETS[self.name].kv_bytes_per_token()


MODELS = {
    "llama3-8b": ModelCompute(
        "llama3-8b", 8.03e9, 8.03e9, 2, 32 * 128, "Meta Llama 3 8B config: 8.03 B parameters, 32 heads x 128, BF16"
    ),
    "llama3-70b": ModelCompute(
        "llama3-70b", 70.6e9, 70.6e9, 2, 64 * 128, "Meta Llama 3 70B config: 70.6 B parameters, 64 heads x 128, BF16"
    ),
    "glm-4.5": ModelCompute(
        "glm-4.5",
        355e9,
        32e9,
        1,
        96 * 128,
        "GLM-4.5 report (zai-org): 355 B total, 32 B active, 96 heads x 128; FP8 weights as in the "
        "published GLM-4.5-FP8 checkpoint [assumption: FP8 serving]",
    ),
}


@dataclass(frozen=True)
class Efficiency:
    """How much of the peak a step reaches. None of these is measured here: all are assumptions,
    set where roofline analyses of dense transformers on H100 usually land."""

    mfu: float = 0.5  # prefill/decode FLOP efficiency [assumption]
    hbm_efficiency: float = 0.8  # share of HBM bandwidth a decode step reaches [assumption]
    prefill_overhead_ns: int = 5_000_000  # per prefill batch (the spec's prefill_overhead_s default) [assumption]
    decode_overhead_ns: int = 1_000_000  # per decode step (scheduling, sampling) [assumption]
    memory_fraction: float = 0.9  # Vidur memory_planner: (0.9 x HBM - parameters) for the KV cache
    max_decode_batch: int = 256  # vLLM's default max_num_seqs
    max_prefill_tokens: int = 8192  # tokens per prefill batch (a request longer than this runs alone) [assumption]


def gpu(name: str) -> Gpu:
    if name not in GPUS:
        raise ValueError(f"unknown GPU preset {name!r}; presets: {', '.join(GPUS)}")
    return GPUS[name]


def model(name) -> ModelCompute:
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(
            f"no serving compute preset for model {name!r}; presets with compute figures: {', '.join(MODELS)}"
        )
    return MODELS[name]
