"""Per-step expert-load imbalance: E[max over EP ranks of per-rank load] / mean, with or without EPLB.

EPLB balances the *expected* load (the placement is computed from the popularity, as if the
historical load equalled it); the per-step multinomial variance of a batch's top-k choices
remains. A replicated expert's c choices are split over its r replicas as the executor does
(round-robin: every replica gets floor(c / r), c mod r of them, from a random start, one more).
A step waits for the busiest rank in every MoE layer, so the factor is the mean over layers of
each layer's max/mean, and its expectation over steps.

Shapes: L layers, E logical experts, P slots, G EP ranks, M steps (or samples).
"""
from __future__ import annotations

import numpy as np

from .policy import Placement, _position_in_group, contiguous_share, rebalance_experts


def num_nodes_for(ep: int, gpus_per_node: int) -> int:
    """Nodes an EP group spans (1 when it does not fill whole nodes)."""
    return ep // gpus_per_node if ep > gpus_per_node and ep % gpus_per_node == 0 else 1


def placement_for(pop: np.ndarray, ep: int, redundant_experts: int = 0, policy: str = "none",
                  gpus_per_node: int = 8, num_groups: int = 1) -> Placement | None:
    """EPLB placement for expected loads pop [L, E]; None for policy "none" (contiguous experts,
    redundant slots unused)."""
    if policy == "none":
        return None
    nodes = num_nodes_for(ep, gpus_per_node)
    return rebalance_experts(pop, pop.shape[1] + redundant_experts, ep, nodes, num_groups, policy)


def rank_loads(counts: np.ndarray, ep: int, placement: Placement | None = None,
               rng: np.random.Generator | None = None) -> np.ndarray:
    """Token-expert choices each EP rank serves: counts [M, L, E] -> [M, L, G]."""
    counts = np.asarray(counts, dtype=float)
    if placement is None:
        return counts @ contiguous_share(counts.shape[-1], ep)
    rng = rng if rng is not None else np.random.default_rng(0)
    phy2log = placement.phy2log  # [L, P]
    layer = np.arange(phy2log.shape[0])[:, None]
    reps = placement.logcnt[layer, phy2log]  # [L, P] replicas of each slot's expert
    replica = _position_in_group(phy2log)  # [L, P] which replica of its expert a slot holds
    per_slot = counts[..., layer, phy2log]  # [M, L, P] choices of the slot's expert
    base = np.floor(per_slot / reps)
    start = rng.integers(0, 1 << 30, size=counts.shape)[..., layer, phy2log]  # round-robin start
    slots = base + ((replica + start) % reps < per_slot - base * reps)
    return slots.reshape(slots.shape[:-1] + (ep, -1)).sum(-1)


def layer_factors(counts: np.ndarray, ep: int, placement: Placement | None = None,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """Max/mean rank load of every sampled step and layer: counts [M, L, E] -> [M, L]."""
    loads = rank_loads(counts, ep, placement, rng)
    mean = loads.sum(-1) / ep
    return np.divide(loads.max(-1), mean, out=np.ones_like(mean), where=mean > 0)


def replay_factor(counts: np.ndarray, ep: int, placement: Placement | None = None,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """Max/mean rank load per step, averaged over layers: counts [M, L, E] -> [M]."""
    return layer_factors(counts, ep, placement, rng).mean(-1)


def expected_factor(counts: np.ndarray, ep: int, placement: Placement | None = None,
                    seed: int = 0) -> np.ndarray:
    """E[max]/mean for sampled counts [Nt, N, L, E] (Nt batch sizes, N draws each) -> [Nt]."""
    return factor_moments(counts, ep, placement, seed)[0]


def factor_moments(counts: np.ndarray, ep: int, placement: Placement | None = None,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(E[max]/mean, the standard deviation of one layer's max/mean over steps and layers) for
    sampled counts [Nt, N, L, E] -> ([Nt], [Nt]). A step of n MoE layers averages n layers, so
    its factor varies by about the second / sqrt(n) around the first."""
    rng = np.random.default_rng(seed)
    per_layer = [layer_factors(c, ep, placement, rng) for c in counts]
    return np.array([f.mean() for f in per_layer]), np.array([f.std() for f in per_layer])
