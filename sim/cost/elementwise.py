"""Bandwidth-bound elementwise ops of a layer: RMSNorm, RoPE, activation quantisation, DeepSeek-V4's
hyper-connection mixing (mHC), the MoE routing and permutation, and the sampler.

Each is priced as the bytes it moves over HBM: seconds = bytes / (HBM bandwidth x efficiency) +
the per-kernel fixed time, with the profile's curve for the op class where it has one (measured
profiles: quantize.fp8, mhc.pre / mhc.post, moe.route.<dtype>), else plain streaming. `act` is
the activation element size (ModelSpec.dtypes.activations).
"""
from __future__ import annotations

from functools import partial
from typing import cast

from rackplan.specs import DTYPE_BYTES, HardwareSpec, ModelSpec, Profile

from . import efficiency

SAMPLER_PASSES = 4.0  # fp32 logits passes of a sampler: softmax read + write, top-k/top-p reads (FlashInfer sampling)


def stream_seconds(hw: HardwareSpec, prof: Profile, op_class: str, nbytes, rows=0.0, cols=0.0):
    """Seconds of one bandwidth-bound op of class `op_class` ("quantize.fp8", "mhc.pre") moving `nbytes`."""
    return stream_seconds_at(hw, prof, op_class, cols)(nbytes, rows)


def stream_seconds_at(hw: HardwareSpec, prof: Profile, op_class: str, cols=0.0):
    """`stream_seconds` of an op over `cols` columns as a function of (nbytes, rows): its curve
    found and bound once (a cost model keeps one per op)."""
    return partial(_stream_seconds, hw.hbm_bw, prof.op_fixed_s, efficiency.stream_at(prof, op_class, cols))


def _stream_seconds(hbm_bw: float, fixed_s: float, eff, nbytes, rows=0.0):
    return nbytes / (hbm_bw * eff(nbytes, rows)) + fixed_s


def quantize_bytes(rows, cols, dtype: str = "fp8", act: float = 2.0):
    """Read [rows, cols] activations, write them in `dtype`, plus one FP32 scale per row (the form
    the op-database's scale_matrix_perf rows are fitted with)."""
    return rows * cols * (act + DTYPE_BYTES[dtype]) + rows * 4.0


def mhc_bytes(tokens, hidden: int, hc_mult: int, part: str, act: float = 2.0):
    """pre: read hc_mult streams, write the layer input; post: read the output and the streams,
    write the streams."""
    stream = tokens * hidden * act
    return stream * (hc_mult + 1) if part == "pre" else stream * (2 * hc_mult + 1)


def norm_bytes(model: ModelSpec, tokens: float) -> float:
    """RMSNorms of one layer: two fused residual-add + norms over the hidden state (read x and the
    residual, write both) and MLA / CSA's norms of the low-rank latents (read and write)."""
    att, act = model.attention, model.dtypes.activation_bytes
    latent = (att.q_lora_rank or 0) + (att.kv_lora_rank or 0)
    return tokens * act * (8.0 * model.hidden_size + 2.0 * latent)


def rope_bytes(model: ModelSpec, tokens: float, tp: int) -> float:
    """RoPE of one layer: read and write the rotary part of the rank's query heads and of the key
    (one shared rope key for MLA / CSA, one per KV head for GQA)."""
    att, act = model.attention, model.dtypes.activation_bytes
    if att.kind == "gqa":
        dim, key_heads = att.head_dim, max(att.num_kv_heads / tp, 1.0)
    else:
        dim, key_heads = cast(int, att.qk_rope_head_dim), 1.0  # (set for MLA and CSA: their model specs)
    return 2.0 * tokens * act * dim * (att.num_heads / tp + key_heads)


def route_bytes(tokens_in, hidden, act: float = 2.0):
    """Routing of one MoE layer on a rank: top-k, the permute of the token copies entering the rank
    into expert order and the weighted unpermute, as one stream over their hidden states (the form
    the op-database's moe.route curves are fitted with, calibration/opdb_ops.py: the curve carries
    how many passes the kernels make)."""
    return tokens_in * hidden * act


def sample_bytes(model: ModelSpec, rows: float) -> float:
    """The sampler over `rows` rows of fp32 logits (every position whose token is sampled or verified)."""
    return SAMPLER_PASSES * rows * model.vocab_size * 4.0
