"""benchmarks/gb200_kernel_check.py: the run's kernels and the charts at the run's work, by hand."""

import pytest

from rackplan.accuracy.cases import load_cases
from tests.bench_scripts import script

pytestmark = pytest.mark.unit


def test_the_run_and_the_charts_by_hand():
    k = script("gb200_kernel_check.py")
    # the profile's MoE kernels over one step's 58 MoE layers: 508.602 + 228.802 + 94.571 + 21.654 + 1.108 + 22.611 ms
    assert k.RUN_MOE_US == pytest.approx(877348.0 / 58)
    assert k.RUN_MLA_US == pytest.approx(4926.0, abs=0.1)  # 300.486 ms over 61 attention layers
    # causal MLA work is tokens x sequence: 64,000 x 2,000 of the run against 65,536 x 2,048 of the chart
    assert k.CHART_MLA_US == pytest.approx(6715.0 * 0.953674, rel=1e-6)
    # token-expert pairs: the run's 128,000 gathered tokens x 8 on half the experts; the chart's 131,072 x 8
    assert k.CHART_MOE_US == pytest.approx(28296.0 * 512000 / 1048576)


def test_per_layer_price_follows_the_layout():
    k = script("gb200_kernel_check.py")
    case = next(c for c in load_cases() if c.id == "sglang-gb200-p2-prefill-bf16attn-fp8")
    ops = ("moe.route", "moe.experts")
    # DEP4 at 16,384 tokens a rank lands 16,384 x 4 x 8 / 4 = 131,072 token-expert pairs on each rank, DEP2 at
    # 8,192 lands 8,192 x 2 x 8 / 2 = 65,536: twice the expert work (the routing, over every token the rank
    # receives, doubles too), so the price about doubles
    big, small = k.per_layer_us(case, ops), k.per_layer_us(case, ops, dp=2, max_tokens_per_step=8192)
    assert 1.6 < big / small < 2.5
