"""Derived values of the vocabulary (rackplan/specs): a layout's queries per step and largest decode step,
a plan's instances and their names."""
from __future__ import annotations

import pytest

from rackplan.deploy.placement import place
from rackplan.executor.topology import serving_instances
from rackplan.specs import Layout, Plan, Speculation, from_dict, load_hardware

pytestmark = pytest.mark.unit


def test_queries_and_largest_decode_step():
    plain = Layout(role="decode", dp=4, max_batch_per_rank=32)
    assert plain.queries_per_step == 1
    assert plain.max_decode_tokens == 32
    spec = Layout(role="decode", dp=4, max_batch_per_rank=32, speculation=Speculation(3, 2.5))
    assert spec.queries_per_step == 4  # the next token and 3 drafts
    assert spec.max_decode_tokens == 128
    assert spec.decode_tokens(5) == 20


PLAN = {"name": "p", "model": "deepseek-v3", "hardware": "gb200-nvl72", "num_gpus": 72,
        "prefill": [{"role": "prefill", "dp": 4, "replicas": 2}, {"role": "prefill", "dp": 8}],
        "decode": [{"role": "decode", "dp": 32, "replicas": 1}, {"role": "decode", "dp": 8, "replicas": 2}]}


def test_plan_instances_in_plan_order_with_names():
    plan = from_dict(Plan, PLAN)
    got = [(i.pool, i.index, i.replica, i.name, i.slug, i.layout.dp) for i in plan.instances()]
    assert got == [("prefill", 0, 0, "prefill[0].0", "prefill0-0", 4),
                   ("prefill", 0, 1, "prefill[0].1", "prefill0-1", 4),
                   ("prefill", 1, 0, "prefill[1].0", "prefill1-0", 8),
                   ("decode", 0, 0, "decode[0].0", "decode0-0", 32),
                   ("decode", 1, 0, "decode[1].0", "decode1-0", 8),
                   ("decode", 1, 1, "decode[1].1", "decode1-1", 8)]
    assert [i.entry for i in plan.instances()][:3] == ["prefill[0]", "prefill[0]", "prefill[1]"]


def test_executor_and_deploy_name_the_plan_instances():
    plan = from_dict(Plan, PLAN)
    assert [s.name for s in serving_instances(plan, 10_000)] == [i.name for i in plan.instances()]
    assert [inst.name for inst in place(plan, load_hardware("gb200-nvl72")).instances] == \
        [i.slug for i in plan.instances()]
