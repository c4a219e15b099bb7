"""The dense MLA prefill path chosen by the layout's engine on Blackwell (sim/cost/efficiency.py prefill_backend):
vLLM v0.14.1 runs FlashInfer's CUTLASS FMHA on the SM100 family (`use_flashinfer_prefill`, the wheel's
v1/attention/backends/mla/common.py) after materialising K per head (`_concat_k_nope_k_pe`) and then copies the
output (`output.copy_`); those two copies are priced as memory traffic at HBM bandwidth (the kernel stays at the
curve). SGLang, Hopper and sparse components keep the curve alone. Worked by hand on DeepSeek-V3."""
from __future__ import annotations

import pytest

from rackplan.sim.cost import attention as attn
from rackplan.sim.cost import efficiency
from rackplan.specs import Layout, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit


def test_engine_prefill_path_by_compute_capability_family():
    """vLLM on B200 / GB200 (10.0) and B300 / GB300 (10.3): flashinfer_cutlass; SGLang there: None (its TRT-LLM
    kernel, the curve's own); vLLM on Hopper: None; a kind other than MLA: None."""
    hws = {n: load_hardware(n) for n in ("b200", "gb200-nvl72", "b300", "gb300-nvl72", "h200-sxm")}
    assert [hws[n].compute_capability for n in hws] == [100, 100, 103, 103, 90]
    lay, sg = Layout("prefill", dp=1, tp=2), Layout("prefill", dp=1, tp=2, engine="sglang")
    for name in ("b200", "gb200-nvl72", "b300", "gb300-nvl72"):
        assert efficiency.prefill_backend(lay, hws[name], "mla") == "flashinfer_cutlass"
        assert efficiency.prefill_backend(sg, hws[name], "mla") is None
    assert efficiency.prefill_backend(lay, hws["h200-sxm"], "mla") is None
    assert efficiency.prefill_backend(lay, hws["gb300-nvl72"], "gqa") is None


def test_prefill_copies_by_hand():
    """DeepSeek-V3 at TP2 (64 heads a rank), BF16 activations, nope 128, rope 64, v 128. A key: read k_nope
    64 x 128 x 2 = 16,384 B and k_pe 64 x 2 = 128 B, write K 64 x 192 x 2 = 24,576 B: 41,088 B. A new token: read and
    write the output, 2 x 64 x 128 x 2 = 32,768 B. One prompt of 2,048 tokens, one layer: 84,148,224 B of K and
    67,108,864 B of output, two streaming kernels at the profile's memory efficiency of HBM's 8 TB/s on GB300,
    on top of the curve's kernel."""
    model, hw, prof = load_model("deepseek-v3"), load_hardware("gb300-nvl72"), load_profile("gb300-nvl72-vllm")
    comp = model.attention.kv[0]
    assert attn.prefill_copies(model, comp, 64.0) == (41088.0, 32768.0)
    path = attn.Component(model, comp, 2, hw, prof, "bf16", None, "flashinfer_cutlass")
    curve = attn.Component(model, comp, 2, hw, prof, "bf16")
    chunks = ((1.0, 2048.0, 0.0),)
    sec, flops, nbytes = path.prefill(chunks, 1)
    sec0, flops0, nbytes0 = curve.prefill(chunks, 1)
    k_bytes, out_bytes = 2048 * 41088.0, 2048 * 32768.0
    assert (k_bytes, out_bytes) == (84148224.0, 67108864.0)
    by_hand = sum(b / (8.0e12 * prof.mem_eff * b / (b + prof.mem_bytes_half)) + prof.op_fixed_s
                  for b in (k_bytes, out_bytes))
    assert hw.hbm_bw == 8.0e12
    assert sec - sec0 == pytest.approx(by_hand, rel=1e-9)
    assert flops == flops0 and nbytes - nbytes0 == pytest.approx(k_bytes + out_bytes)
    # a prompt's second chunk (1,024 new tokens after 1,024 cached) materialises K over all 2,048 keys it attends
    extra = path.prefill(((1.0, 1024.0, 1024.0),), 1)[2] - curve.prefill(((1.0, 1024.0, 1024.0),), 1)[2]
    assert extra == pytest.approx(2048 * 41088.0 + 1024 * 32768.0)


def test_the_step_prices_the_engines_prefill_path():
    """The step pricer's own attention Components: vLLM on GB300 carries the copies, SGLang on GB200 and vLLM on
    H200 do not."""
    from rackplan.sim.cost.step import CostContext, StepModel

    model = load_model("deepseek-v3")
    for hw_name, prof_name, engine, carries in (("gb300-nvl72", "gb300-nvl72-vllm", None, True),
                                                ("gb200-nvl72", "gb200-nvl72-vllm", "sglang", False),
                                                ("h200-sxm", "h200-sxm-vllm", None, False)):
        cx = CostContext(model, load_hardware(hw_name), Layout("prefill", dp=1, tp=2, engine=engine),
                         load_profile(prof_name), 0.0)
        comps = [c for g in StepModel(cx).layers.groups_prefill for c, _ in g.attention]
        assert comps and all((c.copies is not None) == carries for c in comps)


def test_explain_names_the_engines_prefill_path():
    """`rackplan explain` says the vLLM Blackwell prefill core carries the engine's copies; SGLang's does not."""
    from rackplan.sim.commands.explain import _curve
    from rackplan.sim.cost.step import CostContext

    model, hw, prof = load_model("deepseek-v3"), load_hardware("gb300-nvl72"), load_profile("gb300-nvl72-vllm")
    vllm = CostContext(model, hw, Layout("prefill", dp=1, tp=2), prof, 0.0)
    sglang = CostContext(model, hw, Layout("prefill", dp=1, tp=2, engine="sglang"), prof, 0.0)
    assert "flashinfer_cutlass prefill path" in _curve(vllm, "attn.core", "prefill")[0]
    assert "flashinfer_cutlass" not in _curve(sglang, "attn.core", "prefill")[0]
