"""Memory per rank: weights of the layers a role runs, a working reserve, and the KV cache left.

A rank holds 1 / pp of the layers (pipeline stages, each with one of the embedding and the LM head),
its TP share of dense weights, its EP share of the routed experts (or every expert sharded tp ways
without expert parallelism), and the drafter split the same way. Weights offloaded to host memory
(Layout.offload_gb, vLLM --cpu-offload-gb) do not occupy HBM; step.py prices streaming them back.
The engine fills `memory_fraction` of HBM (Layout.gpu_memory_utilization, else the engine's own
default) with weights, a full step's activations and KV cache, as vLLM's profile run sizes it. A layout
that does not fit is bad input: `check_fits` raises a SpecError naming the layout.
"""
from __future__ import annotations

from rackplan.specs import DTYPE_BYTES, HardwareSpec, Layout, ModelSpec, SpecError

from .efficiency import _engine
from .moe import expert_bytes, physical_experts_per_rank

# vLLM's default --gpu-memory-utilization, the share of the GPU's total memory its worker may fill with
# weights, the peak activations of a max_num_batched_tokens dummy step, the non-torch memory that step adds
# (NCCL, custom all-reduce buffers) and the KV cache: 0.9 in vllm/config/cache.py CacheConfig through the versions of
# the published vLLM cases (v0.10.2, v0.11.0, v0.14.1) [secondary: not read at those tags; docs.vllm.ai engine args
# "If unspecified, will use the default value of 0.9"; 0.92 in later versions, vllm/config/cache.py at commit
# 002f10e0cfa1373a19a0d2756598a34b700d20e5 `Field(default=0.92, gt=0, le=1)`]. vllm/v1/worker/gpu_worker.py
# determine_available_memory: KV bytes = total_memory x gpu_memory_utilization - (weights + torch peak
# increase + non-torch increase) (`requested_memory - profile_result.non_kv_cache_memory`); CUDA graphs are
# captured after the KV cache is allocated, outside that budget, in these versions (vLLM PR 30515 added an
# opt-in estimate, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, https://github.com/vllm-project/vllm/pull/30515, on by
# default only from v0.21.0 [secondary: the worker's log line "CUDA graph memory profiling is enabled (default since
# v0.21.0)", quoted in https://github.com/gpustack/runner/pull/251]). The CUDA context and whatever the worker
# held before its first memory snapshot also lie outside it.
VLLM_GPU_MEMORY_UTILIZATION = 0.9
# SGLang layouts (Layout.engine sglang) without a fraction: all of HBM but this share. NOT SGLang's default,
# which server_args.py _handle_gpu_memory_settings computes per launch from the GPU's memory,
# chunked_prefill_size, cuda_graph_max_bs, TP x PP, DP attention and speculation (mem_fraction_static =
# (gpu_mem - reserved_mem) / gpu_mem, reserved_mem >= 10 GiB on GPUs over 60 GiB); not modelled yet, so
# SGLang keeps the earlier unsourced reserve [inferred: "CUDA context, NCCL/DeepEP buffers, allocator slack"].
SGLANG_RESERVE_FRACTION = 0.05
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 32.0  # activations + workspace per token per hidden unit (bf16 x ~16 live tensors)


def weight_bytes_per_rank(model: ModelSpec, layout: Layout) -> dict[str, float]:
    """Bytes of weights one rank holds, by part (offloaded ones included). Prefill instances hold
    only the layers they run."""
    phase = "prefill" if layout.role == "prefill" else "decode"
    pp = layout.pp
    n_dense, n_moe = (n / pp for n in model.layers_in(phase))  # a stage's layers (float)
    n_layers = n_dense + n_moe
    h, tp, dt = model.hidden_size, layout.tp, model.dtypes
    moe = model.moe
    parts = {
        "attention": sum(k * n for _, k, n in model.attention.rank_projections(h, tp)) * n_layers
        * DTYPE_BYTES[dt.attention_weights],
        "dense_ffn": 3 * h * model.dense_intermediate * n_dense * DTYPE_BYTES[dt.dense_weights] / tp,
        "shared_experts": moe.num_shared_experts * moe.expert_params(h) * n_moe
        * DTYPE_BYTES[dt.dense_weights] / tp,
        "routed_experts": physical_experts_per_rank(model, layout) * expert_bytes(model) * n_moe / layout.moe_tp,
        "router": h * moe.num_experts * n_moe * 4.0,  # fp32 gate
        "embed_head": (2 if pp == 1 else 1) * h * model.vocab_size * 2.0 / tp,  # bf16; a stage holds one of them
        "extra": model.extra_weight_bytes / layout.ep_size,
    }
    if model.draft is not None and layout.speculation is not None:
        parts["draft"] = draft_bytes_per_rank(model, layout)
    return parts


def draft_bytes_per_rank(model: ModelSpec, layout: Layout) -> float:
    """The drafter's weights on one rank: dense parts TP-split, routed experts split like the target's."""
    d = model.draft
    assert d is not None, "draft_bytes_per_rank of a model without a drafter"
    wb = DTYPE_BYTES[d.weight_dtype]
    if not d.num_experts:
        return d.total_params * wb / layout.tp
    experts = d.num_experts * d.expert_params / (layout.ep_size * layout.moe_tp)
    return d.stages * (d.dense_stage_params / layout.tp + experts) * wb


def offloaded_bytes(model: ModelSpec, layout: Layout) -> float:
    """Weight bytes per rank kept in host memory and streamed in every forward pass."""
    if not layout.offload_gb:
        return 0.0
    return min(layout.offload_gb * 1e9, sum(weight_bytes_per_rank(model, layout).values()))


def memory_fraction(layout: Layout) -> float:
    """The share of HBM the engine may fill with weights, activations and KV cache: the layout's
    gpu_memory_utilization, else the engine's default (Layout.engine; vllm when unset: VLLM_GPU_MEMORY_UTILIZATION;
    sglang: SGLANG_RESERVE_FRACTION, not yet its own). What `rackplan deploy` emits as
    --gpu-memory-utilization, so the engine sizes its KV cache as it was priced."""
    if layout.gpu_memory_utilization is not None:
        return layout.gpu_memory_utilization
    return {"vllm": VLLM_GPU_MEMORY_UTILIZATION, "sglang": 1.0 - SGLANG_RESERVE_FRACTION}[_engine(layout)]


def reserve_bytes(model: ModelSpec, hw: HardwareSpec, layout: Layout) -> float:
    """Working memory kept free of weights and KV: the share of HBM the engine may not use
    (1 - memory_fraction) + activations of a full step (vLLM's profile run subtracts them from its share)."""
    tokens = layout.max_tokens_per_step
    unused = 1.0 - memory_fraction(layout)
    return unused * hw.hbm_bytes + tokens * model.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN


def resident_bytes(model: ModelSpec, layout: Layout) -> float:
    """Weight bytes per rank in HBM (offloaded ones excluded)."""
    return sum(weight_bytes_per_rank(model, layout).values()) - offloaded_bytes(model, layout)


def kv_capacity_tokens(model: ModelSpec, hw: HardwareSpec, layout: Layout) -> float:
    """Context tokens of KV cache one rank can hold (0 or less means the layout does not fit); a
    pipeline stage stores the KV of its 1 / pp of the layers, a TP rank its share of GQA's KV heads."""
    free = hw.hbm_bytes - resident_bytes(model, layout) - reserve_bytes(model, hw, layout)
    return free / kv_bytes_per_token_per_rank(model, layout)


def kv_bytes_per_token_per_rank(model: ModelSpec, layout: Layout) -> float:
    """KV cache bytes one rank stores per token of context: the model's over its pipeline stage's
    layers (1 / pp) and its TP share of the heads (AttentionSpec.kv_split: GQA heads split, MLA latents
    replicated)."""
    return model.kv_bytes_per_token / layout.pp / model.attention.kv_split(layout.tp)


def check_fits(model: ModelSpec, hw: HardwareSpec, layout: Layout, field: str, min_tokens: float = 1.0) -> float:
    """KV capacity in tokens per rank; SpecError if the weights (plus reserve) leave no room, or
    weights are offloaded on hardware without a host link."""
    if layout.offload_gb and hw.host_link_bw <= 0:
        raise SpecError("", f"{field}.offload_gb", f"0: {hw.name} names no host_link_bw to stream weights over",
                        layout.offload_gb)
    cap = kv_capacity_tokens(model, hw, layout)
    if cap < min_tokens:
        need = resident_bytes(model, layout) + reserve_bytes(model, hw, layout)
        raise SpecError("", field, f"a layout that fits in HBM: {layout.tag} of {model.name} needs "
                        f"{need / 1e9:.1f} GB per GPU before KV cache, {hw.name} has {hw.hbm_bytes / 1e9:.1f} GB")
    return cap
