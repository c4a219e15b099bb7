"""moe_backend marlin (sim/cost/efficiency.py BACKENDS): vLLM's fused_marlin_moe on MXFP4 experts computed in BF16, the
MoE kernel vLLM 0.10.2 runs for gpt-oss on Hopper where `triton_kernels` does not import, priced by
experts.mxfp4_bf16.marlin (and moe.route.mxfp4_bf16.marlin) where the profile measures them, without DeepEP. Worked by
hand on a profile whose curves are flat (eff_max only); the shipped class by hand on its own rows."""
from __future__ import annotations

import dataclasses

import pytest

from rackplan.sim.cost import efficiency
from rackplan.sim.cost.moe import distinct_experts_busiest, expert_work
from rackplan.sim.cost.step import CostContext, StepModel
from rackplan.sim.deployment import validate_layout
from rackplan.specs import Curve, Layout, SpecError, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit


def _flat(**classes: float):
    """The datasheet profile with flat curves {class: eff_max} (a measured profile's keys, no shape terms)."""
    return dataclasses.replace(load_profile("datasheet"),
                               curves={k.replace("__", "."): (Curve(eff_max=v),) for k, v in classes.items()})


def test_marlin_class_without_deepep_only_where_measured():
    """Marlin's class prices the weight-only MXFP4 kernel dtype without an all-to-all (the "" kernel); behind DeepEP, on
    another dtype, or on a profile without the class, the dtype's own class."""
    prof = _flat(experts__mxfp4_bf16=0.3, experts__mxfp4_bf16__marlin=0.15)
    assert efficiency.backend_dtype(prof, "mxfp4_bf16", "marlin", "") == "mxfp4_bf16.marlin"
    assert efficiency.backend_dtype(prof, "mxfp4_bf16", "marlin", "high_throughput") == "mxfp4_bf16"
    assert efficiency.backend_dtype(prof, "fp8_block", "marlin", "") == "fp8_block"
    assert efficiency.backend_dtype(_flat(experts__mxfp4_bf16=0.3), "mxfp4_bf16", "marlin", "") == "mxfp4_bf16"


@pytest.mark.parametrize("backend, eff", [("marlin", 0.15), (None, 0.3)])
def test_gptoss_tp2_experts_priced_on_the_marlin_curve(backend, eff):
    """gpt-oss-120b at TP 2 on h100, an 8,192-token step: moe.experts is the roofline of expert_work at the BF16 peak
    under the curve of the layout's kernel (marlin: experts.mxfp4_bf16.marlin, 0.15; vLLM's default Triton class:
    experts.mxfp4_bf16, 0.3), by hand. 8,192 tokens x top-4 = 32,768 pairs over 128 experts (256 rows each), gate/up
    [256, 2880] x [2880, 2 x 1440] and down [256, 1440] x [1440, 2880] a rank: 2 x 256 x 2880 x (2880 + 1440) = 6.37
    GFLOP an expert, 0.815 TFLOP the layer; at 989 TFLOP/s x 0.15 that is 5.5 ms, far above the time of its ~0.03 GB
    of MXFP4 weights (~10 us)."""
    model, hw = load_model("gpt-oss-120b"), load_hardware("h100-sxm")
    prof = _flat(experts__mxfp4_bf16=0.3, experts__mxfp4_bf16__marlin=0.15)
    lay = Layout("both", dp=1, tp=2, expert_parallel=False, moe_backend=backend)
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    assert sm.ep_side("none").kernel_dtype() == ("mxfp4_bf16.marlin" if backend else "mxfp4_bf16")
    t_exp = sm._price_moe(8192.0, 8192.0, 1, "none", "prefill", 0.0)[1]
    busiest = 8192.0 * model.moe.top_k * sm.imbalance_at(8192.0, 1)
    flops, nbytes, _, n, k = expert_work(model, busiest, max(distinct_experts_busiest(model, lay, 8192.0), 1.0), 2)
    assert flops == pytest.approx(2 * 32768 * 2880 * 1440 * 3 * busiest / 32768, rel=1e-9)  # 3 GEMM widths of 1440
    t_mem = nbytes / (hw.hbm_bw * efficiency.memory(prof, nbytes))
    assert flops / (hw.flops_for("bf16") * eff) > t_mem  # compute-bound: the curve sets the price
    assert t_exp == pytest.approx(flops / (hw.flops_for("bf16") * eff) + prof.op_fixed_s, rel=1e-9)


def test_marlin_that_cannot_run_is_refused():
    """marlin runs MXFP4 experts computed in BF16 without DeepEP: block-FP8 experts, or a DeepEP layout, are refused
    naming the field; gpt-oss at TP 2 runs."""
    hw = load_hardware("h100-sxm")
    oss, fp8 = load_model("gpt-oss-120b"), load_model("deepseek-v3")
    validate_layout(Layout("both", dp=1, tp=2, expert_parallel=False, moe_backend="marlin"), oss, hw, "both[0]")
    for lay, model in ((Layout("both", dp=1, tp=8, expert_parallel=False, moe_backend="marlin"), fp8),
                       (Layout("both", dp=2, moe_backend="marlin"), oss)):
        with pytest.raises(SpecError) as exc:
            validate_layout(lay, model, hw, "both[0]")
        assert exc.value.field == "both[0].moe_backend"


@pytest.mark.profile_data
def test_shipped_marlin_class_is_slower_than_triton_at_gptoss_sizes():
    """The shipped h100 class (fitted on vLLM 0.24.0's Marlin MXFP4 rows, another shape) against the Triton class at
    gpt-oss's TP 1 expert shape (n 5760, k 2880): Marlin's weight-only kernel reaches less of the BF16 peak at every
    prefill size (session 17's reading: 184-230 TFLOP/s from 2k tokens vs 392-560 for Triton; here the curves alone).
    Rows per expert: tokens x 4 / 128."""
    prof = load_profile("h100-sxm-vllm")
    for tokens in (2048.0, 8192.0):
        rows = tokens * 4 / 128
        flops = 2 * rows * 128 * 5760 * 2880
        tri = efficiency.experts(prof, "mxfp4_bf16", rows, 5760, 2880, flops, tokens * 4 / 128)
        mar = efficiency.experts(prof, "mxfp4_bf16.marlin", rows, 5760, 2880, flops, tokens * 4 / 128)
        assert 0.0 < mar < tri
