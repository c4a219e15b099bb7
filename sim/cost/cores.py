"""Ranks that share a CPU rig's cores: a plan keeps every rank it uses busy (Plan.gpus_used: each instance
replica's ranks, a colocated plan's prefill and decode sharing theirs), and each then runs
HardwareSpec.core_share times slower. On GPUs every rank has its own device: a share of 1."""
from __future__ import annotations

from rackplan.specs import HardwareSpec, Plan


def core_share(hw: HardwareSpec, plan: Plan) -> float:
    """How much slower each of the plan's busy ranks runs on `hw` (1: no core shared)."""
    return hw.core_share(plan.gpus_used)
