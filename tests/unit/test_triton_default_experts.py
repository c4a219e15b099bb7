"""Routed experts on the Triton fused_moe kernel at its untuned default configuration (MoE backend triton_default,
class experts.bf16.triton_default): where the engine ships no tuned config file for the expert shape and GPU (vLLM
0.11.0 has none for GLM-4.5/4.6 at TP 8 on H200: E=160, N=192), its BF16 MoE runs 64 x 64 x 32 tiles, which the
SGLang tables (same default) time at ~200-250 TFLOP/s where the tuned kernel reaches ~450-550. Worked by hand."""
from __future__ import annotations

import numpy as np
import pytest

from rackplan.calibration.opdb_ops import SGLANG_TUNED_BF16, untuned_rows
from rackplan.sim.cost import efficiency
from rackplan.sim.cost.moe import distinct_experts_busiest, expert_work
from rackplan.sim.cost.step import CostContext, StepModel
from rackplan.specs import Layout, SpecError, load_hardware, load_model, load_profile

from .test_mxfp4_experts import _eff_by_hand

pytestmark = pytest.mark.unit


def test_untuned_rows_are_the_shapes_without_a_config_file():
    """A row ran the default configuration where (E, inter / moe_tp) has no tuned H200 file: Qwen3-235B's experts
    (E=128, inter 1536) at TP 8 are N=192, a shipped file (tuned); at TP 1 N=1536, none (default); GLM's (E=160,
    inter 1536) at TP 8, N=192, none (default). Only BF16, balanced, one EP rank, the Triton kernel's rows count."""
    tuned = SGLANG_TUNED_BF16["h200-sxm"]
    assert (128, 192) in tuned and (128, 1536) not in tuned and (160, 192) not in tuned
    cols = {  # seven rows, by hand
        "moe_dtype": np.array(["bfloat16"] * 6 + ["fp8"]),
        "distribution": np.array(["balanced"] * 5 + ["power_law_1.2", "balanced"]),
        "moe_ep_size": np.array([1, 1, 1, 1, 2, 1, 1]),
        "kernel_source": np.array(["sglang_fused_moe_triton"] * 3 + ["sglang_flashinfer_cutlass_moe"]
                                  + ["sglang_fused_moe_triton"] * 3),
        "num_experts": np.array([128, 128, 160, 160, 160, 160, 160]),
        "inter_size": np.array([1536] * 7),
        "moe_tp_size": np.array([8, 1, 8, 8, 8, 8, 8]),
    }
    # row 0 tuned (128, 192); 1 untuned (128, 1536); 2 untuned (160, 192); 3 another kernel; 4 EP 2; 5 power law;
    # 6 FP8
    assert untuned_rows(cols, tuned).tolist() == [False, True, True, False, False, False, False]


def test_backend_takes_the_class_only_where_the_profile_measures_it():
    """GLM-4.5's BF16 experts under moe_backend triton_default (no all-to-all: TP only) read experts.bf16.triton_default
    from a profile holding it (h200-sxm-vllm), the BF16 class elsewhere (datasheet); a layout naming it for FP8
    block experts is an error naming the field, and it needs no DeepEP exchange (deepgemm does)."""
    model, hw = load_model("glm-4.5"), load_hardware("h200-sxm")
    lay = Layout(role="both", dp=1, tp=8, expert_parallel=False, moe_backend="triton_default")
    efficiency.check_backend(lay, model, "both.moe_backend")  # TP-sharded experts, no DeepEP: accepted
    for prof, want in ((load_profile("h200-sxm-vllm"), "bf16.triton_default"), (load_profile("datasheet"), "bf16")):
        side = StepModel(CostContext(model, hw, lay, prof, 0.0)).ep_side("none")
        assert side.kernel_dtype() == want
    with pytest.raises(SpecError, match="both.moe_backend"):
        efficiency.check_backend(lay, load_model("deepseek-v3"), "both.moe_backend")
    with pytest.raises(SpecError, match="DeepEP"):
        efficiency.check_backend(Layout(role="both", dp=1, tp=8, expert_parallel=False, moe_backend="deepgemm"),
                                 load_model("deepseek-v3"), "both.moe_backend")


@pytest.mark.parametrize("tokens, ratio", [
    # the moe.experts op alone, now / before; the fit of experts.bf16 put much of the kernel's time in its
    # moe.route.bf16 (0.926 ms at 8,192 tokens, 0.019 under the new class), so over both ops: 1.15x and 1.26x
    (8192.0, 2.78),  # a full 8k chunk: 1.780 ms per layer (215 TFLOP/s with the routing) against 0.639
    (256.0, 1.40),   # a 256-sequence decode step (M > E = 160: the 64 x 64 x 32 tiles already): 0.371 against 0.265
])
@pytest.mark.profile_data
def test_glm_tp8_experts_read_the_default_config_curve(tokens, ratio):
    """GLM-4.5 at TP 8 on h200 (shipped h200-sxm-vllm): one layer's routed experts are the roofline of expert_work
    under the experts.bf16.triton_default curves at the BF16 peak, evaluated here by hand, vs experts.bf16 (the tuned
    kernel's) at the same work. By hand at 8,192 tokens: no EP, so all 8,192 x 8 = 65,536 token-expert pairs land on
    the rank, every one of the 160 experts is hit, and each expert's intermediate is sharded 1536 / 8 = 192:
    FLOPs = 2 x 65,536 x 3 x 5120 x 192 = 3.865e11; gate/up GEMM n = 2 x 192 = 384, k = 5120."""
    model, hw = load_model("glm-4.5"), load_hardware("h200-sxm")
    prof = load_profile("h200-sxm-vllm")
    lay = Layout(role="both", dp=1, tp=8, expert_parallel=False, moe_backend="triton_default")
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    t_exp = sm._price_moe(tokens, tokens, 1, "none", "prefill", 0.0)[1]
    assert sm.imbalance_at(tokens, 1) == 1.0  # one EP rank: no imbalance
    distinct = max(distinct_experts_busiest(model, lay, tokens), 1.0)
    flops, nbytes, rows, n, k = expert_work(model, tokens * 8, distinct, 8)
    assert (n, k) == (384.0, 5120.0)
    if tokens == 8192.0:
        assert distinct == pytest.approx(160.0) and flops == pytest.approx(3.865e11, rel=1e-3)
    t_mem = nbytes / (hw.hbm_bw * efficiency.memory(prof, nbytes))
    by_hand = {key: max(flops / (hw.peak_flops["bf16"] * max(_eff_by_hand(c, rows, n, k, flops)
                                                            for c in prof.curves[key])), t_mem) + prof.op_fixed_s
               for key in ("experts.bf16.triton_default", "experts.bf16")}
    assert t_exp == pytest.approx(by_hand["experts.bf16.triton_default"], rel=1e-9)
    assert t_exp / by_hand["experts.bf16"] == pytest.approx(ratio, abs=0.01)
