"""The noise of a simulated p90 counts the run's effective samples, not its requests (sim/metrics.py):
near a pool's saturation one queue excursion delays dozens of consecutive requests, so the p90's
standard error (and with it the planner's pass margin, sim/search/verify.py) is that of n / tau
independent samples, tau the integrated autocorrelation time of the p90 exceedances. Tiny H200
scenario (tests/integration/tiny_h200.py) at 34.5 req/s, just under its saturation (34 before vLLM's FlashMLA decode
core on Hopper, session 19 vllmhopper, moved it)."""
import numpy as np
import pytest

from rackplan.sim.metrics import autocorrelation_time, p90_standard_error
from rackplan.sim.search.verify import at_rate, run_simulation, slo_misses
from rackplan.sim.workload import make_requests
from rackplan.specs import SLO, Scenario

from .tiny_h200 import HW, MODEL, PLAN, PROF, WL

RATE, N = 34.5, 2000


def _ar1(phi: float, n: int, seed: int = 0) -> np.ndarray:
    """[n] x_i = phi x_(i-1) + e_i, e standard normal."""
    from scipy.signal import lfilter

    return lfilter([1.0], [1.0, -phi], np.random.default_rng(seed).standard_normal(n))


@pytest.mark.unit
def test_autocorrelation_time_of_independent_and_ar1_series():
    assert autocorrelation_time(np.random.default_rng(1).standard_normal(20_000)) == pytest.approx(1.0, abs=0.15)
    # AR(1): tau = (1 + phi) / (1 - phi) = 9 for phi = 0.8
    assert autocorrelation_time(_ar1(0.8, 50_000)) == pytest.approx(9.0, rel=0.15)
    assert autocorrelation_time(np.ones(100)) == 1.0  # constant: nothing to correlate


@pytest.mark.unit
def test_p90_error_of_a_correlated_series_matches_the_spread_of_replications():
    x = _ar1(0.98, 4000)  # tau 99: about 40 independent samples' worth
    spread = np.std([np.percentile(_ar1(0.98, 4000, 100 + k), 90) for k in range(100)])
    assert p90_standard_error(x) == pytest.approx(spread, rel=0.4)
    # the same values with their order forgotten look several times more precise than they are
    assert p90_standard_error(np.random.default_rng(2).permutation(x)) < spread / 3.0


@pytest.mark.integration
def test_bursty_run_near_saturation_gets_the_margin_of_its_effective_samples():
    wl = at_rate(WL, RATE)
    bursty = 0
    for seed in range(8):
        res = run_simulation(Scenario(PLAN, MODEL, HW, wl, PROF), N, seed)
        if not res.stable:
            continue
        ttft = res.ttft_s[res.window.holds(make_requests(wl, N, seed).arrival_s)]  # [window requests]
        p90, se = res.metrics["ttft_p90_s"], res.metrics["ttft_p90_se_s"]
        tau = autocorrelation_time((ttft > np.percentile(ttft, 90)).astype(float))
        iid = p90_standard_error(np.random.default_rng(0).permutation(ttft))
        assert se >= iid * 0.999  # never below what independent samples would give
        if tau < 10.0:
            continue
        bursty += 1  # its slow tail: the error of ~len / tau samples, several times the independent one
        assert se > 2.0 * iid
        # an SLO the p90 clears by 2 independent-sample errors, but not by 2 of its own, does not pass
        limit = p90 + 2.0 * iid + 0.5 * (se - iid)
        assert slo_misses(res.metrics, SLO(limit, 1.0)), (seed, p90, se, iid)
    assert bursty, "no stable run with a bursty TTFT tail at this rate: the scenario no longer tests the rule"
