"""Expected capacity of a plan over a year when GPUs fail: the share of time each instance is down and
the share of the plan's capacity it takes with it, with and without spare nodes.

A failed GPU stops its whole instance: vLLM follows a fail-stop model, where any fault terminates
the whole DP+EP instance (vllm-project/vllm#27866, 2025-10); a Wide-EP instance's ranks exchange tokens
with every other rank in each MoE layer, so the survivors block in the all-to-all (vllm#44428, merged
2026-06, detects this and lets an orchestrator restart the instance). Continuing degraded, with
EPLB's redundant experts covering the lost rank's, is proposed (vllm#27774, #46370) and not assumed.

Spares: the GPUs of the plan's budget its instances leave idle, in whole nodes (`num_gpus - gpus_used`,
floor-divided by the hardware's GPUs per node; a spare in the same NVLink domain, as a rack's idle
trays are), are spare nodes. A failed GPU takes its node out of service for `replace_hours` (until it
is swapped); its instance restarts on a spare node in `repair_hours` if one is free, else waits the
whole `replace_hours`. Failed nodes out at once: Poisson with mean m = (plan GPUs x failures per
GPU-year / 8760 h) x replace_hours (an M/G/infinity queue); a failure finds a spare free with the
probability that fewer than k (the spare nodes) are out, P(Poisson(m) <= k - 1) (arrivals see time
averages). Hours down per failure: d = repair x P + replace x (1 - P); with no spares, replace.
Every failure counts as one needing the node swapped (the Llama 3 interruptions include software
faults a restart alone fixes: conservative).

First-order model: an instance of g GPUs, each failing at rate f per GPU-year, down d hours per
failure, is down a share g x f / 8760 x d of the time (valid while that share is small). A plan at
its verified rate runs every pool near capacity, so an instance down takes its pool's share
1 / (instances in the pool) of the plan's capacity (the bottleneck pool's loss, the same loss taken
for any pool: conservative for the other).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rackplan.specs import HardwareSpec, Plan, pool_hardware

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class PoolDowntime:
    pool: str  # "prefill", "decode", "aggregated"
    instances: int
    gpus_per_instance: int
    down_share: float  # of one instance: g x f / 8760 x d
    capacity_loss: float  # of the plan while one instance is down: 1 / instances


def instance_down_share(gpus: int, failures_per_gpu_year: float, down_hours: float) -> float:
    """Share of time an instance of `gpus` GPUs is down: gpus x failures/GPU-year / 8760 h x hours down."""
    return gpus * failures_per_gpu_year / HOURS_PER_YEAR * down_hours


def spare_nodes(plan: Plan, hw: HardwareSpec) -> int:
    """Whole nodes of the budget the plan's instances leave idle (its spares)."""
    return max(0, plan.num_gpus - plan.gpus_used) // hw.gpus_per_node


def spare_free_probability(in_use_gpus: int, hw: HardwareSpec, spares: int) -> float:
    """Probability a failure finds a spare node free: P(Poisson(m) <= spares - 1), m the failed nodes out
    on average (in-use GPUs x failures per hour x replace hours); 0 without spares."""
    if spares <= 0:
        return 0.0
    m = in_use_gpus * hw.failures_per_gpu_year / HOURS_PER_YEAR * _replace(hw)
    return sum(_poisson_pmf(m, i) for i in range(spares))


def _poisson_pmf(m: float, i: int) -> float:
    """P(Poisson(m) = i); past 170! (the largest factorial a float holds) in logs, where the direct form
    overflowed (`plan --gpus 10000` leaves hundreds of spare nodes)."""
    if i <= 170:
        return math.exp(-m) * m ** i / math.factorial(i)
    return math.exp(-m + i * math.log(m) - math.lgamma(i + 1)) if m > 0 else 0.0


def down_hours(in_use_gpus: int, hw: HardwareSpec, spares: int) -> float:
    """Expected hours an instance is down per failure: repair with a free spare, else replace."""
    p = spare_free_probability(in_use_gpus, hw, spares)
    return hw.repair_hours * p + _replace(hw) * (1.0 - p)


def _replace(hw: HardwareSpec) -> float:
    return hw.replace_hours or hw.repair_hours


def pools(plan: Plan, hw: HardwareSpec) -> list[PoolDowntime]:
    """Each pool of the plan, its instances' down share and what one of them down costs the plan
    (a mixed plan's prefill pool: its own hardware's failure rate, nodes and spares)."""
    out = []
    for pool in ("prefill", "decode", "aggregated"):
        kind = pool_hardware(plan, hw, pool)
        spares = spare_nodes(plan, hw) if kind.name == hw.name else 0  # the budget's idle GPUs: plan.hardware's
        used = sum(lay.total_gpus for p in ("prefill", "decode", "aggregated") for lay in getattr(plan, p)
                   if pool_hardware(plan, hw, p).name == kind.name)
        d = down_hours(used, kind, spares)
        for lay in getattr(plan, pool):
            n = sum(x.replicas for x in getattr(plan, pool))
            out.append(PoolDowntime(pool, lay.replicas, lay.gpus,
                                    instance_down_share(lay.gpus, kind.failures_per_gpu_year, d), 1.0 / n))
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
    k = spare_nodes(plan, hw)
    spares = (f"{k} spare node{'s' if k != 1 else ''} of {hw.gpus_per_node} GPUs (the budget's idle GPUs): "
              f"{down_hours(plan.gpus_used, hw, k):.3g} h down per failure on average" if k
              else f"no spare node (the budget's GPUs all in use): {_replace(hw):g} h down per failure")
    return [f"availability: expected capacity over a year {expected_capacity(plan, hw):.2%}: " + "; ".join(parts)
            + f" (a failed GPU stops its instance; {spares}; {hw.failures_per_gpu_year:g} failures per GPU-year, "
            f"{hw.repair_hours:g} h down with a spare node, {_replace(hw):g} h without: {hw.failure_source}; "
            "rackplan/availability.py)"]
