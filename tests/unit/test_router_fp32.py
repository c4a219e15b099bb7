"""GLM-4.5/4.6's MoE gate runs in FP32 (vLLM glm4_moe.py: an nn.Linear of dtype float32 on activations cast to
float32; no TF32), so its router GEMM is priced at the FP32 (CUDA-core) peak, 67 TFLOP/s on H200, not BF16's 989.
Other models keep the BF16 router GEMM. Worked by hand."""
from __future__ import annotations

import pytest

from rackplan.sim.cost.step import CostContext, prefill_step
from rackplan.specs import Layout, load_hardware, load_model, load_profile
from rackplan.specs.ops import layer_gemms

pytestmark = pytest.mark.unit


def _router(model_name: str):
    model = load_model(model_name)
    ops = layer_gemms(model, Layout(role="both", dp=1, tp=8, expert_parallel=False), 0, model.num_moe_layers)
    return next(op for op in ops if op.name == "router")


def test_router_compute_dtype_is_the_models():
    """glm-4.5 names router_compute fp32; deepseek-v3 leaves the default (bf16). Both gates hold FP32 weights:
    5120 x 160 x 4 B = 3,276,800 B for GLM."""
    glm, v3 = _router("glm-4.5").gemms[0], _router("deepseek-v3").gemms[0]
    assert (glm.compute_dtype, glm.weight_dtype, glm.k, glm.n) == ("fp32", "fp32", 5120, 160)
    assert glm.weight_bytes == 3_276_800
    assert (v3.compute_dtype, v3.weight_dtype) == ("bf16", "fp32")


def test_glm_router_is_priced_at_the_fp32_peak():
    """An 8,192-token prefill step of GLM-4.5 at TP 8 on h200 (h200-sxm-vllm: no gemm.fp32 curve, so the profile's
    generic GEMM efficiency gemm_eff_max x m / (m + gemm_m_half) = 0.7 x 8192 / 8224 = 0.69728): per MoE layer
    2 x 8192 x 5120 x 160 = 1.3422e10 FLOPs at 67e12 x 0.69728 = 46.72 TFLOP/s = 0.2873 ms, compute-bound (under
    100 MB moved: < 0.05 ms at half the HBM peak), plus op_fixed_s 2 us; over the 89 MoE layers 25.75 ms."""
    model, hw, prof = load_model("glm-4.5"), load_hardware("h200-sxm"), load_profile("h200-sxm-vllm")
    assert hw.flops_for("fp32") == 67.0e12 and (prof.gemm_eff_max, prof.gemm_m_half) == (0.7, 32.0)
    lay = Layout(role="both", dp=1, tp=8, expert_parallel=False)
    got = prefill_step(CostContext(model, hw, lay, prof, 0.0), [8192.0]).breakdown()["router"]
    flops = 2.0 * 8192 * 5120 * 160
    eff = 0.7 * 8192 / (8192 + 32)
    per_layer = flops / (67.0e12 * eff) + 2.0e-6
    assert model.num_moe_layers == 89
    assert got == pytest.approx(89 * per_layer, rel=1e-6)
    assert got == pytest.approx(25.75e-3, abs=0.01e-3)
