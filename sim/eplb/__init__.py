"""Expert-parallel load balancing: placement policies (policy.py) and the per-step imbalance
model (model.py) that prices the busiest EP rank with and without EPLB."""
from .model import (
    expected_factor,
    factor_moments,
    layer_factors,
    num_nodes_for,
    placement_for,
    rank_loads,
    replay_factor,
)
from .policy import (
                     POLICIES,
                     Placement,
                     balanced_packing,
                     check_weight,
                     contiguous_share,
                     identity_placement,
                     placement_from_phy2log,
                     rebalance_experts,
                     replicate_experts,
)

__all__ = [
    "POLICIES", "Placement", "balanced_packing", "check_weight", "contiguous_share", "expected_factor",
    "factor_moments", "layer_factors",
    "identity_placement", "num_nodes_for", "placement_for", "placement_from_phy2log", "rank_loads",
    "rebalance_experts", "replay_factor", "replicate_experts",
]
