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
