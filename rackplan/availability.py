"""Expected capacity of a plan over a year when GPUs fail: the share of time each instance is down and
the share of the plan's capacity it takes with it.

A failed GPU stops its whole instance: vLLM follows a fail-stop model, where any fault terminates
the whole DP+EP instance (vllm-project/vllm#27866, 2025-10); a Wide-EP instance's ranks exchange tokens
with every other rank in each MoE layer, so the survivors block in the all-to-all (vllm#44428, merged
2026-06, detects this and lets an orchestrator restart the instance). Continuing degraded, with
EPLB's redundant experts covering the lost rank's, is proposed (vllm#27774, #46370) and not assumed.

First-order model: an instance of g GPUs, each failing at rate f per GPU-year, down for r hours per
failure, is down a share g x f / 8760 x r of the time (valid while that share is small; the exact
steady-state share is x / (1 + x) for x = g f r / 8760). A plan at its verified rate runs every pool
near capacity, so an instance down takes its pool's share 1 / (instances in the pool) of the plan's
capacity (the bottleneck pool's loss, the same loss taken for any pool: conservative for the other).
"""
from __future__ import annotations

from dataclasses import dataclass

from rackplan.specs import HardwareSpec, Plan, pool_hardware

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class PoolDowntime:
    pool: str  # "prefill", "decode", "aggregated"
    instances: int
    gpus_per_instance: int
    down_share: float  # of one instance: g x f / 8760 x r
    capacity_loss: float  # of the plan while one instance is down: 1 / instances


def instance_down_share(gpus: int, failures_per_gpu_year: float, repair_hours: float) -> float:
    """Share of time an instance of `gpus` GPUs is down: gpus x failures/GPU-year / 8760 h x repair hours."""
    return gpus * failures_per_gpu_year / HOURS_PER_YEAR * repair_hours


def pools(plan: Plan, hw: HardwareSpec) -> list[PoolDowntime]:
    """Each pool of the plan, its instances' down share and what one of them down costs the plan."""
    out = []
    for pool in ("prefill", "decode", "aggregated"):
        kind = pool_hardware(plan, hw, pool)  # a mixed plan's prefill pool: its own hardware's failure rate
        for lay in getattr(plan, pool):
            n = sum(x.replicas for x in getattr(plan, pool))
            out.append(PoolDowntime(pool, lay.replicas, lay.gpus,
                                    instance_down_share(lay.gpus, kind.failures_per_gpu_year, kind.repair_hours),
                                    1.0 / n))
    return out


def expected_capacity(plan: Plan, hw: HardwareSpec) -> float:
    """Expected share of the plan's capacity over a year: 1 - sum over instances of down share x loss."""
    return 1.0 - sum(p.instances * p.down_share * p.capacity_loss for p in pools(plan, hw))


def lines(plan: Plan, hw: HardwareSpec) -> list[str]:
    """The report line (empty where the hardware carries no failure rate)."""
    if hw.failures_per_gpu_year <= 0:
        return []
    parts = [f"{p.pool} instances of {p.gpus_per_instance} GPUs each down {p.down_share:.3%} of the time "
             f"({p.down_share * HOURS_PER_YEAR:,.1f} h/year; one down takes {p.capacity_loss:.0%} of the capacity)"
             for p in pools(plan, hw)]
    return [f"availability: expected capacity over a year {expected_capacity(plan, hw):.2%}: " + "; ".join(parts)
            + f" (a failed GPU stops its instance; {hw.failures_per_gpu_year:g} failures per GPU-year, "
            f"{hw.repair_hours:g} h down per failure: {hw.failure_source}; rackplan/availability.py)"]
