"""Hand-derived golden values for the cost models (derivations in comments)."""
import math

import pytest

from rackplan.sim.cost import alltoall, moe
from rackplan.sim.cost.step import CostContext, decode_step, prefill_step
from rackplan.specs import Layout, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit
V3 = load_model("deepseek-v3")
H200 = load_hardware("h200-sxm")
PROF = load_profile("datasheet")
# One DeepSeek-V3 routed expert: 3 x 7168 x 2048 = 44,040,192 params, FP8 with one fp32 scale per
# 128x128 block: x (1 + 4/16384) = 44,050,944.75 bytes.
EXPERT_BYTES = 3 * 7168 * 2048 * (1 + 4 / 16384)


def test_mla_kv_bytes_per_token_fp8():
    # (kv_lora 512 + rope 64) x 1 B x 61 layers = 35,136 B
    assert V3.kv_bytes_per_token == (512 + 64) * 61 == 35_136


def test_v3_param_count_matches_published():
    # README: 671B total incl. 0.9B embedding + 0.9B head (MTP excluded)
    total = sum(V3.param_counts().values())
    assert abs(total / 1e9 - 671) < 1.5


def test_expert_bytes():
    assert moe.expert_bytes(V3) == pytest.approx(EXPERT_BYTES)


@pytest.mark.parametrize("dp,batch,expected_distinct", [
    # DEP8, batch 1/rank: T = 8 tokens; P(expert hit) = 1 - (1 - 8/256)^8 = 0.2243462...;
    # 256/8 = 32 local experts -> 7.179 experts read per layer.
    (8, 1, 32 * (1 - (31 / 32) ** 8)),
    # DEP8, batch 256: T = 2048 -> every local expert is hit: 32.
    (8, 256, 32.0),
    # DEP72, batch 1: T = 72; P = 1 - (31/32)^72 = 0.89836; 256/72 = 3.5556 local -> 3.194.
    (72, 1, 256 / 72 * (1 - (31 / 32) ** 72)),
    # DEP72, batch 256: T = 18,432 -> all 3.5556 local experts.
    (72, 256, 256 / 72),
])
def test_v3_expert_bytes_read_per_decode_step(dp, batch, expected_distinct):
    lay = Layout(role="decode", dp=dp)
    distinct = moe.distinct_experts_per_rank(V3, lay, dp * batch)
    assert distinct == pytest.approx(expected_distinct, rel=1e-9)
    # Weight bytes read by the routed experts in one step: distinct x expert bytes x 58 MoE layers.
    step = decode_step(CostContext(V3, H200, lay, PROF), batch, batch * 2000)
    op = next(o for o in step.ops if o.name == "moe.experts")
    weights = expected_distinct * EXPERT_BYTES * 58
    activations = op.bytes - weights
    # the rest is activation traffic: busiest-rank token-expert pairs x (2*7168 + 3*2048) x 2 B
    assert 0 < activations < 0.2 * op.bytes or batch == 256
    assert weights == pytest.approx(op.bytes - activations)
    if dp == 8 and batch == 256:
        assert weights / 1e9 == pytest.approx(81.76, rel=1e-3)  # 32 x 44.05 MB x 58


def test_v3_kv_read_per_decode_step():
    # attn.core bytes at batch 256, context 2000 each: 256 x 2000 x 576 B x 61 layers = 17.99 GB
    lay = Layout(role="decode", dp=8)
    step = decode_step(CostContext(V3, H200, lay, PROF), 256, 256 * 2000)
    op = next(o for o in step.ops if o.name == "attn.core")
    assert op.bytes == pytest.approx(256 * 2000 * 576 * 61)


def test_v3_prefill_attention_flops_4096():
    # One 4,096-token prompt: pairs = n x (p + n/2) = 4096 x 2048 = 8,388,608 (n^2/2; exact causal is
    # n(n+1)/2 = 8,390,656, 0.02% more). FLOPs = 2 x 128 heads x pairs x (192 qk + 128 v) x 61.
    lay = Layout(role="prefill", dp=1)
    step = prefill_step(CostContext(V3, H200, lay, PROF), [4096])
    op = next(o for o in step.ops if o.name == "attn.core")
    assert op.flops == pytest.approx(2 * 128 * 8_388_608 * 320 * 61)


def test_v3_prefill_gemm_flops_4096():
    # Dense-weight GEMM FLOPs = 2 x tokens x params per token:
    # attention projections 187.1M x 61; dense FFN 3 x 7168 x 18432 x 3 layers; shared expert
    # 44.04M x 58; routed 8 experts x 44.04M x 58 (busiest rank, imbalance 1 on one rank).
    lay = Layout(role="prefill", dp=1)
    step = prefill_step(CostContext(V3, H200, lay, PROF), [4096])
    ops = step.breakdown()
    fl = {o.name: o.flops for o in step.ops}
    proj = V3.attention.projection_params(7168)
    assert proj == 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert fl["attn.proj"] == pytest.approx(2 * 4096 * proj * 61)
    assert fl["dense_ffn"] == pytest.approx(2 * 4096 * 3 * 7168 * 18432 * 3)
    assert fl["moe.experts"] == pytest.approx(2 * 4096 * 8 * 3 * 7168 * 2048 * 58)
    assert "moe.dispatch" not in ops  # EP1: nothing leaves the rank; the local permute is priced instead
    act = 2.0  # bf16 activations: read + write of the k copies, read them back, write the tokens
    assert {o.name: o.bytes for o in step.ops}["moe.permute"] == pytest.approx(4096 * 7168 * act * (3 * 8 + 1) * 58)


@pytest.mark.parametrize("dp,hw_name,nvlink_frac", [(8, "h200-sxm", 1.0), (72, "h200-sxm", 7 / 71),
                                                     (72, "gb200-nvl72", 1.0)])
def test_dispatch_bytes_per_rank(dp, hw_name, nvlink_frac):
    # 256 tokens; each goes to (ep-1)(1-(1-1/ep)^8) other ranks; FP8 payload 7168 + 7168/128 x 4 = 7,392 B.
    hw = load_hardware(hw_name)
    lay = Layout(role="decode", dp=dp)
    remote = (dp - 1) * (1 - (1 - 1 / dp) ** 8)
    if dp == 8:
        assert remote == pytest.approx(4.5947, abs=1e-4)
    nv, so = alltoall.a2a_bytes(V3, lay, hw, 256, "fp8")
    total = 256 * remote * 7392
    assert nv + so == pytest.approx(total)
    assert nv == pytest.approx(total * nvlink_frac)


def test_more_batch_never_cheaper():
    lay = Layout(role="decode", dp=8)
    cx = CostContext(V3, H200, lay, PROF)
    times = [decode_step(cx, b, b * 1000).seconds for b in (1, 8, 64, 256)]
    assert times == sorted(times)
    assert not any(math.isnan(t) for t in times)
