"""Warm start (sim/warm.py): decode instances seated at t = 0 at the steady occupancy reach the
same steady-state figures as a cold start, with a shorter warm-up. Explicit datasheet profile."""
import numpy as np
import pytest

from rackplan.sim.cost.step import CostContext
from rackplan.sim.deployment import validate_plan
from rackplan.sim.pricer import StepPricer
from rackplan.sim.simulator import Run, simulate_requests
from rackplan.sim.warm import steady_occupancy, warm_sequences
from rackplan.sim.workload import make_requests
from rackplan.specs import Scenario

from .tiny_h200 import HW, MODEL, PLAN, PROF, WL

pytestmark = pytest.mark.integration


def run(n: int, warm: bool):
    """A cold run from empty pools, or a warm-started steady-state run (a stream's Run seats them)."""
    if not warm:
        return simulate_requests(Scenario(PLAN, MODEL, HW, WL, PROF), make_requests(WL, n)), None
    w = warm_sequences(Scenario(PLAN, MODEL, HW, WL, PROF), validate_plan(PLAN, MODEL, HW), 0)
    live = Run(Scenario(PLAN, MODEL, HW, WL, PROF))
    try:
        return live.result(n), w
    finally:
        live.close()


def test_the_occupancy_closes_littles_law_on_the_step_price():
    pricer = StepPricer(CostContext(MODEL, HW, PLAN.decode[0], PROF))
    n = steady_occupancy(pricer, 8, 20.0, 400.0, 1300.0, 512)
    b = n / 8
    assert 0 < n < 512
    assert 20.0 * 400.0 * pricer.decode([b] * 8, [b * 1300.0] * 8, n) == pytest.approx(n, rel=1e-3)
    assert steady_occupancy(pricer, 8, 1e4, 400.0, 1300.0, 512) == 512  # cannot keep up: every seat


def test_a_warm_start_measures_what_a_cold_start_does_after_a_shorter_warm_up():
    cold, _ = run(16_000, warm=False)
    warm, seated = run(8_000, warm=True)
    assert cold.stable and warm.stable and cold.stability.converged and warm.stability.converged
    # seated at about what the cold run runs at steady state (time-average in its window)
    running = cold.metrics["mean_in_system"]
    assert 0.85 * running < len(seated) < running
    assert warm.window.start_s < cold.window.start_s
    for key in ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s"):
        assert warm.metrics[key] == pytest.approx(cold.metrics[key], rel=0.03), key
    # throughput per offered request/s: the two runs draw different arrivals (2% apart in their windows here)
    per_rps = lambda r: r.metrics["output_tps_per_gpu"] / r.metrics["offered_rps"]  # noqa: E731
    assert per_rps(warm) == pytest.approx(per_rps(cold), rel=0.03)
    # the seated sequences are load, never requests: 8,000 arrive, and every one is measured as such
    assert warm.metrics["num_requests"] == 8000 and len(warm.ttft_s) == 8000
    assert warm.metrics["warm_sequences"] == len(seated)
    measured = warm.ttft_s[:int(warm.metrics["window_requests"])]  # (later arrivals may still be queued)
    assert np.isfinite(measured).all()
