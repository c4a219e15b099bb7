"""ModelSpec: the architecture of a MoE transformer, as the cost models and the executor see it.

Loaded from `configs/models/*.yaml`. Attention is described by its projections (derived from the
head dims) and by its KV components: what a layer stores per token and what a query reads, which
is enough to express MLA (DeepSeek-V3), MLA + sparse indexer (V3.2), the sliding-window +
compressed-KV family (V4), cross-layer shared latents (V4.1) and plain GQA (Qwen3).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal, Optional, cast

from .fields import OMIT_IF_NONE, check, non_negative, positive

# Bytes per element (or per parameter, scales included) of each storage format.
DTYPE_BYTES = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    # FP8 with one fp32 scale per 128x128 block (DeepSeek-V3 README_WEIGHTS.md): 1 + 4/16384.
    "fp8_block": 1.0 + 4.0 / 16384.0,
    # OCP MX formats: one 8-bit UE8M0 scale per 32 elements (OCP MX spec v1.0).
    "mxfp8": 1.0 + 1.0 / 32.0,
    "mxfp4": 0.5 + 1.0 / 32.0,
    "fp4": 0.5,
    # NVFP4: one FP8 scale per 16 elements (NVIDIA Blackwell NVFP4 blog).
    "nvfp4": 0.5 + 1.0 / 16.0,
}
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "fp8_block", "mxfp8", "mxfp4", "fp4", "nvfp4"]
DTYPE_FAMILY_8 = {"fp8": "fp8", "fp8_block": "fp8", "mxfp8": "fp8"}  # the 8-bit float formats


@dataclass(frozen=True)
class KVComponent:
    """One kind of cached state a layer attends over (per sequence).

    A query at context c reads `attended(c)` entries: all stored entries c/ratio, capped by a
    sliding `window` (in tokens) and by a sparse `topk`; an optional indexer scores every stored
    entry (every `indexer_ratio` tokens) to pick the top-k.
    """

    name: str
    layers: int  # layers whose queries attend over this component
    stored_layers: int  # layers that store it (fewer than `layers` when shared across layers)
    entry_bytes: float  # bytes per stored entry per storing layer
    qk_dim: int  # per-head dot-product width in the decode path (absorbed for MLA)
    v_dim: int  # per-head value width in the decode path
    ratio: int = 1  # tokens per stored entry (compression ratio)
    window: Optional[int] = None  # sliding window in tokens
    topk: Optional[int] = None  # sparse attention: entries kept per query
    prefill_qk_dim: Optional[int] = None  # per-head widths in the prefill path (MLA: 192/128)
    prefill_v_dim: Optional[int] = None
    indexer_heads: Optional[int] = None
    indexer_dim: Optional[int] = None
    indexer_key_bytes: Optional[float] = None  # bytes per indexer key per storing layer
    indexer_ratio: int = 1  # tokens per indexer key
    # the component runs on FlashMLA's sparse kernels, which compute whole tiles of query heads:
    # heads per rank are padded up (sim/cost/attention.py kernel_heads)
    padded_heads: bool = False
    # the sparse kernel runs every top-k block, valid or not (FlashMLA's sparse kernels before the
    # `topk_length` argument that came with DeepSeek-V4, e.g. vLLM v0.14.1): a query at a context
    # shorter than `topk` still costs `topk` entries of math (the gathers of invalid ones are skipped)
    scans_full_topk: bool = False
    # which layers (0-based) attend this component, where the spec says (gpt-oss's layer_types: sliding on the
    # even layers, full on the odd ones); None: not placed (the cost model needs only the count, `layers`)
    layer_ids: Optional[tuple[int, ...]] = field(default=None, metadata=OMIT_IF_NONE)

    def __post_init__(self):
        positive(self.layers, "layers")
        if self.layer_ids is not None:
            ids = self.layer_ids
            check(len(ids) == self.layers and all(ids[i] < ids[i + 1] for i in range(len(ids) - 1))
                  and min(ids) >= 0, "layer_ids", f"{self.layers} (layers) increasing layer indices >= 0", ids)
        check(0 < self.stored_layers <= self.layers, "stored_layers", f"1..layers ({self.layers})",
              self.stored_layers)
        for name in ("entry_bytes", "qk_dim", "v_dim", "ratio", "indexer_ratio"):
            positive(getattr(self, name), name)
        for name in ("window", "topk", "indexer_heads", "indexer_dim", "indexer_key_bytes", "prefill_qk_dim",
                     "prefill_v_dim"):
            if getattr(self, name) is not None:
                positive(getattr(self, name), name)
        has_idx = [self.indexer_heads, self.indexer_dim, self.indexer_key_bytes]
        check(all(v is None for v in has_idx) or all(v is not None for v in has_idx),
              "indexer_heads", "indexer_heads, indexer_dim and indexer_key_bytes all set or all unset")

    @property
    def has_indexer(self) -> bool:
        return self.indexer_heads is not None


@dataclass(frozen=True)
class AttentionSpec:
    """Attention projections; `kind` selects how the projection GEMMs derive from the dims."""

    kind: Literal["mla", "gqa", "csa"]
    num_heads: int
    kv: tuple[KVComponent, ...]
    head_dim: int = 128  # gqa / csa: q and k width per head
    num_kv_heads: int = 1  # gqa
    q_lora_rank: Optional[int] = None  # mla / csa low-rank query
    kv_lora_rank: Optional[int] = None  # mla latent width
    qk_nope_head_dim: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    o_lora_rank: Optional[int] = None  # csa grouped low-rank output
    o_groups: Optional[int] = None
    # attention sinks (gpt-oss): one learned logit per query head and layer that joins the softmax
    # denominator (exp(sink) added to it; no key, no value); None: none
    sinks: Optional[bool] = field(default=None, metadata=OMIT_IF_NONE)

    def __post_init__(self):
        positive(self.num_heads, "num_heads")
        check(len(self.kv) > 0, "kv", "at least one KV component")
        positive(self.head_dim, "head_dim")
        positive(self.num_kv_heads, "num_kv_heads")
        for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                     "o_lora_rank", "o_groups"):
            if getattr(self, name) is not None:
                positive(getattr(self, name), name)
        if self.kind == "mla":
            for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                check(getattr(self, name) is not None, name, "a positive integer for kind mla")
        if self.kind == "csa":
            for name in ("q_lora_rank", "o_lora_rank", "o_groups"):
                check(getattr(self, name) is not None, name, "a positive integer for kind csa")

    def projections(self, hidden: int) -> tuple[tuple[str, int, int], ...]:
        """Weight GEMMs of one attention layer as (name, in_features, out_features)."""
        h = self.num_heads
        if self.kind == "mla":  # (its dims are set for kind mla: __post_init__)
            nope, rope, v, kv = cast("tuple[int, int, int, int]", (self.qk_nope_head_dim, self.qk_rope_head_dim,
                                                                  self.v_head_dim, self.kv_lora_rank))
            qk = nope + rope
            q: tuple[tuple[str, int, int], ...] = (
                (("q_a", hidden, self.q_lora_rank), ("q_b", self.q_lora_rank, h * qk)) if self.q_lora_rank
                else (("q", hidden, h * qk),))
            return q + (
                ("kv_a", hidden, kv + rope),
                ("kv_b", kv, h * (nope + v)),
                ("o", h * v, hidden),
            ) + self._indexer_projections(hidden)
        if self.kind == "gqa":
            d = self.head_dim
            return (("q", hidden, h * d), ("kv", hidden, 2 * self.num_kv_heads * d), ("o", h * d, hidden))
        # csa (DeepSeek-V4 family): low-rank q, one shared KV head, grouped low-rank output.
        d = self.head_dim
        q_lora, o_lora, groups = cast("tuple[int, int, int]", (self.q_lora_rank, self.o_lora_rank, self.o_groups))
        return (
            ("q_a", hidden, q_lora),
            ("q_b", q_lora, h * d),
            ("kv", hidden, d),
            # grouped: each of o_groups maps its h*d/g slice to o_lora -> h*d x o_lora params in all
            ("o_a", h * d, o_lora),
            ("o_b", groups * o_lora, hidden),
        )

    def _indexer_projections(self, hidden: int) -> tuple[tuple[str, int, int], ...]:
        """The lightning indexer's own projections when every MLA layer has one (DeepSeek-V3.2
        Indexer: wq_b from the q latent to heads x dim, wk from the hidden state to one key,
        weights_proj to one weight per head). V4's indexer sits on its CSA layers only: not here."""
        idx = next((c for c in self.kv if c.has_indexer), None)
        if idx is None or self.q_lora_rank is None:
            return ()
        heads, dim = cast("tuple[int, int]", (idx.indexer_heads, idx.indexer_dim))  # (all set: has_indexer)
        return (("idx_q", self.q_lora_rank, heads * dim), ("idx_k", hidden, dim), ("idx_w", hidden, heads))

    def projection_params(self, hidden: int) -> int:
        return sum(fan_in * fan_out for _, fan_in, fan_out in self.projections(hidden))

    def kv_split(self, tp: int) -> float:
        """How many ways TP splits the KV cache: a GQA rank stores max(1, num_kv_heads // tp) of the
        num_kv_heads heads (vLLM's Attention layer: KV heads split while tp <= num_kv_heads, replicated
        beyond), so min(tp, num_kv_heads) ways; MLA / CSA latents (one shared entry per token) are
        replicated on every TP rank."""
        return float(min(tp, self.num_kv_heads)) if self.kind == "gqa" else 1.0

    def rank_projections(self, hidden: int, tp: int) -> tuple[tuple[str, float, float], ...]:
        """One TP rank's share of each projection, as vLLM shards them: the low-rank down-projections
        of MLA / CSA, CSA's single KV head and the V3.2 indexer's projections are replicated
        (ReplicatedLinear), output projections are row-parallel (split in_features), GQA's KV heads
        are split while tp <= num_kv_heads and replicated beyond, everything else is column-parallel
        (split out_features)."""
        out: list[tuple[str, float, float]] = []
        for name, fan_in, fan_out in self.projections(hidden):
            if tp == 1 or name in ("q_a", "kv_a") or name.startswith("idx_") or (self.kind == "csa" and name == "kv"):
                out.append((name, fan_in, fan_out))
            elif name in ("o", "o_a", "o_b"):
                out.append((name, fan_in / tp, fan_out))
            elif self.kind == "gqa" and name == "kv":
                out.append((name, fan_in, fan_out / min(tp, self.num_kv_heads)))
            else:
                out.append((name, fan_in, fan_out / tp))
        return tuple(out)


@dataclass(frozen=True)
class MoESpec:
    """Routed + shared experts (SwiGLU: gate, up, down)."""

    num_experts: int
    top_k: int
    num_shared_experts: int
    expert_intermediate: int
    scoring: Literal["softmax", "sigmoid", "sqrtsoftplus"]
    num_groups: int = 1  # grouped top-k: pick topk_groups groups first
    topk_groups: int = 1
    routed_scaling: float = 1.0
    # the router GEMM's compute dtype (its weights are FP32 either way): bf16, or fp32 where the engine's model code
    # runs the gate in FP32 on FP32 activations (GLM-4.5/4.6: configs/models/glm-4.5.yaml)
    router_compute: Literal["bf16", "fp32"] = "bf16"

    def __post_init__(self):
        positive(self.num_experts, "num_experts")
        check(0 < self.top_k <= self.num_experts, "top_k", f"1..num_experts ({self.num_experts})",
              self.top_k)
        non_negative(self.num_shared_experts, "num_shared_experts")
        positive(self.expert_intermediate, "expert_intermediate")
        check(self.num_groups >= 1 and self.num_experts % self.num_groups == 0, "num_groups",
              "a divisor of num_experts", self.num_groups)
        positive(self.routed_scaling, "routed_scaling")
        check(0 < self.topk_groups <= self.num_groups, "topk_groups", "1..num_groups", self.topk_groups)

    def expert_params(self, hidden: int) -> int:
        return 3 * hidden * self.expert_intermediate


@dataclass(frozen=True)
class DraftSpec:
    """Speculative decoding: MTP modules or a separate draft model (e.g. DSpark)."""

    kind: Literal["mtp", "draft_model"]
    num_tokens: int  # draft tokens proposed per step
    forward_passes: int  # draft forwards per step (MTP: one per token; block drafter: 1)
    active_params: float  # parameters read per draft forward per token (B-scale floats ok)
    total_params: float  # resident parameters of the drafter (all its stages)
    weight_dtype: Dtype = "fp8"
    # routed experts of one drafter pass (its MoE layer): count, picked per token, parameters of one
    # expert; they are split over the EP group like the target's experts. 0: a dense drafter.
    num_experts: int = 0
    top_k: int = 0
    expert_params: float = 0.0

    def __post_init__(self):
        positive(self.num_tokens, "num_tokens")
        positive(self.forward_passes, "forward_passes")
        positive(self.active_params, "active_params")
        check(self.total_params >= self.active_params, "total_params", ">= active_params",
              self.total_params)
        non_negative(self.num_experts, "num_experts")
        if self.num_experts:
            check(0 < self.top_k <= self.num_experts, "top_k", f"1..num_experts ({self.num_experts})", self.top_k)
            check(self.expert_params > 0, "expert_params", "a positive parameter count with num_experts")
            check(self.active_params > self.top_k * self.expert_params, "active_params",
                  "more than top_k x expert_params (the dense part of a pass)", self.active_params)
            check(self.stage_params >= self.num_experts * self.expert_params, "total_params",
                  "at least forward stages x num_experts x expert_params", self.total_params)

    @property
    def stages(self) -> int:
        """Distinct weight sets: a block drafter's stages each have their own, MTP passes share one."""
        return self.forward_passes if self.kind == "draft_model" else 1

    @property
    def stage_params(self) -> float:
        """Resident parameters of one stage."""
        return self.total_params / self.stages

    @property
    def dense_active_params(self) -> float:
        """Parameters a pass reads whatever the batch (all but its routed experts)."""
        return self.active_params - self.top_k * self.expert_params

    @property
    def dense_stage_params(self) -> float:
        """Resident parameters of one stage besides its routed experts."""
        return self.stage_params - self.num_experts * self.expert_params


@dataclass(frozen=True)
class Dtypes:
    attention_weights: Dtype
    expert_weights: Dtype
    dense_weights: Dtype
    activations: Dtype = "bf16"
    kv_cache: Dtype = "fp8"
    dispatch: Dtype = "fp8"
    combine: Dtype = "bf16"
    compute: Dtype = "fp8"  # dtype dense/attention GEMMs run in (selects the peak FLOP/s)
    expert_compute: Optional[Dtype] = None  # dtype expert GEMMs run in (default: compute)
    # dtype the attention core's math runs in: bf16 (FlashMLA / FlashAttention dequantise an FP8
    # cache in-kernel) unless an FP8 kernel is used (FlashInfer / TRT-LLM FP8 MLA), which needs an
    # FP8 kv_cache
    attention: Optional[Dtype] = None

    def __post_init__(self):
        if self.attention is not None and DTYPE_FAMILY_8.get(self.attention) == "fp8":
            check(DTYPE_FAMILY_8.get(self.kv_cache) == "fp8", "attention",
                  f"bf16 with a {self.kv_cache} KV cache (FP8 attention reads an FP8 kv_cache)", self.attention)

    @property
    def expert_compute_dtype(self) -> str:
        return self.expert_compute or self.compute

    @property
    def attention_compute_dtype(self) -> str:
        return self.attention or "bf16"

    @property
    def activation_bytes(self) -> float:
        """Bytes per element of the activations between ops (inputs and outputs of GEMMs)."""
        return DTYPE_BYTES[self.activations]


@dataclass(frozen=True)
class ModelSpec:
    """A MoE transformer: layer kinds and counts, attention, MoE, dtypes, speculation."""

    name: str
    num_layers: int
    num_dense_layers: int  # leading dense-FFN layers (DeepSeek-V3: first 3)
    hidden_size: int
    vocab_size: int
    attention: AttentionSpec
    moe: MoESpec
    dtypes: Dtypes
    dense_intermediate: int = 0
    prefill_layers: Optional[int] = None  # layers a prefill runs (V4.1: encoder half only)
    extra_weight_bytes: float = 0.0  # e.g. Engram tables; sharded over the EP group
    extra_bytes_per_token: float = 0.0  # e.g. Engram rows gathered per token, over all its layers
    engram_layers: int = 0  # layers that gather those rows (V4.1: 2)
    hc_mult: int = 0  # residual streams of hyper-connections (DeepSeek-V4 mHC: 4); 0 = plain residual
    draft: Optional[DraftSpec] = None
    source: str = ""

    def __post_init__(self):
        for name in ("num_layers", "hidden_size", "vocab_size"):
            positive(getattr(self, name), name)
        check(0 <= self.num_dense_layers <= self.num_layers, "num_dense_layers",
              f"0..num_layers ({self.num_layers})", self.num_dense_layers)
        check(self.num_dense_layers == 0 or self.dense_intermediate > 0, "dense_intermediate",
              "a positive integer when num_dense_layers > 0", self.dense_intermediate)
        if self.prefill_layers is not None:
            check(0 < self.prefill_layers <= self.num_layers, "prefill_layers",
                  f"1..num_layers ({self.num_layers})", self.prefill_layers)
        non_negative(self.extra_weight_bytes, "extra_weight_bytes")
        non_negative(self.extra_bytes_per_token, "extra_bytes_per_token")
        check(0 <= self.engram_layers <= self.num_layers, "engram_layers", f"0..num_layers ({self.num_layers})",
              self.engram_layers)
        check(not self.extra_bytes_per_token or self.engram_layers > 0, "engram_layers",
              "the number of layers that gather extra_bytes_per_token (> 0)", self.engram_layers)
        non_negative(self.hc_mult, "hc_mult")
        for c in self.attention.kv:
            check(c.layer_ids is None or c.layer_ids[-1] < self.num_layers, f"attention.kv.{c.name}.layer_ids",
                  f"layer indices below num_layers ({self.num_layers})", c.layer_ids)

    def kv_on_layer(self, layer: int) -> tuple[KVComponent, ...]:
        """The KV components layer `layer` attends: those placed on it (layer_ids), and every unplaced one."""
        return tuple(c for c in self.attention.kv if c.layer_ids is None or layer in c.layer_ids)

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers

    def layers_in(self, phase: str) -> tuple[int, int]:
        """(dense layers, MoE layers) run by `phase` ('prefill' or 'decode')."""
        if phase == "prefill" and self.prefill_layers is not None:
            dense = min(self.num_dense_layers, self.prefill_layers)
            return dense, self.prefill_layers - dense
        return self.num_dense_layers, self.num_moe_layers

    @property
    def kv_bytes_per_token(self) -> float:
        """Cache bytes per token of context over all layers (windowed components excluded)."""
        return sum(c.entry_bytes * c.stored_layers / c.ratio
                   + (c.indexer_key_bytes or 0.0) * c.stored_layers / c.indexer_ratio
                   for c in self.attention.kv if c.window is None)

    @property
    def kv_bytes_per_sequence_fixed(self) -> float:
        """Cache bytes per sequence that do not grow with context (sliding windows)."""
        return sum(c.entry_bytes * c.stored_layers * c.window / c.ratio
                   for c in self.attention.kv if c.window is not None)

    def param_counts(self) -> dict[str, float]:
        """Parameter counts by part (attention, dense FFN, shared/routed experts, router, embed)."""
        h = self.hidden_size
        moe = self.moe
        return {
            # (+ one sink logit per head and layer where the attention has sinks)
            "attention": (self.attention.projection_params(h) + self.attention.num_heads * bool(self.attention.sinks))
            * self.num_layers,
            "dense_ffn": 3 * h * self.dense_intermediate * self.num_dense_layers,
            "shared_experts": moe.num_shared_experts * moe.expert_params(h) * self.num_moe_layers,
            "routed_experts": moe.num_experts * moe.expert_params(h) * self.num_moe_layers,
            "router": h * moe.num_experts * self.num_moe_layers,
            "embed_head": 2 * h * self.vocab_size,
        }


# Checkpoint formats a model is published in beside its maker's release, by the dtypes such a checkpoint keeps
# (its model card), selected as `<model>:<format>` (load_model). NVIDIA's NVFP4 checkpoints (TensorRT Model
# Optimizer; nvidia/DeepSeek-R1-FP4 card: "only the weights and activations of the linear operators within
# transformer blocks in MoE are quantized") keep attention and dense weights (dense FFN, shared experts) in
# BF16: routed experts NVFP4 with FP4 GEMMs (W4A4), the other GEMMs BF16. KV cache, dispatch and combine stay
# the model's (serving flags, not the checkpoint).
CHECKPOINTS: dict[str, dict[str, Dtype]] = {
    "nvfp4": {"attention_weights": "bf16", "dense_weights": "bf16", "expert_weights": "nvfp4", "compute": "bf16",
              "expert_compute": "fp4"},
}
CHECKPOINT_SEP = ":"


def split_checkpoint(name: str) -> tuple[str, str | None]:
    """(model name, checkpoint format or None) of `<model>[:<format>]`; an unknown format is a SpecError."""
    base, sep, fmt = str(name).rpartition(CHECKPOINT_SEP)
    if not sep or "/" in fmt or "\\" in fmt:  # (a path with a colon, e.g. C:\..., names no format)
        return str(name), None
    check(fmt in CHECKPOINTS, "model", f"<model>{CHECKPOINT_SEP}<format> with a format of: "
          + ", ".join(CHECKPOINTS), str(name))
    return base, fmt


def with_checkpoint(model: ModelSpec, fmt: str) -> ModelSpec:
    """`model` as published in checkpoint format `fmt` (CHECKPOINTS): its dtypes replaced, named `<name>:<fmt>`."""
    dtypes = dataclasses.replace(model.dtypes, **CHECKPOINTS[fmt])
    return dataclasses.replace(model, name=f"{model.name}{CHECKPOINT_SEP}{fmt}", dtypes=dtypes)
