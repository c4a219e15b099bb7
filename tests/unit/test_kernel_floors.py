"""Kernel floors counted once per kernel the engine runs (sim/cost/attention.py decode_layers, layer.py
quant_widths), derived by hand.

V4 decode: FlashMLA's sparse decode kernel attends the sliding window as extra tokens of the compressed
cache's call (flash_mla_with_kvcache `extra_k_cache`), so V4-Flash's 43 layers run 43 attention kernels
(21 swa + csa, 20 swa + hca, 2 swa alone), not 84 (one per KV component per layer).
Quantisation: a measured GEMM curve times the whole linear, activation quantisation included, so the
quantize op is not priced again for a GEMM priced by such a curve.
"""
import pytest

from rackplan.sim.cost import attention as attn
from rackplan.sim.cost.layer import quant_widths
from rackplan.specs import Curve, Layout, Profile, load_hardware, load_model, load_profile, ops

pytestmark = pytest.mark.unit

V4F, V41 = load_model("deepseek-v4-flash"), load_model("deepseek-v4.1-flash")
GB300 = load_hardware("gb300-nvl72")
FLOOR_FLOPS = 1.0e12  # the curve's work_half: a fixed time of FLOOR_FLOPS / (peak x EFF) per kernel
EFF = 0.5


def _floor_profile() -> Profile:
    """A profile whose V4 decode attention curve is a constant EFF plus a fixed time per kernel."""
    return Profile(name="floor", curves={"attn.decode.csa.bf16": (Curve(eff_max=EFF, work_half=FLOOR_FLOPS),)})


def _parts(model, prof, tp=4):
    dtype = model.dtypes.attention_compute_dtype
    return tuple((attn.Component(model, c, tp, GB300, prof, dtype), c.layers) for c in model.attention.kv)


@pytest.mark.parametrize("model, kernels", [(V4F, 21 + 20 + 2), (V41, 40)])
def test_v4_decode_pays_one_kernel_floor_per_layer(model, kernels):
    prof = _floor_profile()
    peak = GB300.flops_for(model.dtypes.attention_compute_dtype)
    floor_s = FLOOR_FLOPS / (peak * EFF)  # ~0.8 ms at the GB300 BF16 peak: compute outweighs every HBM read here
    sec, flops, _ = attn.decode_layers(_parts(model, prof), 1.0, 4096.0, 1.0)
    # each kernel: max(compute, memory) + op_fixed_s, compute = (flops + FLOOR_FLOPS) / (peak x EFF)
    assert sec == pytest.approx(kernels * (floor_s + prof.op_fixed_s) + flops / (peak * EFF))


@pytest.mark.parametrize("model", [V4F, V41])
def test_fused_decode_does_the_components_work(model):
    prof = load_profile("gb300-nvl72-vllm")
    parts = _parts(model, prof)
    _, flops, nbytes = attn.decode_layers(parts, 8.0, 8.0 * 4096, 2.0)
    apart = [comp.decode(8.0, 8.0 * 4096, 2.0, layers) for comp, layers in parts]
    assert flops == pytest.approx(sum(a[1] for a in apart))
    assert nbytes == pytest.approx(sum(a[2] for a in apart))


def test_fused_decode_is_cheaper_by_the_floors_it_saves():
    prof = _floor_profile()
    parts = _parts(V4F, prof)
    fused, _, _ = attn.decode_layers(parts, 1.0, 4096.0, 1.0)
    apart = sum(comp.decode(1.0, 4096.0, 1.0, layers)[0] for comp, layers in parts)
    floor_s = FLOOR_FLOPS / (GB300.flops_for("bf16") * EFF) + prof.op_fixed_s
    assert apart - fused == pytest.approx((84 - 43) * floor_s)


V3 = load_model("deepseek-v3")


def _v3_gemms():
    lay = Layout(role="decode", dp=8, tp=1, ep=8)
    return ops.layer_gemms(V3, lay, V3.num_dense_layers, V3.num_layers - V3.num_dense_layers)


def test_quantize_priced_where_the_gemm_is_a_roofline():
    # datasheet: every FP8 GEMM input is quantised by its own kernel (V3 attention: the hidden state once,
    # q_b's and kv_b's latent inputs, o's input; the dense FFN (3 layers), the shared expert: input, SwiGLU output)
    widths = quant_widths(_v3_gemms(), V3.hidden_size, load_profile("datasheet"))
    assert [w for w, _ in widths] == [(7168, 1536, 512, 16384), (7168, 18432), (7168, 2048)]
    assert quant_widths(_v3_gemms(), V3.hidden_size) == quant_widths(_v3_gemms(), V3.hidden_size,
                                                                     load_profile("datasheet"))


def test_quantize_not_priced_again_under_a_measured_gemm_curve():
    prof = load_profile("h200-sxm-vllm")  # gemm.fp8_block (m >= 32) and gemm.fp8: whole-linear timings
    assert quant_widths(_v3_gemms(), V3.hidden_size, prof) == ()
    only_fp8 = Profile(name="fp4-only", curves={"gemm.fp4": prof.curves["gemm.fp8"]})  # FP8 GEMMs: roofline
    assert quant_widths(_v3_gemms(), V3.hidden_size, only_fp8) == quant_widths(_v3_gemms(), V3.hidden_size)
