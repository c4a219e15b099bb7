"""Expert-load imbalance: the per-step max-over-ranks factor that an EP step waits on.

Closed form for random routing: the tokens a rank receives are ~Binomial(T*k, 1/ep); the
expected maximum of `ep` such loads is about mean + sigma * sqrt(2 ln ep). Routing skew and EPLB
placement refine this in sim/eplb (the executor measures it).
"""
from __future__ import annotations

import math


def random_routing_factor(tokens_global: float, top_k: int, ep: int) -> float:
    """Expected max/mean of per-rank routed-token counts for uniform random routing."""
    if ep <= 1 or tokens_global <= 0:
        return 1.0
    mean = tokens_global * top_k / ep
    sigma = math.sqrt(mean * (1.0 - 1.0 / ep))
    return 1.0 + math.sqrt(2.0 * math.log(ep)) * sigma / mean


def imbalance_factor(tokens_global: float, top_k: int, num_experts: int, ep: int,
                     skew: float = 0.0, redundant_experts: int = 0, policy: str = "none",
                     fixed: float | None = None) -> float:
    """Max-over-ranks / mean expert load for one step (a fixed factor wins when given)."""
    if fixed is not None:
        return fixed
    return random_routing_factor(tokens_global, top_k, ep)
