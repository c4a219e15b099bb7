"""Routed-expert cost: which experts receive tokens, how many tokens the busiest rank gets.

Decode is bound by reading the weights of the experts that actually receive tokens: with T
global tokens each picking k of E experts, an expert is hit with probability 1 - (1 - k/E)^T.
"""
from __future__ import annotations

from rackplan.specs import DTYPE_BYTES, Layout, ModelSpec


def physical_experts_per_rank(model: ModelSpec, layout: Layout) -> float:
    """Expert slots per EP rank (logical experts + EPLB redundant copies, spread evenly)."""
    return (model.moe.num_experts + layout.eplb.redundant_experts) / layout.ep_size


def hit_probability(model: ModelSpec, tokens_global: float) -> float:
    """Probability that one logical expert receives at least one of `tokens_global` tokens."""
    k, e = model.moe.top_k, model.moe.num_experts
    return 1.0 - (1.0 - k / e) ** tokens_global


def distinct_experts_per_rank(model: ModelSpec, layout: Layout, tokens_global: float) -> float:
    """Expected expert slots on one rank that receive tokens (their weights are read)."""
    return physical_experts_per_rank(model, layout) * hit_probability(model, tokens_global)


def expert_bytes(model: ModelSpec) -> float:
    """Bytes of one routed expert's weights (gate, up, down)."""
    return model.moe.expert_params(model.hidden_size) * DTYPE_BYTES[model.dtypes.expert_weights]


def expert_work(model: ModelSpec, busiest: float, distinct: float) -> tuple[float, float, float, float, float]:
    """FLOPs, bytes and efficiency shape (rows per expert, n, k) of the routed-expert GEMMs on an EP
    rank holding `busiest` token-expert pairs over `distinct` experts that received tokens: per
    expert gate/up [rows, h] x [h, 2 inter] and down [rows, inter] x [inter, h], each expert's
    weights read once, activations in and out in BF16 (what step.py's moe.experts op prices)."""
    h, inter = model.hidden_size, model.moe.expert_intermediate
    flops = 2.0 * busiest * 3 * h * inter
    nbytes = distinct * expert_bytes(model) + busiest * (2 * h + 3 * inter) * 2.0
    return flops, nbytes, busiest / distinct, 2.0 * inter, float(h)
