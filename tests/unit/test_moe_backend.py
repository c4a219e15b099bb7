"""The routed-experts kernel chosen by the layout's engine (Layout.engine, Layout.moe_backend; sim/cost/efficiency.py
expert_backend, backend_dtype): SGLang's DeepEP MoE runs DeepGEMM's grouped GEMMs for block-FP8 experts, priced by
experts.fp8_block.deepgemm (behind the normal dispatch) and experts.fp8_block.deepgemm_masked (behind the low-latency
one) where the profile measures them, and by the profile's experts.fp8_block (vLLM's kernel) elsewhere. Worked by
hand on a profile whose curves are flat (eff_max only); no pyarrow."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rackplan.calibration.opdb_ops import deepep_uniform_routing
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


def test_engine_defaults_and_the_explicit_backend():
    """SGLang's default behind DeepEP is DeepGEMM (documented: DeepEPMoE with SGLANG_ENABLE_JIT_DEEPGEMM on); vLLM's is
    the profile's own class; an explicit moe_backend wins over the engine's."""
    assert efficiency.expert_backend(Layout("prefill", dp=4, engine="sglang")) == "deepgemm"
    assert efficiency.expert_backend(Layout("prefill", dp=4)) is None
    assert efficiency.expert_backend(Layout("prefill", dp=4, engine="vllm")) is None
    assert efficiency.expert_backend(Layout("prefill", dp=4, moe_backend="deepgemm")) == "deepgemm"


def test_backend_class_only_where_the_profile_measures_it():
    prof = _flat(experts__fp8_block__deepgemm=0.5)
    assert efficiency.backend_dtype(prof, "fp8_block", "deepgemm", "high_throughput") == "fp8_block.deepgemm"
    # no masked class in this profile, no DeepEP exchange, another weight format, no backend: the dtype's class
    assert efficiency.backend_dtype(prof, "fp8_block", "deepgemm", "low_latency") == "fp8_block"
    assert efficiency.backend_dtype(prof, "fp8_block", "deepgemm", "") == "fp8_block"
    assert efficiency.backend_dtype(prof, "fp4", "deepgemm", "high_throughput") == "fp4"
    assert efficiency.backend_dtype(prof, "fp8_block", None, "high_throughput") == "fp8_block"
    sheet = load_profile("datasheet")
    assert efficiency.backend_dtype(sheet, "fp8_block", "deepgemm", "high_throughput") == "fp8_block"


@pytest.mark.parametrize("engine, eff", [("sglang", 0.5), (None, 0.2)])
def test_sglang_prefill_experts_priced_on_the_deepgemm_curve(engine, eff):
    """DeepSeek-V3 DEP4 prefill on GB200, 16,384 tokens a rank: moe.experts on the busiest rank is the roofline of
    expert_work at the FP8 peak times the curve of the engine's kernel (SGLang: experts.fp8_block.deepgemm, 0.5; vLLM:
    experts.fp8_block, 0.2), by hand."""
    model, hw = load_model("deepseek-v3"), load_hardware("gb200-nvl72")
    prof = _flat(experts__fp8_block=0.2, experts__fp8_block__deepgemm=0.5)
    lay = Layout("prefill", dp=4, engine=engine)
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    t_global = 4 * 16384.0
    t_exp = sm._price_moe(t_global, 16384.0, 1, "high_throughput", "prefill", 0.0)[1]
    busiest = t_global * model.moe.top_k / 4 * sm.imbalance_at(t_global, 1)
    flops, nbytes, _, _, _ = expert_work(model, busiest, max(distinct_experts_busiest(model, lay, t_global), 1.0))
    t_mem = nbytes / (hw.hbm_bw * efficiency.memory(prof, nbytes))
    assert flops / (hw.flops_for("fp8") * eff) > t_mem  # compute-bound: the curve sets the price
    assert t_exp == pytest.approx(flops / (hw.flops_for("fp8") * eff) + prof.op_fixed_s, rel=1e-9)


def test_sglang_decode_takes_the_masked_class():
    """Behind DeepEP's low-latency dispatch SGLang runs DeepGEMM's masked grouped GEMM: its own class (0.4), not the
    contiguous one's (0.5)."""
    model, hw = load_model("deepseek-v3"), load_hardware("gb200-nvl72")
    prof = _flat(experts__fp8_block=0.2, experts__fp8_block__deepgemm=0.5, experts__fp8_block__deepgemm_masked=0.4)
    sm = StepModel(CostContext(model, hw, Layout("decode", dp=48, engine="sglang"), prof, 0.0))
    side = sm.ep_side("low_latency")
    assert side.kernel_dtype() == "fp8_block.deepgemm_masked"
    assert sm.ep_side("high_throughput").kernel_dtype() == "fp8_block.deepgemm"


def test_an_explicit_backend_that_cannot_run_is_refused():
    """moe_backend deepgemm runs block-FP8 experts behind DeepEP: MXFP4 experts, a TP MoE or the all-gather exchange
    are refused naming the field (V4-Flash: MXFP4 experts)."""
    hw = load_hardware("gb200-nvl72")
    fp8, fp4 = load_model("deepseek-v3"), load_model("deepseek-v4-flash")
    validate_layout(Layout("prefill", dp=8, moe_backend="deepgemm"), fp8, hw, "prefill[0]")  # runs (and fits)
    for lay, model in ((Layout("prefill", dp=4, moe_backend="deepgemm"), fp4),
                       (Layout("prefill", dp=1, tp=4, moe_backend="deepgemm"), fp8),
                       (Layout("prefill", dp=4, all2all="allgather_reducescatter", moe_backend="deepgemm"), fp8)):
        with pytest.raises(SpecError) as exc:
            validate_layout(lay, model, hw, "prefill[0]")
        assert exc.value.field == "prefill[0].moe_backend"


def test_wideep_uniform_rows_by_hand():
    """The wideep tables' num_tokens are every rank's tokens: a uniform row puts floor(T x 8 / 256) rows on each of
    the rank's 256 / ep experts, or one row on each of the first T x 8 / ep where that floor is 0."""
    pairs, hit = deepep_uniform_routing(np.array([65536, 32768, 16, 32]), 256, 8, np.array([4, 256, 32, 2]))
    # 65536 x 8 / 256 = 2048 rows on 64 experts; 1024 on 1; 16 x 8 / 256 = 0 -> 16 x 8 / 32 = 4 experts of 1;
    # 32 x 8 / 256 = 1 row on 128 experts
    assert pairs.tolist() == [131072, 1024, 4, 128]
    assert hit.tolist() == [64, 1, 4, 128]


@pytest.mark.profile_data
def test_explain_names_the_engines_class():
    """`rackplan explain` names the class that priced the experts: on the shipped gb200 profile, SGLang's DeepGEMM
    classes per phase, vLLM's experts.fp8_block without the engine."""
    from rackplan.sim.commands.explain import _classes

    model, hw, prof = load_model("deepseek-v3"), load_hardware("gb200-nvl72"), load_profile("gb200-nvl72-vllm")
    sg = CostContext(model, hw, Layout("decode", dp=48, engine="sglang"), prof, 0.0)
    assert _classes(sg, "moe.experts", "prefill") == ("experts.fp8_block.deepgemm",)
    assert _classes(sg, "moe.route", "decode") == ("moe.route.fp8_block.deepgemm_masked",)
    vl = CostContext(model, hw, Layout("decode", dp=48), prof, 0.0)
    assert _classes(vl, "moe.experts", "decode") == ("experts.fp8_block",)


def test_deploy_refuses_what_it_cannot_write():
    """`rackplan deploy` writes vLLM: another engine, or a MoE backend it does not choose, is refused naming the
    field."""
    from rackplan.deploy.engine import parallel_flags

    assert "--enable-expert-parallel" in parallel_flags(Layout("decode", dp=8, engine="vllm"))
    for edit, field in (({"engine": "sglang"}, "decode.engine"), ({"moe_backend": "deepgemm"}, "decode.moe_backend")):
        with pytest.raises(SpecError) as exc:
            parallel_flags(Layout("decode", dp=8, **edit))
        assert exc.value.field == field
