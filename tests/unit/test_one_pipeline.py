"""One cost pipeline: the planner's estimate and the simulator price the same step the same way.

Both go through sim/pricer.py (the simulator through its quantised cache, the estimate exactly)
and take host time, the engine loop included, from sim/cost/host.py alone. For every embedded
plan and each of its layouts: decode steps at a few batches, a full prefill step and (aggregated)
a mixed step, at the plan's workload's mean request; under the datasheet profile and under the profile the
commands use (measured curves, whose padded GEMM tiles make a step price jump at a tile edge: the simulator's
quantised decode key must not push a rank's batch over the slowest rank's).
"""

import numpy as np
import pytest

from rackplan.sim.cost.step import CostContext, RankWork
from rackplan.sim.pricer import StepPricer
from rackplan.sim.search.estimate import Pricer, traffic_of
from rackplan.specs import CONFIG_DIR, load_hardware, load_model, load_plan, load_profile, load_workload

pytestmark = pytest.mark.unit
PLANS = sorted(p.stem for p in (CONFIG_DIR / "plans").glob("*.yaml"))


def _setup(name, which="plan"):
    """`which`: "plan" prices with the plan's profile, else datasheet; "default" with the profile the commands
    use (the plan's, else the hardware's default_profile: the measured curves where shipped)."""
    plan = load_plan(name)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    pname = plan.profile or (hw.default_profile if which == "default" else "datasheet")
    prof, tr = load_profile(pname), traffic_of(load_workload(plan.workload or "isl4k-osl1k"))
    return plan, Pricer(model, hw, prof, tr.skew), tr, lambda lay: StepPricer(CostContext(model, hw, lay, prof,
                                                                                            tr.skew))


@pytest.mark.parametrize("which", ["plan", "default"])
@pytest.mark.parametrize("name", PLANS)
def test_estimate_and_simulator_agree_on_the_same_step(name, which):
    plan, est, tr, sim_pricer = _setup(name, which)
    ctx, new, cached = tr.ctx_mean, tr.new, int(tr.cached)
    for lay in plan.prefill + plan.decode + plan.aggregated:
        sim = sim_pricer(lay)
        ones = np.ones(lay.dp)
        pairs = []
        if lay.role != "prefill":
            for b in sorted({1, max(1, lay.max_batch_per_rank // 2), lay.max_batch_per_rank}):
                pairs.append((est.decode(lay, b, ctx).period_s, sim.decode(ones * b, ones * b * ctx)))
        if lay.role != "decode":
            n = int(min(new, lay.max_tokens_per_step))
            per = max(1, lay.max_tokens_per_step // n)
            pairs.append((est.prefill(lay, (float(n),) * per, cached).period_s,
                          sim.step([[(i, n, cached) for i in range(per)]] * lay.dp)))
        if lay.role == "both":
            b, chunk = max(1, lay.max_batch_per_rank // 2), 256
            pairs.append((est.mixed(lay, b, ctx, chunk, cached).period_s,
                          sim.step([[(0, chunk, cached)]] * lay.dp, ones * b, ones * b * ctx)))
        for want, got in pairs:
            assert got == pytest.approx(want, rel=0.01), lay.tag


def test_engine_loop_is_in_both_once():
    """tiny-cpu schedules synchronously: every host part, the scheduler's engine loop included, is in
    the step once, in the estimate's period as in the simulator's (before, only the simulator added
    the loop: the two differed by 6-7%)."""
    plan, est, tr, sim_pricer = _setup("tiny-cpu")
    lay = plan.decode[0]
    cost = est.decode(lay, 4, tr.ctx_mean)
    h = cost.host
    assert not lay.async_scheduling and est.prof.host.schedule_step_s > 0
    assert cost.period_s == pytest.approx(h.gpu_s + h.total_s - h.part("host.launch"), rel=1e-12)
    assert sim_pricer(lay).uniform(RankWork(4.0, 4.0 * tr.ctx_mean)).period_s == cost.period_s
