"""Routed experts behind DeepEP on Hopper priced as DeepGEMM's grouped GEMM (sim/cost/efficiency.py
grouped_experts_at, sim/cost/step.py), derived by hand.

DeepGEMM groups only the M axis: each expert is a segment of the dense SM90 kernel, its rows padded to the
contiguous layout's 128-row alignment. With a dense curve of constant efficiency E, the experts' efficiency is
E x (useful rows / padded rows)."""
import pytest

from rackplan.sim.cost import efficiency
from rackplan.sim.cost.step import CostContext
from rackplan.specs import Curve, Layout, Profile, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit

E = 0.6
FLAT = Profile(name="flat-deepgemm", curves={"gemm.fp8_block": (Curve(eff_max=E, tile_rule="deepgemm_sm90"),)})
H200 = load_hardware("h200-sxm")


@pytest.mark.parametrize("rows, distinct, padded", [
    (100.0, 8.0, 8 * 128),   # 100 rows pad to one 128-row block per expert
    (256.0, 8.0, 8 * 256),   # whole blocks: no padding
    (300.0, 2.0, 2 * 384),   # 300 -> 3 blocks
    (1.0, 256.0, 256 * 128),  # decode-like: one row per expert, each a whole block
])
def test_grouped_efficiency_is_the_dense_kernels_over_the_padding(rows, distinct, padded):
    grouped = efficiency.grouped_experts_at(FLAT, "fp8_block", 2 * 2048, 7168, H200.num_sms)
    assert grouped(rows, distinct) == pytest.approx(E * rows * distinct / padded)


def test_only_deepgemm_curves_run_grouped():
    assert efficiency.runs_grouped_deepgemm(load_profile("h200-sxm-vllm"), "fp8_block")
    assert efficiency.runs_grouped_deepgemm(load_profile("h100-sxm-vllm"), "fp8_block")
    assert not efficiency.runs_grouped_deepgemm(load_profile("b200-vllm"), "fp8_block")  # SM100: the table's kernel
    assert not efficiency.runs_grouped_deepgemm(load_profile("datasheet"), "fp8_block")
    assert not efficiency.runs_grouped_deepgemm(load_profile("h200-sxm-vllm"), "fp4")


@pytest.mark.parametrize("lay, grouped", [
    (Layout(role="prefill", dp=8), True),                               # DEP8: DeepEP, DeepGEMM's grouped GEMM
    (Layout(role="prefill", dp=1, tp=8, expert_parallel=False), False),  # TP8 experts: no DeepEP, the table's kernel
])
def test_step_model_uses_grouped_experts_behind_deepep(lay, grouped):
    cx = CostContext(load_model("deepseek-v3"), H200, lay, load_profile("h200-sxm-vllm"))
    assert (cx.step_model._grouped is not None) is grouped
