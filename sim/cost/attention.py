"""Attention core cost (the part that reads the KV cache), per layer kind and phase.

Decode: each sequence's query reads what its KV components let it attend to: all stored entries
(MLA: the 576-byte latent; GQA: K and V), a sliding window, or a sparse top-k chosen by an
indexer that itself scores every stored key. Prefill: compute over (new x attended) pairs.
Functions take numpy arrays of per-rank (or per-sequence) batch and context and return arrays.
"""
from __future__ import annotations

import numpy as np

from rackplan.specs import KVComponent, ModelSpec

from . import efficiency
from .roofline import price


def attended(comp: KVComponent, ctx):
    """Entries one query at context position `ctx` reads from `comp` (array-friendly)."""
    span = np.minimum(ctx, comp.window) if comp.window is not None else ctx
    stored = np.divide(span, comp.ratio)
    return np.minimum(stored, comp.topk) if comp.topk is not None else stored


def indexed(comp: KVComponent, ctx):
    """Indexer keys one query scores (0 without an indexer)."""
    return np.divide(ctx, comp.indexer_ratio) if comp.has_indexer else np.zeros_like(np.asarray(ctx, float))


def _heads_per_rank(model: ModelSpec, tp: int) -> float:
    return model.attention.num_heads / tp


def _kv_split(model: ModelSpec, tp: int) -> float:
    """How many ways TP splits the cache a rank reads (MLA / shared-KV latents are replicated)."""
    att = model.attention
    return float(min(tp, att.num_kv_heads)) if att.kind == "gqa" else 1.0


def decode_component(model, comp: KVComponent, batch, ctx_sum, queries_per_seq: float, tp: int,
                     layers: int, hw, prof):
    """Seconds, flops, bytes of one component over `layers` layers for a decode step on each rank.

    batch, ctx_sum: arrays over ranks; contexts are taken at their per-rank mean.
    """
    batch = np.asarray(batch, float)
    avg = np.divide(ctx_sum, np.maximum(batch, 1.0))
    att = attended(comp, avg)
    idx = indexed(comp, avg)
    heads = _heads_per_rank(model, tp)
    flops = 2.0 * batch * queries_per_seq * heads * att * (comp.qk_dim + comp.v_dim)
    nbytes = batch * att * comp.entry_bytes / _kv_split(model, tp)
    if comp.has_indexer:
        flops = flops + 2.0 * batch * queries_per_seq * comp.indexer_heads * comp.indexer_dim * idx
        nbytes = nbytes + batch * idx * comp.indexer_key_bytes
    sec = price(flops, nbytes, hw.flops_for("bf16"),
                efficiency.attention(prof, "decode", model.attention.kind, "bf16", batch, avg, flops), hw, prof)
    sec = np.where(batch > 0, sec, 0.0)
    return sec * layers, flops * layers, nbytes * layers


def prefill_component(model, comp: KVComponent, new_tokens, prefix, tp: int, layers: int, hw, prof):
    """Seconds, flops, bytes of one component over `layers` layers for a prefill batch on one rank.

    new_tokens, prefix: arrays over the sequences of the batch (prefix = cached + earlier chunks).
    Each query is priced at the batch's mean query position p + n/2 (exact for dense causal).
    """
    n = np.asarray(new_tokens, float)
    p = np.asarray(prefix, float)
    mid = p + n / 2.0
    pairs = float(np.sum(n * attended(comp, mid)))
    idx_pairs = float(np.sum(n * indexed(comp, mid)))
    heads = _heads_per_rank(model, tp)
    qk = comp.prefill_qk_dim or comp.qk_dim
    v = comp.prefill_v_dim or comp.v_dim
    flops = 2.0 * heads * pairs * (qk + v)
    nbytes = float(np.sum(attended(comp, p + n) + n)) * comp.entry_bytes / _kv_split(model, tp)
    if comp.has_indexer:
        flops += 2.0 * comp.indexer_heads * comp.indexer_dim * idx_pairs
        nbytes += float(np.sum(indexed(comp, p + n))) * comp.indexer_key_bytes
    if pairs <= 0:
        return 0.0, 0.0, 0.0
    eff = efficiency.attention(prof, "prefill", model.attention.kind, "bf16", float(len(n)), float(np.max(p + n)),
                               flops)
    sec = float(price(flops, nbytes, hw.flops_for("bf16"), eff, hw, prof))
    return sec * layers, flops * layers, nbytes * layers


def phase_layers(model: ModelSpec, comp: KVComponent, phase: str) -> int:
    """Layers attending over `comp` in `phase` (V4.1 prefill runs only its encoder half)."""
    if phase == "prefill" and model.prefill_layers is not None:
        return max(1, round(comp.layers * model.prefill_layers / model.num_layers))
    return comp.layers
