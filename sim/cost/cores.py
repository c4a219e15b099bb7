"""Ranks that share a CPU rig's cores: how many of a plan's ranks are busy at once, and how much slower
each then runs (HardwareSpec.core_share). On GPUs every rank has its own device: a share of 1."""
from __future__ import annotations

from rackplan.specs import HardwareSpec, Plan


def busy_ranks(plan: Plan) -> int:
    """Ranks a plan keeps busy at once: every instance replica's ranks (prefill, decode and aggregated
    pools), a colocated plan's prefill and decode sharing theirs."""
    def pool(lays) -> int:
        return sum(lay.gpus * lay.replicas for lay in lays)
    if plan.colocated:
        return max(pool(plan.prefill), pool(plan.decode)) + pool(plan.aggregated)
    return pool(plan.prefill) + pool(plan.decode) + pool(plan.aggregated)


def core_share(hw: HardwareSpec, plan: Plan) -> float:
    """How much slower each of the plan's busy ranks runs on `hw` (1: no core shared)."""
    return hw.core_share(busy_ranks(plan))
