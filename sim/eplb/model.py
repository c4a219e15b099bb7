"""Per-step expert-load imbalance: E[max over EP ranks of per-rank load] / mean, with or without EPLB.

EPLB balances the *expected* load (the placement is computed from the popularity, as if the
historical load equalled it); the per-step multinomial variance of a batch's top-k choices
remains. Replicas split their expert's tokens evenly. A step waits for the busiest rank in every
MoE layer, so the factor is the mean over layers of each layer's expected max/mean.

Shapes: L layers, E logical experts, G EP ranks, Nt batch sizes, N samples per layer.
"""
from __future__ import annotations

import numpy as np

from .policy import contiguous_share, rebalance_experts


def num_nodes_for(ep: int, gpus_per_node: int) -> int:
    """Nodes an EP group spans (1 when it does not fill whole nodes)."""
    return ep // gpus_per_node if ep > gpus_per_node and ep % gpus_per_node == 0 else 1


def placement_share(pop: np.ndarray, ep: int, redundant_experts: int = 0, policy: str = "none",
                    gpus_per_node: int = 8, num_groups: int = 1) -> np.ndarray:
    """Fraction of each expert's tokens on each rank for popularity pop [L, E]: [L, E, G].

    policy "none" ignores redundant slots and places experts contiguously (E % G may be nonzero).
    """
    num_l, num_e = pop.shape
    if policy == "none":
        return np.broadcast_to(contiguous_share(num_e, ep), (num_l, num_e, ep))
    nodes = num_nodes_for(ep, gpus_per_node)
    return rebalance_experts(pop, num_e + redundant_experts, ep, nodes, num_groups, policy).share()


def replay_factor(counts: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Max/mean rank load per step, averaged over layers, for expert counts [..., L, E] -> [...]."""
    counts = np.asarray(counts, dtype=float)
    lead = counts.shape[:-2]
    num_l, num_e = counts.shape[-2:]
    flat = np.moveaxis(counts.reshape(-1, num_l, num_e), 1, 0)  # [L, M, E]
    loads = np.matmul(flat, np.broadcast_to(share, (num_l, num_e, share.shape[-1])))  # [L, M, G]
    mean = loads.sum(-1) / loads.shape[-1]
    ratio = np.divide(loads.max(-1), mean, out=np.ones_like(mean), where=mean > 0)
    return ratio.mean(0).reshape(lead)


def expected_factor(counts: np.ndarray, share: np.ndarray) -> np.ndarray:
    """E[max]/mean from sampled counts [Nt, N, L, E]: the mean of replay_factor over samples -> [Nt]."""
    return replay_factor(counts, share).mean(axis=1)
