"""A prefill instance's intake (HostParams.schedule_per_arrival_s, sim/cost/host.intake_seconds): the requests
it took in since its last step add their intake to its next step, as the CPU executor's prefill leader routes
each arrival through the run's store before that step."""
import dataclasses

import pytest
import simpy

from rackplan.policy import EngineCore
from rackplan.sim.cost.step import CostContext
from rackplan.sim.prefill import PrefillInstance
from rackplan.sim.pricer import StepPricer
from rackplan.specs import Layout, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit
INTAKE = 1.0e-3  # s a request: round, so the expected times below are sums on the page
LAYOUT = Layout(role="prefill", dp=1, max_tokens_per_step=8192, max_batch_per_rank=8)


def _run(per_arrival: float, groups: list[tuple[float, list[int]]]) -> tuple[dict[int, float], StepPricer]:
    """Prefill-done times of 50-token prompts submitted in `groups` (time, rids), and the pricer."""
    prof = load_profile("cpu-local")
    prof = dataclasses.replace(prof, host=dataclasses.replace(prof.host, schedule_per_arrival_s=per_arrival))
    pr = StepPricer(CostContext(load_model("tiny-moe"), load_hardware("cpu-local"), LAYOUT, prof))
    n = sum(len(g) for _, g in groups)
    env = simpy.Environment()
    done: dict[int, float] = {}
    inst = PrefillInstance(env, "prefill[0]", pr, EngineCore("prefill", 1, 8192, 8, 10**6, 16, [50] * n, [1] * n,
                                                             [0] * n), lambda rid: done.setdefault(rid, env.now))

    def arrivals():
        for t, rids in groups:
            yield env.timeout(t - env.now)
            for rid in rids:  # one instant: all of them before the instance's next step
                inst.submit(rid)
    env.process(arrivals())
    env.run()
    return done, pr


def test_each_request_taken_in_adds_its_intake_to_the_next_step():
    groups = [(0.0, [0, 1]), (1.0, [2])]
    done, pr = _run(INTAKE, groups)
    two, one = pr.step([[(0, 50, 0), (1, 50, 0)]]), pr.step([[(2, 50, 0)]])  # the steps' own prices
    assert done[0] == done[1] == pytest.approx(two + 2 * INTAKE)
    assert done[2] == pytest.approx(1.0 + one + INTAKE)
    plain, _ = _run(0.0, groups)  # a profile that measured none: the steps alone
    assert plain == {0: pytest.approx(two), 1: pytest.approx(two), 2: pytest.approx(1.0 + one)}
