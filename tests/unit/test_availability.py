"""Expected capacity over a year when GPUs fail (rackplan/availability.py), derived by hand."""
import dataclasses

import pytest

from rackplan.availability import expected_capacity, instance_down_share, lines, pools
from rackplan.specs import load_hardware, load_plan

pytestmark = pytest.mark.unit


def test_down_share_is_gpus_times_rate_times_repair():
    # 64 GPUs x 0.173 failures per GPU-year / 8760 h x 1 h = 0.0012639 (11.07 h a year)
    assert instance_down_share(64, 0.173, 1.0) == pytest.approx(64 * 0.173 / 8760)
    assert instance_down_share(64, 0.173, 1.0) * 8760 == pytest.approx(11.072)


def test_seed_plan_expected_capacity_by_hand():
    # seed plan: prefill 4 x DEP2, decode 1 x DEP64 on GB300 (0.173 failures per GPU-year, 1 h down)
    plan, hw = load_plan("v41-flash-gb300-nvl72"), load_hardware("gb300-nvl72")
    assert plan.summary == "prefill 4xDEP2 | decode 1xDEP64"
    pre, dec = pools(plan, hw)
    assert (pre.instances, pre.gpus_per_instance, pre.capacity_loss) == (4, 2, 0.25)
    assert (dec.instances, dec.gpus_per_instance, dec.capacity_loss) == (1, 64, 1.0)
    # 1 - 4 x (2 x 0.173 / 8760) x 1/4 - 1 x (64 x 0.173 / 8760) x 1 = 1 - 66 x 0.173 / 8760 = 0.998697
    assert expected_capacity(plan, hw) == pytest.approx(1 - 66 * 0.173 / 8760)
    text = lines(plan, hw)[0]
    assert "99.87%" in text and "11.1 h/year" in text and "arXiv 2407.21783" in text


def test_no_failure_rate_no_line():
    plan = load_plan("tiny-disagg")
    assert lines(plan, load_hardware("cpu-local")) == []
    hw = dataclasses.replace(load_hardware("cpu-local"), failures_per_gpu_year=8.76, repair_hours=10.0)
    # 3 one-GPU instances: each down 1 x 8.76 / 8760 x 10 = 1%; prefill (2) loses 1/2, decode (1) all
    assert expected_capacity(plan, hw) == pytest.approx(1 - 2 * 0.01 * 0.5 - 0.01)
