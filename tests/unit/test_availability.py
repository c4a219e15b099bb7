"""Expected capacity over a year when GPUs fail (rackplan/availability.py), derived by hand."""
import dataclasses
import math

import pytest

from rackplan.availability import (
    down_hours,
    expected_capacity,
    instance_down_share,
    lines,
    pools,
    spare_free_probability,
    spare_nodes,
)
from rackplan.specs import load_hardware, load_plan

pytestmark = pytest.mark.unit


def test_down_share_is_gpus_times_rate_times_repair():
    # 64 GPUs x 0.173 failures per GPU-year / 8760 h x 1 h = 0.0012639 (11.07 h a year)
    assert instance_down_share(64, 0.173, 1.0) == pytest.approx(64 * 0.173 / 8760)
    assert instance_down_share(64, 0.173, 1.0) * 8760 == pytest.approx(11.072)


def test_seed_plan_expected_capacity_by_hand():
    # seed plan: prefill 4 x DEP2, decode 1 x DEP64 on GB300, all 72 GPUs of the rack in use: no spare
    # node, so a failure keeps its instance down until the node is replaced (24 h; 0.173 failures/GPU-year)
    plan, hw = load_plan("v41-flash-gb300-nvl72"), load_hardware("gb300-nvl72")
    assert plan.summary == "prefill 4xDEP2 | decode 1xDEP64" and spare_nodes(plan, hw) == 0
    pre, dec = pools(plan, hw)
    assert (pre.instances, pre.gpus_per_instance, pre.capacity_loss) == (4, 2, 0.25)
    assert (dec.instances, dec.gpus_per_instance, dec.capacity_loss) == (1, 64, 1.0)
    # decode: 64 x 0.173 / 8760 x 24 h = 3.033% of the year (265.7 h); the plan:
    # 1 - 4 x (2 x 0.173 / 8760 x 24) x 1/4 - 1 x (64 x 0.173 / 8760 x 24) x 1 = 1 - 66 x 0.173 x 24 / 8760 = 0.968718
    assert dec.down_share == pytest.approx(64 * 0.173 / 8760 * 24)
    assert expected_capacity(plan, hw) == pytest.approx(1 - 66 * 0.173 * 24 / 8760)
    text = lines(plan, hw)[0]
    assert "96.87%" in text and "265.7 h/year" in text and "arXiv 2407.21783" in text and "no spare node" in text


def test_spare_nodes_shorten_each_failure_by_hand():
    # the seed plan on 80 GPUs: 8 idle = 2 spare trays of 4. Failed nodes out at once ~ Poisson(m),
    # m = 72 GPUs x 0.173 / 8760 h x 24 h = 0.034126; a failure finds a spare free w.p. P(N <= 1) =
    # e^-m (1 + m) = 0.999431; hours down d = 1 x P + 24 x (1 - P) = 1.013092
    plan, hw = dataclasses.replace(load_plan("v41-flash-gb300-nvl72"), num_gpus=80), load_hardware("gb300-nvl72")
    assert spare_nodes(plan, hw) == 2
    m = 72 * 0.173 / 8760 * 24
    p = math.exp(-m) * (1 + m)
    assert spare_free_probability(72, hw, 2) == pytest.approx(p) and p == pytest.approx(0.999431, abs=1e-6)
    d = 1.0 * p + 24.0 * (1 - p)
    assert down_hours(72, hw, 2) == pytest.approx(d) and d == pytest.approx(1.013092, abs=1e-6)
    assert expected_capacity(plan, hw) == pytest.approx(1 - 66 * 0.173 * d / 8760)  # 99.87%
    assert "2 spare nodes of 4 GPUs" in lines(plan, hw)[0]
    # one spare: P(N = 0) = e^-m only
    assert down_hours(72, hw, 1) == pytest.approx(math.exp(-m) + 24 * (1 - math.exp(-m)))
    assert down_hours(72, hw, 0) == 24.0


def test_no_failure_rate_no_line():
    plan = load_plan("tiny-disagg")
    assert lines(plan, load_hardware("cpu-local")) == []
    hw = dataclasses.replace(load_hardware("cpu-local"), failures_per_gpu_year=8.76, repair_hours=10.0)
    # 3 one-GPU instances, no replace_hours (so repair_hours, 10 h, either way): each down 1 x 8.76 / 8760 x 10
    # = 1%; prefill (2) loses 1/2, decode (1) all
    assert expected_capacity(plan, hw) == pytest.approx(1 - 2 * 0.01 * 0.5 - 0.01)


def test_hundreds_of_spare_nodes_do_not_overflow():
    hw = load_hardware("gb300-nvl72")
    # past 170 spares the direct m^i / i! overflows a float (plan --gpus 10000 raised OverflowError); with
    # about one node out on average, P(Poisson(m) <= 199) and P(<= 149) are both 1 within rounding
    assert spare_free_probability(9556, hw, 200) == pytest.approx(1.0)
    assert spare_free_probability(9556, hw, 200) == pytest.approx(spare_free_probability(9556, hw, 150), abs=1e-15)
