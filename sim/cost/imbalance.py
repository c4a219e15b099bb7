"""Expert-load imbalance: the per-step max-over-ranks factor that an EP step waits on.

factor = E[max over EP ranks of the rank's token-expert load] / mean, where a step's per-expert
counts are a multinomial draw of the batch's T * top_k choices from a power-law popularity
(sim/routing.py) and the placement is contiguous (policy "none") or EPLB's (sim/eplb) computed
from that popularity. The simulator asks once per step, so each (ep, redundant, policy, skew,
top_k, E, ...) gets a table over a log-spaced grid of global tokens, built once from seeded
vectorised sampling, and a call is a cached lookup plus a linear interpolation in log2(T).
`random_routing_factor` is the closed form for uniform routing, kept as a cross-check.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from functools import lru_cache

import numpy as np

from ..eplb.model import expected_factor, placement_for
from ..routing import layer_popularity, sample_counts
from ..specs import SpecError

GRID_LOG2 = tuple(float(x) for x in np.arange(0.0, 21.5, 0.5))  # tokens_global from 1 to 2M, half-octave steps
NUM_LAYERS = 16  # sampled layers, each with its own permutation of the popularity
SAMPLES_PER_LAYER = 32  # multinomial draws per layer and grid point
SEED = 0


def random_routing_factor(tokens_global: float, top_k: int, ep: int) -> float:
    """Closed form for uniform routing: per-rank loads ~ Binomial(T*k, 1/ep), and the max of `ep`
    of them is about mean + sigma * sqrt(2 ln ep)."""
    if ep <= 1 or tokens_global <= 0:
        return 1.0
    mean = tokens_global * top_k / ep
    sigma = math.sqrt(mean * (1.0 - 1.0 / ep))
    return 1.0 + math.sqrt(2.0 * math.log(ep)) * sigma / mean


def imbalance_factor(tokens_global: float, top_k: int, num_experts: int, ep: int,
                     skew: float = 0.0, redundant_experts: int = 0, policy: str = "none",
                     fixed: float | None = None, gpus_per_node: int = 8, num_groups: int = 1) -> float:
    """Max-over-ranks / mean expert load for one step (a fixed factor wins when given).

    gpus_per_node and num_groups matter only to the hierarchical policy (hardware and model
    expert groups); with num_groups % nodes != 0 it falls back to the global policy.
    """
    if fixed is not None:
        return fixed
    if ep <= 1 or tokens_global <= 0:
        return 1.0
    if policy == "none":
        redundant_experts, gpus_per_node, num_groups = 0, 8, 1
    xs, ys = factor_table(ep, redundant_experts, policy, float(skew), top_k, num_experts,
                          gpus_per_node, num_groups)
    x = math.log2(tokens_global) if tokens_global > 1.0 else 0.0
    i = bisect_right(xs, x)
    if i >= len(xs):
        return ys[-1]
    if i == 0:
        return ys[0]
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + t * (ys[i] - ys[i - 1])


@lru_cache(maxsize=None)
def factor_table(ep: int, redundant_experts: int, policy: str, skew: float, top_k: int,
                 num_experts: int, gpus_per_node: int = 8, num_groups: int = 1) -> tuple[tuple, tuple]:
    """(log2 tokens_global grid, factor at each point): sampled once per configuration."""
    if policy not in ("none", "global", "hierarchical"):
        raise SpecError("eplb", "policy", "one of 'hierarchical', 'global', 'none'", policy)
    slots = num_experts + redundant_experts
    if policy != "none" and slots % ep:
        raise SpecError("eplb", "redundant_experts",
                        f"num_experts + redundant_experts ({slots}) divisible by ep ({ep})", redundant_experts)
    pop = layer_popularity(num_experts, skew, NUM_LAYERS, top_k, SEED)
    placement = placement_for(pop, ep, redundant_experts, policy, gpus_per_node, num_groups)
    factors = expected_factor(_draws(skew, top_k, num_experts), ep, placement, SEED)
    return GRID_LOG2, tuple(float(max(f, 1.0)) for f in factors)


@lru_cache(maxsize=4)
def _draws(skew: float, top_k: int, num_experts: int) -> np.ndarray:
    """Expert counts [grid, samples, layers, E], shared by every placement (common random numbers)."""
    pop = layer_popularity(num_experts, skew, NUM_LAYERS, top_k, SEED)
    tokens = np.rint(2.0 ** np.asarray(GRID_LOG2)).astype(np.int64)
    rng = np.random.default_rng([SEED, num_experts, top_k, int(round(skew * 1e6))])
    return sample_counts(pop, tokens, top_k, SAMPLES_PER_LAYER, rng).astype(np.float32)
