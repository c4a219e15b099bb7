"""Routed-expert cost: which experts receive tokens, how many tokens the busiest rank gets.

Decode is bound by reading the weights of the experts that actually receive tokens: with T
global tokens each picking k of E experts, an expert is hit with probability 1 - (1 - k/E)^T.
"""
from __future__ import annotations

import math

from rackplan.specs import DTYPE_BYTES, Layout, ModelSpec


def physical_experts_per_rank(model: ModelSpec, layout: Layout) -> float:
    """Expert slots per EP rank (logical experts + EPLB redundant copies, spread evenly)."""
    return (model.moe.num_experts + layout.eplb.redundant_experts) / layout.ep_size


def tile_load(tokens_in: float, top_k: int, local_experts: float) -> float:
    """Rows per local expert as the MoE kernel's tile heuristic averages them (efficiency.experts' load):
    every token entering the rank (`tokens_in`: the step's tokens without an all-to-all, under TP too;
    the copies a dispatch delivers under EP) times top-k over the rank's `local_experts` slots
    (FlashInfer computeSelectedTileN's avg_tokens_per_expert = num_tokens x top_k / num_local_experts;
    not the pairs a local expert receives)."""
    return tokens_in * top_k / local_experts


def hit_probability(model: ModelSpec, tokens_global: float) -> float:
    """Probability that one logical expert receives at least one of `tokens_global` tokens."""
    k, e = model.moe.top_k, model.moe.num_experts
    return 1.0 - (1.0 - k / e) ** tokens_global


def distinct_experts_per_rank(model: ModelSpec, layout: Layout, tokens_global: float) -> float:
    """Expected expert slots on one rank that receive tokens (their weights are read)."""
    return physical_experts_per_rank(model, layout) * hit_probability(model, tokens_global)


def distinct_experts_busiest(model: ModelSpec, layout: Layout, tokens_global: float) -> float:
    """Expert slots the rank that reads the most of them reads in a step: the EP step waits for it.
    A rank's n slots are each hit with probability p (hit_probability), so its count has mean n p and
    variance n p (1 - p); the largest of ep such counts is about mean + sqrt(2 ln ep) x sd (the
    Gaussian order statistic random_routing_factor uses), at most n. Small decode batches, where
    the weights read are the step, wait for it; once every slot is hit (p = 1) it is n."""
    n = physical_experts_per_rank(model, layout)
    p = hit_probability(model, tokens_global)
    mean = n * p
    ep = layout.ep_size
    if ep <= 1 or p >= 1.0:
        return mean
    return min(n, mean + math.sqrt(2.0 * math.log(ep)) * math.sqrt(n * p * (1.0 - p)))


def expert_bytes(model: ModelSpec) -> float:
    """Bytes of one routed expert's weights (gate, up, down)."""
    return model.moe.expert_params(model.hidden_size) * DTYPE_BYTES[model.dtypes.expert_weights]


def _log_comb(n: float, r: float) -> float:
    """log C(n, r) for real n >= 0 (Gamma form); -inf when n < r (no way to choose)."""
    if n < r:
        return -math.inf
    return math.lgamma(n + 1.0) - math.lgamma(r + 1.0) - math.lgamma(n - r + 1.0)


def _miss(pool: float, held: float, picks: float) -> float:
    """Probability that `picks` distinct draws from `pool` experts avoid the `held` ones."""
    return math.exp(_log_comb(pool - held, picks) - _log_comb(pool, picks)) if picks > 0 else 1.0


def holder_hit_probability(model: ModelSpec, share: float) -> float:
    """Probability that a rank or node holding a contiguous `share` of the logical experts receives
    at least one of one token's top-k picks (the copies an all-to-all sends it).

    Group-limited routing (DeepSeek-V3: 8 groups of 32, top-4 groups, config.json) picks
    `topk_groups` of `num_groups` groups uniformly and the k experts inside them; a selected group
    holds one of the token's strongest experts (V3 scores a group by its top-2 experts), so each
    selected group gets one pick and the other k - g fall uniformly over the selected groups.
    Without a group limit (topk_groups == num_groups) the k picks are uniform over all experts.
    Checked against sampled top-k of random scores (tests/unit/test_golden_costs.py)."""
    moe = model.moe
    e, k, groups, g = float(moe.num_experts), moe.top_k, float(moe.num_groups), moe.topk_groups
    if g >= groups:
        return 1.0 - _miss(e, share * e, k)
    covered = share * groups  # groups' worth of experts the holder has
    if covered >= 1.0:
        return 1.0 - _miss(groups, covered, g)
    per_group = e / groups
    held = covered * per_group
    miss_in_group = (1.0 - covered) * _miss(g * per_group - 1.0, held, k - g)
    return g / groups * (1.0 - miss_in_group)


def expert_work(model: ModelSpec, busiest: float, distinct: float,
                moe_tp: int = 1) -> tuple[float, float, float, float, float]:
    """FLOPs, bytes and efficiency shape (rows per expert, n, k) of the routed-expert GEMMs on an EP
    rank holding `busiest` token-expert pairs over `distinct` experts that received tokens: per
    expert gate/up [rows, h] x [h, 2 inter] and down [rows, inter] x [inter, h], each expert's
    weights read once, activations in and out in the model's activation dtype (what step.py's
    moe.experts op prices); `moe_tp` shards every expert's intermediate dimension."""
    h, inter = model.hidden_size, model.moe.expert_intermediate / moe_tp
    flops = 2.0 * busiest * 3 * h * inter
    nbytes = distinct * expert_bytes(model) / moe_tp + busiest * (2 * h + 3 * inter) * model.dtypes.activation_bytes
    return flops, nbytes, busiest / distinct, 2.0 * inter, float(h)
