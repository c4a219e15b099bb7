"""Attention core cost (the part that reads the KV cache), per layer kind and phase.

Decode: each sequence's query reads what its KV components let it attend to: all stored entries
(MLA: the 576-byte latent; GQA: K and V), a sliding window, or a sparse top-k chosen by an
indexer that itself scores every stored key. Prefill: compute over (new x attended) pairs.
Functions take one rank's work as floats and return floats. The math runs at the peak of the
model's attention dtype (BF16 unless an FP8 attention kernel is named, ModelSpec.dtypes.attention).
Kernels that compute in fixed tiles are priced for what they compute, not only for what is valid:
FlashMLA's sparse kernels pad a rank's query heads to whole tiles (`kernel_heads`), and before
FlashMLA's `topk_length` they ran every top-k block of a query (`computed`, comp.scans_full_topk).

Sliding windows (gpt-oss's sliding layers, V4's window component): a query at context c reads and
computes over min(c, window) keys (`attended`), in decode and in prefill. No op-database table has a
window argument (their rows are full attention), so a windowed component is priced by its kind's
full-attention curve at its windowed work: decode at context min(c, window) (`curve_context`: the
kernel runs as a full-attention decode over that many keys per sequence), prefill at the prompt
length (the kernel's grid of query tiles) with the FLOPs of the windowed pairs. V4 decodes its window
inside the call of its compressed components (decode_layers), which keeps the call's context.
Attention sinks (gpt-oss: AttentionSpec.sinks) add one logit per query head to the softmax, with no
key and no value: 0 matmul FLOPs (the only FLOPs priced here, 2 x heads x keys x (qk + v) per query)
and one more exp and add per query head, a share 1 / keys of the softmax's elementwise work; not priced.
"""
from __future__ import annotations

import math

from rackplan.specs import KVComponent, ModelSpec

from . import efficiency
from .roofline import price


def attended(comp: KVComponent, ctx: float) -> float:
    """Entries one query at context position `ctx` reads from `comp`."""
    window, topk = comp.window, comp.topk  # (min(a, b) written out: per chunk of every priced rank)
    stored = (ctx if window is None or ctx <= window else window) / comp.ratio
    return stored if topk is None or stored <= topk else topk


def curve_context(comp: KVComponent, ctx: float) -> float:
    """The context a decode efficiency curve is read at for `comp`: min(ctx, window) for a sliding window (the
    keys per sequence the kernel reads, as a full-attention decode at that context), else ctx."""
    window = comp.window
    return ctx if window is None or ctx <= window else float(window)


def computed(comp: KVComponent, ctx: float) -> float:
    """Entries whose math the kernel runs for one query at `ctx`: those it reads, or the whole
    top-k width when the kernel scans it regardless (comp.scans_full_topk)."""
    return float(comp.topk) if comp.scans_full_topk and comp.topk is not None else attended(comp, ctx)


def indexed(comp: KVComponent, ctx: float) -> float:
    """Indexer keys one query scores (0 without an indexer)."""
    return ctx / comp.indexer_ratio if comp.has_indexer else 0.0


# FlashMLA's FP8 sparse decode kernel takes h_q = 64 or 128 query heads (vLLM flashmla_sparse.py
# pads a rank's heads up to 64 when TP leaves fewer)
SPARSE_DECODE_HEAD_TILE = 64

# The most FlashMLA's own README ("Performance") reports for its sparse kernels, as a share of the
# test GPU's dense BF16 peak (H800 SXM5 989 TFLOP/s, B200 2,250: configs/hardware), keyed by kernel
# and architecture (Blackwell = the 128-head prefill tile, hw.sparse_prefill_head_tile):
#   decode (FP8 cache, BF16 math): "410 TFLOPS ... on H800 SXM5", "up to 350 TFlops on B200 (which
#     is not really optimized yet)";  prefill (BF16): "up to 640 TFlops ... on H800 SXM5, and ... up
#     to 1450 TFlops on B200".
# No curve may price the kernel's math faster than that (`sparse_floor`): the profiles' attention
# curves were fitted on dense MLA kernels (trtllm-gen / FlashInfer MLA decode reach far more on SM100).
SPARSE_KERNEL_CEILING = {
    ("decode", False): 410.0 / 989.0, ("decode", True): 350.0 / 2250.0,
    ("prefill", False): 640.0 / 989.0, ("prefill", True): 1450.0 / 2250.0,
}


def _heads_per_rank(model: ModelSpec, tp: int) -> float:
    return model.attention.num_heads / tp


def _runs_prefill_kernel(model: ModelSpec, phase: str) -> bool:
    """Whether a FlashMLA sparse component runs on the BF16 prefill kernel in `phase`: prefill always,
    decode too with a BF16 cache (vLLM flashmla_sparse.py: `forward` calls `_forward_bf16_kv` ->
    `flash_mla_sparse_prefill` unless the cache is fp8_ds_mla)."""
    return phase == "prefill" or model.dtypes.kv_cache == "bf16"


def sparse_floor(model: ModelSpec, comp: KVComponent, phase: str, hw) -> float:
    """Seconds per FLOP of a FlashMLA sparse component's attention math at the kernel's published
    best (SPARSE_KERNEL_CEILING x the hardware's BF16 peak); 0 for a component not on those kernels."""
    if not comp.padded_heads:
        return 0.0
    kernel = "prefill" if _runs_prefill_kernel(model, phase) else "decode"
    blackwell = hw.sparse_prefill_head_tile == 128  # (the Blackwell FlashMLA tile, HardwareSpec)
    return 1.0 / (hw.flops_for("bf16") * SPARSE_KERNEL_CEILING[(kernel, blackwell)])


def kernel_heads(model: ModelSpec, comp: KVComponent, tp: int, phase: str, hw) -> float:
    """Query heads per rank the kernel computes: the rank's heads, padded up to whole tiles when
    the component runs on FlashMLA's sparse kernels (prefill: hw.sparse_prefill_head_tile, 128 on
    Blackwell; decode: 64), e.g. V3.2 at TP4 on Blackwell: 32 heads computed as 128 in prefill.
    The FP8 decode kernel reads only vLLM's FP8 cache (fp8_ds_mla): with a BF16 cache every token,
    decode included, runs on the BF16 prefill kernel and its tile (vLLM flashmla_sparse.py:
    `forward` calls `_forward_bf16_kv` -> `flash_mla_sparse_prefill` unless the cache is fp8_ds_mla)."""
    heads = _heads_per_rank(model, tp)
    if not comp.padded_heads:
        return heads
    tile = hw.sparse_prefill_head_tile if _runs_prefill_kernel(model, phase) else SPARSE_DECODE_HEAD_TILE
    return float(math.ceil(heads / tile) * tile)


def dense_backend(comp: KVComponent, backend: str | None) -> str | None:
    """The engine's dense kernel (efficiency.attention_backend in decode, prefill_backend in prefill) for this
    component: None for a sparse one (V3.2's indexer, FlashMLA's sparse kernels: their own ceilings, `sparse_floor`)."""
    return None if comp.padded_heads or comp.has_indexer else backend


def prefill_copies(model: ModelSpec, comp: KVComponent, heads: float) -> tuple[float, float]:
    """(bytes per key, bytes per new token) one layer's dense MLA prefill copies on a rank with `heads` query heads,
    as vLLM v0.14.1 runs them beside FlashInfer's CUTLASS FMHA (efficiency.ENGINE_PREFILL_BACKEND; the wheel's
    v1/attention/backends/mla/common.py `_forward_prefill`): K materialised per head (`_concat_k_nope_k_pe`: read
    k_nope [T, H, nope] and k_pe [T, 1, rope], write K [T, H, nope + rope]) and the output copied into the layer's
    (`output.copy_`: read and write [T, H, v]), in the activation dtype. DeepSeek-V3 at 64 heads, BF16:
    64 x 128 x 2 + 64 x 2 + 64 x 192 x 2 = 41,088 B a key, 2 x 64 x 128 x 2 = 32,768 B a token."""
    rope = model.attention.qk_rope_head_dim or 0
    qk, v = comp.prefill_qk_dim or comp.qk_dim, comp.prefill_v_dim or comp.v_dim
    b = model.dtypes.activation_bytes
    return heads * (qk - rope) * b + rope * b + heads * qk * b, 2.0 * heads * v * b


def _kv_split(model: ModelSpec, tp: int) -> float:
    """How many ways TP splits the cache a rank reads (MLA / shared-KV latents are replicated)."""
    return model.attention.kv_split(tp)


def decode_component(model, comp: KVComponent, batch: float, ctx_sum: float, queries_per_seq: float, tp: int,
                     layers: int, hw, prof, dtype: str = "bf16") -> tuple[float, float, float]:
    """Seconds, flops, bytes of one component over `layers` layers for a decode step on one rank.

    batch, ctx_sum: the rank's running sequences and the sum of their contexts (taken at the mean);
    dtype: the attention math's dtype (ModelSpec.dtypes.attention_compute_dtype: its peak FLOP/s).
    """
    return Component(model, comp, tp, hw, prof, dtype).decode(batch, ctx_sum, queries_per_seq, layers)


def prefill_component(model, comp: KVComponent, chunks, tp: int, layers: int, hw, prof,
                      dtype: str = "bf16") -> tuple[float, float, float]:
    """Seconds, flops, bytes of one component over `layers` layers for a prefill batch on one rank.

    chunks: (count, new tokens, prefix) groups: `count` sequences of `new` tokens after `prefix`
    tokens (cached + earlier chunks). Each query is priced at its chunk's mean query position
    p + n/2 (exact for dense causal).
    """
    return Component(model, comp, tp, hw, prof, dtype).prefill(chunks, layers)


class Component:
    """The attention core of one KV component on one layout's rank: what decode_component and
    prefill_component price, with the kernel's heads, dims, peak and efficiency curves found once
    (a layer pricer keeps one per component)."""

    __slots__ = ("comp", "hw", "prof", "peak", "kv_split", "heads", "prefill_heads", "two_prefill_heads", "qkv",
                 "prefill_qkv", "indexer", "two_indexer", "decode_eff", "prefill_eff", "decode_floor", "prefill_floor",
                 "copies")

    def __init__(self, model: ModelSpec, comp: KVComponent, tp: int, hw, prof, dtype: str = "bf16",
                 backend: str | None = None, prefill_path: str | None = None):
        """`backend`: the engine's decode kernel (efficiency.attention_backend); `prefill_path`: its prefill path
        where it adds copies (efficiency.prefill_backend), both None for the profile's curves alone."""
        self.comp, self.hw, self.prof = comp, hw, prof
        self.peak = hw.flops_for(dtype)
        self.kv_split = _kv_split(model, tp)
        self.heads = kernel_heads(model, comp, tp, "decode", hw)
        self.prefill_heads = kernel_heads(model, comp, tp, "prefill", hw)
        self.two_prefill_heads = 2.0 * self.prefill_heads
        self.qkv = comp.qk_dim + comp.v_dim
        self.prefill_qkv = (comp.prefill_qk_dim or comp.qk_dim) + (comp.prefill_v_dim or comp.v_dim)
        self.indexer = comp.has_indexer
        self.two_indexer = 2.0 * comp.indexer_heads * comp.indexer_dim if comp.indexer_heads and comp.indexer_dim \
            else 0.0  # (has_indexer: the indexer's fields are all set or all unset, KVComponent)
        self.decode_eff = efficiency.attention_at(prof, "decode", model.attention.kind, dtype,
                                                  dense_backend(comp, backend))
        self.prefill_eff = efficiency.attention_at(prof, "prefill", model.attention.kind, dtype)
        self.decode_floor = sparse_floor(model, comp, "decode", hw)  # s / FLOP of the sparse math (0: none)
        self.prefill_floor = sparse_floor(model, comp, "prefill", hw)
        self.copies = prefill_copies(model, comp, self.prefill_heads) if dense_backend(comp, prefill_path) else None

    def decode(self, batch: float, ctx_sum: float, queries_per_seq: float, layers: int) -> tuple[float, float, float]:
        """decode_component of this component."""
        if batch <= 0:
            return 0.0, 0.0, 0.0
        avg = ctx_sum / max(batch, 1.0)
        flops, nbytes = self.decode_work(batch, avg, queries_per_seq)
        eff = self.decode_eff(batch, curve_context(self.comp, avg), flops, self.heads)
        sec = price(flops, nbytes, self.peak, eff, self.hw, self.prof)
        if self.decode_floor:  # the sparse kernel's math at its published best, at the least
            floor = self.core_flops(batch, avg, queries_per_seq) * self.decode_floor + self.prof.op_fixed_s
            sec = floor if floor > sec else sec
        return sec * layers, flops * layers, nbytes * layers

    def core_flops(self, batch: float, avg: float, queries_per_seq: float) -> float:
        """FLOPs of one layer's attention math over this component in decode (the indexer's apart)."""
        return 2.0 * batch * queries_per_seq * self.heads * computed(self.comp, avg) * self.qkv

    def decode_work(self, batch: float, avg: float, queries_per_seq: float) -> tuple[float, float]:
        """(FLOPs, bytes) of one layer's decode over this component: `batch` sequences at mean context `avg`."""
        comp = self.comp
        flops = self.core_flops(batch, avg, queries_per_seq)
        nbytes = batch * attended(comp, avg) * comp.entry_bytes / self.kv_split
        if self.indexer:
            idx = indexed(comp, avg)
            assert comp.indexer_heads and comp.indexer_dim and comp.indexer_key_bytes  # (has_indexer: all set)
            flops = flops + 2.0 * batch * queries_per_seq * comp.indexer_heads * comp.indexer_dim * idx
            nbytes = nbytes + batch * idx * comp.indexer_key_bytes
        return flops, nbytes

    def prefill(self, chunks, layers: int) -> tuple[float, float, float]:
        """prefill_component of this component."""
        comp, has_indexer = self.comp, self.indexer
        pairs = idx_pairs = read = idx_read = seqs = longest = keys = tokens = 0.0
        for count, n, p in chunks:
            mid = p + n / 2.0
            a = attended(comp, p + n)
            keys += count * a
            tokens += count * n
            pairs += count * n * computed(comp, mid)
            read += count * (a + n)
            if has_indexer:
                idx_pairs += count * n * indexed(comp, mid)
                idx_read += count * indexed(comp, p + n)
            seqs += count
            if count and p + n > longest:  # (max(longest, p + n), without the call)
                longest = p + n
        if pairs <= 0:
            return 0.0, 0.0, 0.0
        core = flops = self.two_prefill_heads * pairs * self.prefill_qkv
        nbytes = read * comp.entry_bytes / self.kv_split
        if has_indexer:
            flops += self.two_indexer * idx_pairs
            assert comp.indexer_key_bytes  # (has_indexer: set)
            nbytes += idx_read * comp.indexer_key_bytes
        eff = self.prefill_eff(seqs, longest, flops, self.prefill_heads)
        sec = price(flops, nbytes, self.peak, eff, self.hw, self.prof)
        if self.prefill_floor:  # the sparse kernel's math at its published best, at the least
            floor = core * self.prefill_floor + self.prof.op_fixed_s
            sec = floor if floor > sec else sec
        if self.copies is not None:  # the engine's K materialisation and output copy: two streaming kernels
            k_bytes, out_bytes = keys * self.copies[0], tokens * self.copies[1]
            sec += price(0.0, k_bytes, self.peak, 1.0, self.hw, self.prof) + \
                price(0.0, out_bytes, self.peak, 1.0, self.hw, self.prof)
            nbytes += k_bytes + out_bytes
        return sec * layers, flops * layers, nbytes * layers


# Kinds whose decode runs one attention kernel per layer over all the KV components the layer attends:
# DeepSeek-V4 (csa) decodes with FlashMLA's sparse kernel, which takes the sliding window as extra tokens of
# the same call as the compressed cache (deepseek-ai/FlashMLA flash_mla/flash_mla_interface.py,
# flash_mla_with_kvcache: `extra_k_cache`, `extra_indices_in_kvcache`, "will attend to these extra tokens in
# addition to those in k_cache"), so a step pays one kernel's fixed time per layer, not one per component.
ONE_KERNEL_DECODE = ("csa",)


def decode_layers(parts, batch: float, ctx_sum: float, queries_per_seq: float) -> tuple[float, float, float]:
    """Seconds, flops, bytes of a decode step's attention core over `parts` ((Component, layers) of one layer
    group) when each layer runs one kernel over every component it attends (ONE_KERNEL_DECODE).

    The component attended on the most layers (V4's sliding window, on every layer) rides in the call of each
    other component (layers each: V4-Flash's csa 21 and hca 20 layers, V4.1's shared latent 40); it runs alone
    on the layers left (V4-Flash: 43 - 21 - 20 = 2). A fused call is priced as one kernel: its FLOPs and bytes
    added, one efficiency (one fixed time) at their sum, the larger padded head count of the two."""
    if batch <= 0 or not parts:
        return 0.0, 0.0, 0.0
    avg = ctx_sum / max(batch, 1.0)
    base, base_layers = max(parts, key=lambda p: p[1])
    b_fl, b_by = base.decode_work(batch, avg, queries_per_seq)
    sec = fl = by = 0.0
    alone = base_layers
    for comp, layers in parts:
        if comp is base:
            continue
        c_fl, c_by = comp.decode_work(batch, avg, queries_per_seq)
        fused = min(layers, alone)  # layers where both run in one call (the rest: the component alone)
        for n, f, b in ((fused, b_fl + c_fl, b_by + c_by), (layers - fused, c_fl, c_by)):
            if n > 0:
                heads = max(base.heads, comp.heads) if n == fused else comp.heads
                sec += n * price(f, b, comp.peak, comp.decode_eff(batch, avg, f, heads), comp.hw, comp.prof)
                fl, by = fl + n * f, by + n * b
        alone -= fused
    if alone > 0:
        sec += alone * price(b_fl, b_by, base.peak, base.decode_eff(batch, avg, b_fl, base.heads), base.hw, base.prof)
        fl, by = fl + alone * b_fl, by + alone * b_by
    return sec, fl, by
