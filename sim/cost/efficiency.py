"""Kernel efficiency over shape: the fraction of a datasheet peak one op reaches.

These functions are the only readers of a profile's efficiency parameters, so a profile form that
holds more (curves per dtype and op class, fitted from measured per-op tables) changes this file
and the Profile, not the cost model. Arguments are floats or numpy arrays of the same shape.
"""
from __future__ import annotations

from rackplan.specs import Profile


def gemm(prof: Profile, dtype: str, m, n: float = 0.0, k: float = 0.0):
    """Weight GEMM [m, k] x [k, n] in `dtype`: saturating in the row count m (skinny decode GEMMs
    are weight-read bound)."""
    return prof.gemm_eff_max * m / (m + prof.gemm_m_half)


def experts(prof: Profile, dtype: str, tokens_per_expert, n: float = 0.0, k: float = 0.0):
    """Routed-expert grouped GEMM: rows per expert play the part of m."""
    return gemm(prof, dtype, tokens_per_expert, n, k)


def attention(prof: Profile, phase: str, kind: str, dtype: str, batch=1.0, ctx=1.0):
    """Attention core (prefill: FlashAttention/FlashMLA-style; decode: paged/absorbed reads)."""
    return prof.attn_eff


def memory(prof: Profile, nbytes):
    """Streaming bandwidth: small reads are latency bound."""
    return prof.mem_eff * nbytes / (nbytes + prof.mem_bytes_half)


def stream(prof: Profile, op_class: str, nbytes, rows=0.0, cols=0.0):
    """Bandwidth-bound elementwise op (norm, RoPE, activation quantize, mHC, routing, sampler) moving
    `nbytes` over a [rows, cols] tensor: plain streaming `memory` until a profile holds a curve for it."""
    return memory(prof, nbytes)


ALLREDUCE_EFF_MAX = 0.7  # NCCL / vLLM custom all-reduce bus bandwidth at large messages, ~70% of NVLink (typical)
ALLREDUCE_BYTES_HALF = 1.0e6  # messages under ~1 MB are latency bound (typical)


def allreduce(prof: Profile, num_gpus: int, nbytes):
    """All-reduce of `nbytes` over `num_gpus` GPUs of one NVLink domain: fraction of the scale-up
    bandwidth (datasheet form until a profile holds measured curves)."""
    return ALLREDUCE_EFF_MAX * nbytes / (nbytes + ALLREDUCE_BYTES_HALF)
