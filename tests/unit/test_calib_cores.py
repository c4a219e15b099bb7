"""Steps measured on shared cores are fitted as one rank alone; the cost model applies the share of the plan it
prices (sim/cost/cores.py). Derived by hand: tiny-cpu's DEP2 steps run 2 ranks at once; on a 1-core rig each runs
2 / 1 = 2x slower, so every measured second is twice the alone price, the fit must return the alone profile
(the same fit as the unshared measurements), and a step of the 2-rank plan on that rig prices at 2x it."""
import dataclasses

import pytest

from rackplan.calibration.fit import Fitter, fit_profile
from rackplan.calibration.samples import split_holdout, step_samples
from rackplan.calibration.synthetic import synth_records
from rackplan.sim.cost.cores import core_share
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import load_hardware, load_model, load_plan, load_profile

pytestmark = pytest.mark.unit
PLAN = load_plan("tiny-cpu")
MODEL = load_model("tiny-moe")
TRUE = load_profile("cpu-local")
ONE_CORE = dataclasses.replace(load_hardware("cpu-local"), cores=1)
TWO_CORES = dataclasses.replace(load_hardware("cpu-local"), cores=2)


def _samples(scale: float):
    recs = synth_records(PLAN, TRUE, decode_batches=(1, 2, 4, 8, 16), repeats=1, noise=0.0)
    for r in recs:
        r["seconds"] *= scale  # every op and the step: the rank ran `scale` times slower
    samples = step_samples(recs, PLAN)
    assert {s.busy_ranks for s in samples} == {2}  # both DEP2 ranks recorded every step
    return samples


def _fit(hw, scale: float):
    fit, _ = split_holdout(_samples(scale), {"decode": {4}})
    return fit_profile(Fitter(PLAN, MODEL, hw, fit), TRUE, "fitted"), fit


def _decode_s(prof, hw, share: float = 1.0) -> float:
    return decode_step(CostContext(MODEL, hw, PLAN.decode[0], prof, core_share=share), 8, 8 * 64).seconds


def test_a_sample_alone_divides_by_the_share():
    s = _samples(1.0)[0]
    assert s.alone(TWO_CORES) is s  # 2 ranks on 2 cores: nothing shared
    a = s.alone(ONE_CORE)
    assert a.step_s == pytest.approx(s.step_s / 2, rel=1e-12) and a.busy_ranks == 1
    assert all(a.ops[k] == pytest.approx(v / 2, rel=1e-12) for k, v in s.ops.items())


def test_shared_measurements_fit_the_alone_profile_and_the_share_is_applied_once():
    alone, _ = _fit(TWO_CORES, 1.0)  # measured with a core each
    shared, _ = _fit(ONE_CORE, 2.0)  # the same ranks measured on one core: every second doubled
    assert _decode_s(shared, ONE_CORE) == pytest.approx(_decode_s(alone, TWO_CORES), rel=1e-6)
    assert core_share(ONE_CORE, PLAN) == 2.0  # tiny-cpu keeps 2 ranks busy
    # serving the plan on the 1-core rig: the alone price x 2, not x 4 (a fit that kept the share would)
    assert _decode_s(shared, ONE_CORE, 2.0) == pytest.approx(2.0 * _decode_s(alone, TWO_CORES), rel=1e-6)
