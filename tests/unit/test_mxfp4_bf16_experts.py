"""gpt-oss's MXFP4 experts computed in BF16 priced on the kernel vLLM runs for them on Hopper (OpenAI's Triton
matmul_ogs MoE, the op tables' w4a16_mxfp4 rows: experts.mxfp4_bf16, efficiency.WEIGHT_ONLY_KERNELS), not the BF16
kernel's curve at MXFP4 bytes. Worked by hand from the shipped h100 profile's curve parameters; no pyarrow."""
from __future__ import annotations

import pytest

from rackplan.sim.cost import efficiency
from rackplan.sim.cost.moe import distinct_experts_busiest, expert_work
from rackplan.sim.cost.step import CostContext, StepModel
from rackplan.specs import Curve, Layout, load_hardware, load_model, load_profile

from .test_mxfp4_experts import _eff_by_hand

pytestmark = pytest.mark.unit


def test_weight_only_kernel_only_where_the_profile_measures_it():
    """(mxfp4 weights, bf16 compute) takes experts.mxfp4_bf16 only from a profile holding that class; elsewhere,
    and without a profile (dense GEMMs), the compute dtype's curves as before."""
    with_class = load_profile("h100-sxm-vllm")
    assert "experts.mxfp4_bf16" in with_class.curves
    assert efficiency.kernel_dtype("mxfp4", "bf16", with_class) == "mxfp4_bf16"
    assert efficiency.kernel_dtype("mxfp4", "bf16") == "bf16"
    assert efficiency.kernel_dtype("mxfp4", "bf16", load_profile("datasheet")) == "bf16"
    assert efficiency.kernel_dtype("mxfp4", "fp4", with_class) == "mxfp4"  # V4's MXFP4 x MXFP8 kernel: unchanged
    flat = with_class.__class__(name="flat", hardware="h100-sxm", curves={"experts.mxfp4_bf16": (Curve(eff_max=0.5),)})
    assert efficiency.dtype_curve(flat, "experts", "mxfp4_bf16")[0].eff_max == 0.5


@pytest.mark.parametrize("tokens, ratio", [
    # now / before; the kernel's own row (vLLM 0.24.0 moe_perf, w4a16_mxfp4, TP 1) beside the price now
    (8.0, 0.392),     # decode-sized: 0.206 ms per layer (row 0.201); the BF16 curve priced 2.6x that
    (2048.0, 0.536),  # a 2k prefill chunk: 1.197 ms (row 1.041); before 1.9x
    (8192.0, 0.936),  # a full 8k chunk: 3.074 ms (row 2.931); before within 7%
])
@pytest.mark.profile_data
def test_gptoss_experts_read_the_weight_only_curve(tokens, ratio):
    """gpt-oss-120b at TP 1 on h100 (shipped h100-sxm-vllm): the experts' seconds per layer are the roofline of
    expert_work under the experts.mxfp4_bf16 curves at the BF16 peak, evaluated here by hand, vs the experts.bf16
    curves at the same bytes before."""
    model, hw = load_model("gpt-oss-120b"), load_hardware("h100-sxm")
    lay = Layout(role="both", dp=1, expert_parallel=False)
    prof = load_profile("h100-sxm-vllm")
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    t_exp = sm._price_moe(tokens, tokens, 1, "none", "prefill", 0.0)[1]
    busiest = tokens * model.moe.top_k * sm.imbalance_at(tokens, 1)
    flops, nbytes, rows, n, k = expert_work(model, busiest, max(distinct_experts_busiest(model, lay, tokens), 1.0))
    assert (n, k) == (2 * 2880, 2880)  # gate/up of one gpt-oss expert: [rows, 2880] x [2880, 2 x 2880]
    peak = hw.peak_flops["bf16"]
    t_mem = nbytes / (hw.hbm_bw * efficiency.memory(prof, nbytes))

    def seconds(curves) -> float:
        eff = max(_eff_by_hand(c, rows, n, k, flops) for c in curves)
        return max(flops / (peak * eff), t_mem) + prof.op_fixed_s

    assert t_exp == pytest.approx(seconds(prof.curves["experts.mxfp4_bf16"]), rel=1e-9)
    assert t_exp / seconds(prof.curves["experts.bf16"]) == pytest.approx(ratio, abs=0.002)
