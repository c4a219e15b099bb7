"""The dense MLA decode kernel chosen by the layout's engine on the hardware (sim/cost/efficiency.py
attention_backend): vLLM 0.11 runs FlashMLA on Hopper (vllm/platforms/cuda.py), priced at FlashMLA's published
660 TFLOP/s on H800 SXM5 (989 TFLOP/s dense BF16); SGLang's Hopper default (FA3) and every other GPU keep the
profile's attn.decode curve. Worked by hand on DeepSeek-V3's absorbed MLA decode."""
from __future__ import annotations

import dataclasses

import pytest

from rackplan.accuracy import cases as ac
from rackplan.sim.cost import attention as attn
from rackplan.sim.cost import efficiency
from rackplan.sim.cost.host import HOST_PARTS
from rackplan.sim.cost.moe import physical_experts_per_rank
from rackplan.sim.cost.step import CostContext, StepModel, decode_step
from rackplan.specs import Curve, Layout, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit


def test_engine_defaults_by_compute_capability():
    """vLLM on SM90 (H100 / H200 / H800): FlashMLA; SGLang on SM90: the curve's own kernel (None); vLLM on a GPU that
    is not SM90 (GB200: CUTLASS MLA in vLLM 0.11): None; a kind other than MLA: None."""
    h200, h100, h800, gb200 = (load_hardware(n) for n in ("h200-sxm", "h100-sxm", "h800", "gb200-nvl72"))
    assert (h200.compute_capability, h100.compute_capability, h800.compute_capability) == (90, 90, 90)
    lay, sg = Layout("decode", dp=32), Layout("decode", dp=32, engine="sglang")
    assert efficiency.attention_backend(lay, h200, "mla") == "flashmla"
    assert efficiency.attention_backend(Layout("decode", dp=32, engine="vllm"), h100, "mla") == "flashmla"
    assert efficiency.attention_backend(sg, h200, "mla") is None
    assert efficiency.attention_backend(lay, gb200, "mla") is None
    assert efficiency.attention_backend(lay, h200, "gqa") is None


def test_flashmla_decode_core_by_hand():
    """DeepSeek-V3, one layer, 256 sequences at context 3,000, one query token, 128 heads (DP attention, TP 1):
    FLOPs 2 x 256 x 128 x 3,000 x (576 + 512) = 213.9 GFLOP; the latent read (256 x 3,000 entries of the model's
    entry_bytes) takes less at H200's 4.8 TB/s than the math at 660 TFLOP/s, so the kernel is compute-bound:
    213.9e9 / 660e12 = 324.1 us plus the profile's fixed per-kernel time. The profile's curve (vLLM 0.24's
    FLASH_ATTN_MLA) prices it slower."""
    model, hw = load_model("deepseek-v3"), load_hardware("h200-sxm")
    prof = load_profile("h200-sxm-vllm")
    comp = model.attention.kv[0]
    flash = attn.Component(model, comp, 1, hw, prof, "bf16", "flashmla")
    curve = attn.Component(model, comp, 1, hw, prof, "bf16")
    flops = 2.0 * 256 * 128 * 3000 * (576 + 512)
    assert flops == pytest.approx(213.91e9, rel=1e-4)
    sec, f, nbytes = flash.decode(256.0, 256.0 * 3000, 1.0, 1)
    assert f == pytest.approx(flops)
    assert nbytes / hw.hbm_bw < flops / 660e12  # compute-bound
    assert sec == pytest.approx(flops / 660e12 + prof.op_fixed_s, rel=1e-9)
    assert curve.decode(256.0, 256.0 * 3000, 1.0, 1)[0] > sec


@pytest.mark.parametrize("engine, faster", [(None, True), ("sglang", False)])
def test_the_step_prices_the_engines_kernel(engine, faster):
    """A DEP32 decode step on H200 (h200-sxm-vllm): the vLLM layout's attention core is the FlashMLA price, the SGLang
    layout's the profile's curve (read from the step pricer's own attention Component)."""
    model, hw, prof = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_profile("h200-sxm-vllm")
    comp = model.attention.kv[0]
    lay = Layout("decode", dp=32, max_batch_per_rank=256, engine=engine)
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    backend = efficiency.attention_backend(lay, hw, model.attention.kind)
    assert (backend == "flashmla") is faster
    got = sm.layers.groups_decode[0].attention[0][0].decode_eff(256.0, 3000.0, 1.0, 128.0)
    want = 660.0 / 989.0 if faster else attn.Component(model, comp, 1, hw, prof, "bf16").decode_eff(
        256.0, 3000.0, 1.0, 128.0)
    assert got == pytest.approx(want)


def test_vllm_h200_decode_case_runs_the_llm_d_benchmark_manifest_by_hand():
    """The vLLM H200 wide-EP decode rows run what llm-d 0.3's benchmarking manifest passes (llm-d PR #290, v0.3.0
    guide decode.yaml): engine vllm on SM90 (FlashMLA), --enable-dbo, --async-scheduling, --enable-eplb with 32
    redundant experts. EPLB slots by hand: (256 + 32) / 32 = 9, / 72 = 4, / 96 = 3 a rank (32 divides all three,
    which is why the manifest picks it). With async scheduling and a CUDA graph only the DP collective is exposed
    (sim/cost/host.py); synchronous, the step adds every host part but the graph launch."""
    cases = {c.id: c for c in ac.load_cases()}
    for cid, slots in (("vllm-h200-decode-dep32", 9.0), ("vllm-h200-decode-dep72", 4.0),
                       ("vllm-h200-decode-dep96", 3.0)):
        side = ac.resolve(cases[cid])
        lay = side.instance
        assert lay.async_scheduling and lay.dbo and lay.dbo_decode_token_threshold == 32
        assert (lay.eplb.redundant_experts, lay.eplb.policy) == (32, "hierarchical")
        assert physical_experts_per_rank(side.model, lay) == slots
    side = ac.resolve(cases["vllm-h200-decode-dep32"])
    lay = side.instance
    assert (lay.engine or "vllm") == "vllm"
    assert efficiency.attention_backend(lay, side.hw, side.model.attention.kind) == "flashmla"
    prof = load_profile("h200-sxm-vllm")
    on = decode_step(CostContext(side.model, side.hw, lay, prof, 0.0), 256, 256 * 3000.0)
    parts = dict(zip(HOST_PARTS, on.host.parts))
    assert on.host.exposed_s == pytest.approx(parts["host.dp_sync"], rel=1e-9)
    sync = decode_step(CostContext(side.model, side.hw, dataclasses.replace(lay, async_scheduling=False), prof, 0.0),
                       256, 256 * 3000.0)
    assert sync.host.exposed_s == pytest.approx(sum(parts.values()) - parts["host.launch"], rel=1e-9)
    assert sync.seconds - on.seconds == pytest.approx(sync.host.exposed_s - on.host.exposed_s, rel=1e-9)
    for cid in ("vllm-h200-prefill-dep8", "vllm-h200-prefill-dep16", "vllm-h200-prefill-dep32"):
        lay = ac.resolve(cases[cid]).instance
        assert lay.async_scheduling and lay.dbo and lay.dbo_prefill_token_threshold == 32
        assert lay.eplb.redundant_experts == 32


def test_vllm_on_hopper_runs_deepgemm_behind_deepep():
    """vLLM 0.11.0's block-FP8 MoE behind DeepEP on SM90 is DeepGEMM (quantization/fp8.py allow_deep_gemm,
    select_gemm_impl); on a GPU the source does not settle (GB200) and without hardware, the profile's own class. The
    H200 step takes DeepGEMM's masked class behind the low-latency dispatch where the profile measures it, and vLLM's
    experts.fp8_block where it does not."""
    model, h200, gb200 = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_hardware("gb200-nvl72")
    lay = Layout("decode", dp=32, max_batch_per_rank=256)
    assert efficiency.expert_backend(lay, h200) == "deepgemm"
    assert efficiency.expert_backend(lay, gb200) is None and efficiency.expert_backend(lay) is None
    assert efficiency.expert_backend(Layout("decode", dp=32, engine="sglang"), gb200) == "deepgemm"
    flat = dataclasses.replace(load_profile("datasheet"), curves={
        k: (Curve(eff_max=v),) for k, v in (("experts.fp8_block", 0.2), ("experts.fp8_block.deepgemm_masked", 0.4))})
    sm = StepModel(CostContext(model, h200, lay, flat, 0.0))
    assert sm.ep_side("low_latency").kernel_dtype() == "fp8_block.deepgemm_masked"
    assert sm.ep_side("high_throughput").kernel_dtype() == "fp8_block"  # (no contiguous class in this profile)
    sheet = StepModel(CostContext(model, h200, lay, load_profile("datasheet"), 0.0))
    assert sheet.ep_side("low_latency").kernel_dtype() == "fp8_block"


def test_explain_names_the_engines_attention_kernel():
    """`rackplan explain` says which rate priced the decode attention core: FlashMLA's for vLLM on H200, the curve
    for SGLang there and for every prefill core."""
    from rackplan.sim.commands.explain import _curve

    model, hw, prof = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_profile("h200-sxm-vllm")
    vllm = CostContext(model, hw, Layout("decode", dp=32), prof, 0.0)
    sglang = CostContext(model, hw, Layout("decode", dp=32, engine="sglang"), prof, 0.0)
    assert _curve(vllm, "attn.core", "decode")[0].startswith("flashmla's published rate, 0.667")
    assert _curve(sglang, "attn.core", "decode")[0].startswith("attn.decode.mla.bf16")
    assert _curve(vllm, "attn.core", "prefill")[0].startswith("attn.prefill.mla.bf16")
