"""Step-time variance from measurement: a step runs its price times a seeded log-normal factor (sim/step_spread.py).
Expected values derived by hand: log factors ~ N(0, sd^2) (quantile q at sd x z_q), an AR(1) series keeps its sd
and has lag-1 correlation `corr`; a lone decode rank's TPOT (one step a request) follows the draw's quantiles."""
import dataclasses
import math

import numpy as np
import pytest

from rackplan.sim.simulator import simulate_specs
from rackplan.sim.step_spread import StepSpread
from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_profile, load_workload
from rackplan.specs.scenario import Scenario
from rackplan.specs.workload import Arrival, LengthDist

pytestmark = pytest.mark.unit
Z90 = 1.2815516  # standard normal 90th percentile


def _logs(sd: float, corr: float, kind: str = "decode", n: int = 20000) -> np.ndarray:
    sp = StepSpread({kind: sd}, {kind: corr}, entropy=7)
    draw = getattr(sp, kind)
    return np.log([draw() for _ in range(n)])


@pytest.mark.parametrize("corr", [0.0, 0.8])
def test_factors_are_lognormal_with_median_one_and_the_measured_sd(corr):
    x = _logs(0.3, corr)
    # median 1, p90 at exp(1.2816 sd), whatever the correlation (the AR(1) series' stationary sd is sd)
    q10, q50, q90 = np.percentile(x, [10, 50, 90])
    tol = 0.02 if corr == 0 else 0.05  # correlated draws: fewer independent ones (20000 x 0.2 / 1.8)
    assert q50 == pytest.approx(0.0, abs=tol)
    assert q90 == pytest.approx(0.3 * Z90, abs=tol) and q10 == pytest.approx(-0.3 * Z90, abs=tol)
    assert np.corrcoef(x[:-1], x[1:])[0, 1] == pytest.approx(corr, abs=0.03)


def test_a_kind_without_a_spread_runs_at_its_price():
    sp = StepSpread({"decode": 0.3}, {}, entropy=1)
    assert {sp.prefill() for _ in range(10)} == {1.0}


def test_no_spread_no_draws_the_same_seed_the_same_factors():
    prof = load_profile("cpu-local")
    rng = np.random.default_rng(3)
    assert StepSpread.of(prof, rng) is None  # shipped profiles carry none
    spread = dataclasses.replace(prof, step_time_spread={"decode": 0.2})
    assert StepSpread.of(spread, None) is None  # a pricer at mean prices (the planner's estimate) draws nothing
    a, b = StepSpread.of(spread, rng), StepSpread.of(spread, np.random.default_rng(3))
    assert [a.decode() for _ in range(5)] == [b.decode() for _ in range(5)]
    assert rng.bit_generator.state == np.random.default_rng(3).bit_generator.state  # the pricer's stream untouched


@pytest.mark.parametrize("field,bad", [("step_time_spread", {"decode": -0.1}), ("step_time_spread", {"mixed": 0.1}),
                                       ("step_time_corr", {"prefill": 1.0})])
def test_bad_spread_fields_are_refused_naming_them(field, bad):
    with pytest.raises(SpecError, match=f"{field}.{next(iter(bad))}"):
        dataclasses.replace(load_profile("cpu-local"), **{field: bad})


def _lone_decodes(sd: float) -> np.ndarray:
    """TPOT of 2,000 requests served one at a time (closed loop, concurrency 1) with a fixed 32-token prompt
    and 2 output tokens on tiny-disagg's DEP1 decode rank: each request's TPOT is one decode step at batch 1."""
    plan = load_plan("tiny-disagg")
    wl = dataclasses.replace(load_workload("tiny-chat"), arrival=Arrival("concurrency", concurrency=1),
                             isl=LengthDist("fixed", value=32), osl=LengthDist("fixed", value=2), num_requests=2000)
    prof = dataclasses.replace(load_profile("cpu-local"), step_time_spread={"decode": sd} if sd else {})
    sc = Scenario(plan, load_model(plan.model), load_hardware(plan.hardware), wl, prof)
    return simulate_specs(sc, seed=0).tpot_s


def test_tpot_quantiles_follow_the_draws_quantiles():
    base = _lone_decodes(0.0)
    assert np.ptp(base) == pytest.approx(0.0, abs=1e-12)  # without a spread every step is its price p
    p = float(base[0])
    tpot = _lone_decodes(0.25)
    q10, q50, q90 = np.percentile(tpot, [10, 50, 90])
    # TPOT = p x exp(0.25 z): p50 = p, p90 = p x exp(0.25 x 1.2816) = 1.378 p, p10 = p / 1.378
    assert q50 == pytest.approx(p, rel=0.03)
    assert q90 == pytest.approx(p * math.exp(0.25 * Z90), rel=0.03)
    assert q10 == pytest.approx(p * math.exp(-0.25 * Z90), rel=0.03)
    assert q90 / q50 == pytest.approx(1.378, rel=0.03)
