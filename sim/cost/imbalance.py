"""Expert-load imbalance: the per-step max-over-ranks factor that an EP step waits on.

factor = E[max over EP ranks of the rank's token-expert load] / mean, where a step's per-expert
counts are a multinomial draw of the batch's T * top_k choices from a power-law popularity
(sim/routing.py) and the placement is contiguous (policy "none") or EPLB's (sim/eplb) computed
from that popularity. The simulator asks once per step, so each (ep, redundant, policy, skew,
top_k, E, ...) gets a table over a log-spaced grid of global tokens, each point sampled (seeded,
vectorised) the first time a step needs it, and a call is a lookup plus a linear interpolation in
log2(T).
`random_routing_factor` is the closed form for uniform routing, kept as a cross-check.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from functools import lru_cache

import numpy as np

from rackplan.specs import SpecError

from ..eplb.model import expected_factor, placement_for
from ..routing import layer_popularity, sample_counts

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
    cfg = (ep, redundant_experts, policy, float(skew), top_k, num_experts, gpus_per_node, num_groups)
    xs = GRID_LOG2
    x = math.log2(tokens_global) if tokens_global > 1.0 else 0.0
    i = bisect_right(xs, x)
    if i >= len(xs):
        return _point(cfg, len(xs) - 1)
    if i == 0:
        return _point(cfg, 0)
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    lo, hi = _point(cfg, i - 1), _point(cfg, i)
    return lo + t * (hi - lo)


def _config(ep: int, redundant_experts: int, policy: str, skew: float, top_k: int, num_experts: int,
            gpus_per_node: int, num_groups: int):
    """(placement, computed grid points) of one configuration; checks its EPLB knobs."""
    if policy not in ("none", "global", "hierarchical"):
        raise SpecError("eplb", "policy", "one of 'hierarchical', 'global', 'none'", policy)
    slots = num_experts + redundant_experts
    if policy != "none" and slots % ep:
        raise SpecError("eplb", "redundant_experts",
                        f"num_experts + redundant_experts ({slots}) divisible by ep ({ep})", redundant_experts)
    pop = layer_popularity(num_experts, skew, NUM_LAYERS, top_k, SEED)
    return placement_for(pop, ep, redundant_experts, policy, gpus_per_node, num_groups), {}


_config_cached = lru_cache(maxsize=None)(_config)


@lru_cache(maxsize=256)
def _draws(skew: float, top_k: int, num_experts: int, i: int) -> np.ndarray:
    """Expert counts [1, samples, layers, E] at grid point i, shared by every placement (common
    random numbers); seeded per point, so a point is the same whichever points were asked first."""
    pop = layer_popularity(num_experts, skew, NUM_LAYERS, top_k, SEED)
    tokens = np.array([int(round(2.0 ** GRID_LOG2[i]))], dtype=np.int64)
    rng = np.random.default_rng([SEED, num_experts, top_k, int(round(skew * 1e6)), i])
    return sample_counts(pop, tokens, top_k, SAMPLES_PER_LAYER, rng).astype(np.float32)


def _point(cfg: tuple, i: int) -> float:
    """Factor at grid point i, sampled the first time it is asked for (a simulation touches a few)."""
    placement, points = _config_cached(*cfg)
    if i not in points:
        ep, _, _, skew, top_k, num_experts = cfg[:6]
        counts = _draws(skew, top_k, num_experts, i)
        points[i] = float(max(expected_factor(counts, ep, placement, SEED)[0], 1.0))
    return points[i]


def factor_table(ep: int, redundant_experts: int, policy: str, skew: float, top_k: int,
                 num_experts: int, gpus_per_node: int = 8, num_groups: int = 1) -> tuple[tuple, tuple]:
    """(log2 tokens_global grid, factor at each point) of one configuration, all points sampled."""
    cfg = (ep, redundant_experts, policy, float(skew), top_k, num_experts, gpus_per_node, num_groups)
    return GRID_LOG2, tuple(_point(cfg, i) for i in range(len(GRID_LOG2)))


def _clear_caches() -> None:
    _config_cached.cache_clear()
    _draws.cache_clear()


factor_table.cache_clear = _clear_caches  # type: ignore[attr-defined]
