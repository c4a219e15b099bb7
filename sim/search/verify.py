"""Simulator check of planned deployments at their target load: do the p90 tails meet the SLOs?

`run_simulation` is the single call site of the simulator, so what-if studies can hand it
modified model / hardware / profile objects (`rackplan.sim.simulator.simulate_specs`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from rackplan.specs import SLO, Arrival, HardwareSpec, ModelSpec, Plan, Profile, Workload

BACKOFF = 0.85  # rate factor for a retry when the tails miss the SLOs at the estimated rate
MIN_REQUESTS, MAX_REQUESTS = 64, 4000
SETTLE_E2E = 3.0  # simulate >= 3 request lifetimes so the decode pool reaches its steady batch
MIN_SIM_S = 20.0  # seconds of arrivals at least
MAX_STEPS = 40_000  # cap on simulated decode steps (instances x steps) for fast interactive points


def auto_requests(rate_rps: float, e2e_s: float, step_s: float, decode_instances: int) -> int:
    """Requests for one check: enough arrivals to cover a few request lifetimes at `rate_rps`,
    but no more decode steps than MAX_STEPS (low-load points have very short steps)."""
    horizon = max(SETTLE_E2E * e2e_s, MIN_SIM_S)
    horizon = min(horizon, MAX_STEPS * step_s / max(decode_instances, 1))
    return int(min(MAX_REQUESTS, max(MIN_REQUESTS, round(rate_rps * horizon))))


def run_simulation(plan: Plan, model: ModelSpec, hw: HardwareSpec, workload: Workload, profile: Profile,
                   num_requests: int | None = None, seed: int | None = None) -> dict:
    """Simulated metrics of `plan` on `workload` with these spec objects (the one call site)."""
    from ..simulator import simulate_specs

    res = simulate_specs(plan, model, hw, workload, profile, num_requests=num_requests, seed=seed)
    return dict(res.metrics)


def at_rate(workload: Workload, rate_rps: float) -> Workload:
    """The workload with Poisson arrivals at `rate_rps` (closed-loop workloads stay as they are)."""
    if workload.arrival.kind == "concurrency":
        return workload
    return replace(workload, arrival=Arrival(kind="poisson", rate=float(rate_rps)))


def slo_misses(metrics: dict, slo: SLO) -> dict[str, float]:
    """Seconds by which each p90 exceeds its SLO (only the ones that miss)."""
    out = {}
    for key, limit in (("ttft_p90_s", slo.ttft_p90_s), ("tpot_p90_s", slo.tpot_p90_s)):
        value = metrics.get(key, float("inf"))
        if value > limit:
            out[key] = value - limit
    return out


@dataclass
class Check:
    """Outcome of simulating one deployment."""

    rate_rps: float  # rate of the last run
    metrics: dict
    passed: bool
    misses: dict[str, float] = field(default_factory=dict)
    runs: int = 1

    def worst_miss(self, slo: SLO) -> tuple[str, float]:
        """(metric, relative excess) of the worst miss, for 'closest layout' messages."""
        if not self.misses:
            return "", 0.0
        limits = {"ttft_p90_s": slo.ttft_p90_s, "tpot_p90_s": slo.tpot_p90_s}
        key = max(self.misses, key=lambda k: self.misses[k] / limits[k])
        return key, self.misses[key] / limits[key]


def check(plan: Plan, model, hw, workload: Workload, profile, rate_rps: float, slo: SLO,
          num_requests: int | None, seed: int | None, backoffs: int = 1) -> Check:
    """Simulate at `rate_rps`; on a miss retry at lower rates (`backoffs` times)."""
    rate, runs = rate_rps, 0
    while True:
        metrics = run_simulation(plan, model, hw, at_rate(workload, rate), profile, num_requests, seed)
        runs += 1
        misses = slo_misses(metrics, slo)
        if not misses or runs > backoffs or workload.arrival.kind == "concurrency":
            return Check(rate, metrics, not misses, misses, runs)
        rate *= BACKOFF
