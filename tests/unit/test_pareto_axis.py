"""`plan --pareto-axis cost|power` (sim/search/pareto_axis.py): the front computed on $/M output tokens
or output tokens/s per MW on the GPU budget. Hand-built points: a deployment dominated on throughput
whose copies fill the budget is on the cost front."""
from __future__ import annotations

import dataclasses

import pytest

from rackplan.economics import Prices
from rackplan.sim.search import pareto_axis, planner
from rackplan.sim.search.combine import Candidate
from rackplan.sim.search.front import Verified
from rackplan.specs import SLO, SpecError, load_hardware, load_model, load_profile, load_workload

pytestmark = pytest.mark.unit
PRICE, IDLE_W, LOADED_W, PUE, BUDGET, OSL = 2.0, 10.0, 100.0, 1.25, 4, 100.0


@pytest.fixture(scope="module")
def req():
    hw = dataclasses.replace(load_hardware("cpu-local"), cores=8, power_idle_w=IDLE_W, power_loaded_w=LOADED_W,
                             price_per_gpu_hour=PRICE, price_source="test", power_source="test")
    return planner.Request(load_model("tiny-moe"), hw, load_profile("cpu-local"), load_workload("tiny-chat"), BUDGET,
                           SLO(1.0, 0.2), "tiny-moe", "cpu-local", "tiny-chat", prices=Prices(PRICE, 0.0, PUE, "test"))


def _point(gpus: int, tps_gpu: float, tps_user: float) -> Verified:
    """An estimated deployment (not simulated: full load) of `gpus` GPUs at tps_gpu and tps_user."""
    rate = tps_gpu * gpus / OSL
    return Verified(Candidate("aggregated", (), gpus, rate, 0.1, 1.0 / tps_user, 1.0, OSL, rate), None)


def test_a_point_dominated_on_throughput_is_on_the_cost_front(req):
    a = _point(3, 1000.0, 50.0)  # 1 copy on the 4-GPU budget: 3,000 tok/s, one GPU idle
    b = _point(2, 900.0, 50.0)  # dominated by a on tok/s/GPU; 2 copies fill the budget: 3,600 tok/s
    c = _point(4, 800.0, 100.0)  # the fastest per user: 3,200 tok/s
    pts = [a, b, c]
    gpu, cost, power = (pareto_axis.axis(req, n) for n in pareto_axis.AXES)
    assert pareto_axis.front(gpu, pts) == [a, c]
    # $/M output tokens on the budget: 4 GPUs x $2/h / millions of tokens an hour (energy in the price)
    assert cost.value(a) == pytest.approx(4 * PRICE / (3000 * 3600 / 1e6))  # $0.741
    assert cost.value(b) == pytest.approx(4 * PRICE / (3600 * 3600 / 1e6))  # $0.617
    assert cost.value(c) == pytest.approx(4 * PRICE / (3200 * 3600 / 1e6))  # $0.694
    assert pareto_axis.front(cost, pts) == [b, c]  # b on the cost front, a off it
    # tok/s per MW on the budget: copies at full load, the idle rest at 10 W, x PUE
    assert power.value(a) == pytest.approx(3000 / ((3 * LOADED_W + 1 * IDLE_W) * PUE / 1e6))  # 7.74M
    assert power.value(b) == pytest.approx(3600 / (4 * LOADED_W * PUE / 1e6))  # 7.2M
    assert pareto_axis.front(power, pts) == [a, c]
    assert "$2/GPU-h (test)" in cost.source and f"PUE {PUE:g}" in power.source
    assert cost.label == "$ per M output tokens on the 4-GPU budget"


def test_an_axis_without_its_figures_is_refused(req):
    unpriced = dataclasses.replace(req, hw=dataclasses.replace(req.hw, price_per_gpu_hour=0.0), prices=None)
    with pytest.raises(SpecError, match="--pareto-axis"):
        pareto_axis.axis(unpriced, "cost")
    pareto_axis.axis(unpriced, "power")  # power needs no price
    with pytest.raises(SpecError, match="--pareto-axis"):
        pareto_axis.axis(req, "speed")
