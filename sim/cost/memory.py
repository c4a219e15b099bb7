"""Memory per rank: weights of the layers a role runs, a working reserve, and the KV cache left.

A layout that does not fit is bad input: `check_fits` raises a SpecError naming the layout.
"""
from __future__ import annotations

from rackplan.specs import DTYPE_BYTES, HardwareSpec, Layout, ModelSpec, SpecError

from .moe import expert_bytes, physical_experts_per_rank

RESERVE_FRACTION = 0.05  # CUDA context, NCCL/DeepEP buffers, allocator slack (vLLM keeps ~5-10%)
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 32.0  # activations + workspace per token per hidden unit (bf16 x ~16 live tensors)


def weight_bytes_per_rank(model: ModelSpec, layout: Layout) -> dict[str, float]:
    """Bytes of weights one rank holds, by part. Prefill instances hold only the layers they run."""
    phase = "prefill" if layout.role == "prefill" else "decode"
    n_dense, n_moe = model.layers_in(phase)
    n_layers = n_dense + n_moe
    h, tp, dt = model.hidden_size, layout.tp, model.dtypes
    moe = model.moe
    parts = {
        "attention": model.attention.projection_params(h) * n_layers * DTYPE_BYTES[dt.attention_weights] / tp,
        "dense_ffn": 3 * h * model.dense_intermediate * n_dense * DTYPE_BYTES[dt.dense_weights] / tp,
        "shared_experts": moe.num_shared_experts * moe.expert_params(h) * n_moe
        * DTYPE_BYTES[dt.dense_weights] / tp,
        "routed_experts": physical_experts_per_rank(model, layout) * expert_bytes(model) * n_moe,
        "router": h * moe.num_experts * n_moe * 4.0,  # fp32 gate
        "embed_head": 2 * h * model.vocab_size * 2.0 / tp,  # bf16
        "extra": model.extra_weight_bytes / layout.ep_size,
    }
    if model.draft is not None and layout.speculation is not None:
        parts["draft"] = model.draft.total_params * DTYPE_BYTES[model.draft.weight_dtype] / tp
    return parts


def reserve_bytes(model: ModelSpec, hw: HardwareSpec, layout: Layout) -> float:
    """Working memory kept free of weights and KV: a fixed share + activations of a full step."""
    tokens = layout.max_tokens_per_step
    return RESERVE_FRACTION * hw.hbm_bytes + tokens * model.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN


def kv_capacity_tokens(model: ModelSpec, hw: HardwareSpec, layout: Layout) -> float:
    """Context tokens of KV cache one rank can hold (0 or less means the layout does not fit)."""
    free = hw.hbm_bytes - sum(weight_bytes_per_rank(model, layout).values()) - reserve_bytes(model, hw, layout)
    return free / model.kv_bytes_per_token


def check_fits(model: ModelSpec, hw: HardwareSpec, layout: Layout, field: str, min_tokens: float = 1.0) -> float:
    """KV capacity in tokens per rank; SpecError if the weights (plus reserve) leave no room."""
    cap = kv_capacity_tokens(model, hw, layout)
    if cap < min_tokens:
        need = sum(weight_bytes_per_rank(model, layout).values()) + reserve_bytes(model, hw, layout)
        raise SpecError("", field, f"a layout that fits in HBM: {layout.tag} of {model.name} needs "
                        f"{need / 1e9:.1f} GB per GPU before KV cache, {hw.name} has {hw.hbm_bytes / 1e9:.1f} GB")
    return cap
