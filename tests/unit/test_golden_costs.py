"""Hand-derived golden values for the cost models (derivations in comments)."""
import math

import numpy as np
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


@pytest.mark.parametrize("dp,batch,expected_distinct,busiest", [
    # DEP8, batch 1/rank: T = 8 tokens; P(expert hit) = 1 - (1 - 8/256)^8 = 0.2243462...;
    # 256/8 = 32 local experts -> 7.179 experts read per layer on average. The step waits for the
    # rank reading the most: + sqrt(2 ln 8) x sqrt(32 x 0.2243 x 0.7757) = + 2.039 x 2.360.
    (8, 1, 32 * (1 - (31 / 32) ** 8), 32 * (1 - (31 / 32) ** 8)
     + math.sqrt(2 * math.log(8)) * math.sqrt(32 * (1 - (31 / 32) ** 8) * (31 / 32) ** 8)),
    # DEP8, batch 256: T = 2048 -> every local expert is hit: 32 (no spread).
    (8, 256, 32.0, 32.0),
    # DEP72, batch 1: T = 72; P = 1 - (31/32)^72 = 0.89836; 256/72 = 3.5556 local -> 3.194;
    # the busiest: + sqrt(2 ln 72) x sqrt(3.5556 x 0.89836 x 0.10164), at most the 3.5556 slots.
    (72, 1, 256 / 72 * (1 - (31 / 32) ** 72), 256 / 72),
    # DEP72, batch 256: T = 18,432 -> all 3.5556 local experts.
    (72, 256, 256 / 72, 256 / 72),
])
def test_v3_expert_bytes_read_per_decode_step(dp, batch, expected_distinct, busiest):
    lay = Layout(role="decode", dp=dp)
    distinct = moe.distinct_experts_per_rank(V3, lay, dp * batch)
    assert distinct == pytest.approx(expected_distinct, rel=1e-9)
    assert moe.distinct_experts_busiest(V3, lay, dp * batch) == pytest.approx(busiest, rel=1e-9)
    # Weight bytes read by the routed experts in one step on the busiest rank: x expert bytes x 58.
    step = decode_step(CostContext(V3, H200, lay, PROF), batch, batch * 2000)
    op = next(o for o in step.ops if o.name == "moe.experts")
    weights = busiest * EXPERT_BYTES * 58
    activations = op.bytes - weights
    # the rest is activation traffic: busiest-rank token-expert pairs x (2*7168 + 3*2048) x 2 B
    assert 0 < activations < 0.2 * op.bytes or batch == 256
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
    assert "moe.dispatch" not in ops  # EP1: nothing leaves the rank; the local routing is priced instead
    # moe.route (top-k, permute, weighted unpermute) of every token of the step, as one stream over
    # its bf16 hidden states per MoE layer (elementwise.route_bytes; measured curves carry the passes)
    assert {o.name: o.bytes for o in step.ops}["moe.route"] == pytest.approx(4096 * 7168 * 2.0 * 58)


def test_deepep_node_level_scaleout_copies_v3_ep32():
    # DeepSeek-V3 on H200 EP32 = 4 nodes of 8 GPUs, 8 expert groups of 32 (2 groups per node),
    # top-4 groups per token. High-throughput (DeepEP normal) dispatch crosses the network once per
    # remote node the token's groups touch: P(node hit) = 1 - C(6, 4) / C(8, 4) = 1 - 15/70, so
    # 3 x 55/70 = 2.357 scale-out copies per token (one per remote rank would be ~6.5).
    hw = load_hardware("h200-sxm")
    lay = Layout(role="prefill", dp=32)
    p_node = 1 - 15 / 70
    assert moe.holder_hit_probability(V3, 1 / 4) == pytest.approx(p_node)
    # A rank holds 8 experts (a quarter of one group): its group is selected with P 4/8; the group's
    # guaranteed pick misses the rank with P 3/4 and the other 8 - 4 picks fall on 127 experts of
    # the 4 selected groups: miss P = C(119, 4) / C(127, 4).
    miss = 0.75 * (119 * 118 * 117 * 116) / (127 * 126 * 125 * 124)
    p_rank = 0.5 * (1 - miss)
    nv, so = alltoall.token_copies(V3, lay, hw, "high_throughput")
    assert so == pytest.approx(3 * p_node) and so == pytest.approx(2.357, abs=1e-3)
    # NVLink: to the own node's GPUs and, at each landing GPU, forwarded to its node's other GPUs:
    # (ep - nodes) x P(rank hit) = 28 x p_rank.
    assert nv == pytest.approx(28 * p_rank)
    nv_b, so_b = alltoall.a2a_bytes(V3, lay, hw, 256, "fp8")  # FP8 payload 7168 + 7168/128 x 4 = 7,392 B
    assert so_b == pytest.approx(256 * 3 * p_node * 7392)
    assert nv_b == pytest.approx(256 * 28 * p_rank * 7392)


@pytest.mark.parametrize("dp,hw_name", [(8, "h200-sxm"), (72, "h200-sxm"), (72, "gb200-nvl72")])
def test_low_latency_copies_one_per_picked_expert(dp, hw_name):
    # DeepEP LL sends one message per (token, picked expert): k (ep - dom) / ep over the network and
    # k (dom - 1) / ep over NVLink (the k/ep picks on the own rank stay local). FP8 message
    # 7,392 B + 16 B header (DeepEP test_low_latency.py).
    hw = load_hardware(hw_name)
    dom = min(dp, hw.domain_size)
    nv, so = alltoall.a2a_bytes(V3, Layout(role="decode", dp=dp), hw, 128, "fp8", "low_latency")
    assert nv == pytest.approx(128 * 8 * (dom - 1) / dp * 7408)
    assert so == pytest.approx(128 * 8 * (dp - dom) / dp * 7408)


def test_holder_hit_probability_matches_sampled_group_limited_routing():
    # V3 routing sampled: group score = sum of a group's top-2 scores, top-4 groups, top-8 experts
    # among them (config.json: n_expert_groups 8, topk_groups 4); random scores, 20,000 tokens.
    rng = np.random.default_rng(0)
    scores = rng.random((20_000, 256))
    group = np.sort(scores.reshape(-1, 8, 32), axis=-1)[..., -2:].sum(-1)  # [T, 8]
    keep = np.argsort(-group, axis=1)[:, :4]
    masked = np.full((20_000, 8), -np.inf)
    np.put_along_axis(masked, keep, 0.0, axis=1)
    picks = np.argsort(-(scores + np.repeat(masked, 32, axis=1)), axis=1)[:, :8]  # [T, 8]
    for holders in (4, 32):  # nodes of EP32, ranks of EP32
        hit = np.zeros((20_000, holders), bool)
        np.put_along_axis(hit, picks // (256 // holders), True, axis=1)
        assert moe.holder_hit_probability(V3, 1 / holders) == pytest.approx(hit.mean(), rel=0.04)


def test_more_batch_never_cheaper():
    lay = Layout(role="decode", dp=8)
    cx = CostContext(V3, H200, lay, PROF)
    times = [decode_step(cx, b, b * 1000).seconds for b in (1, 8, 64, 256)]
    assert times == sorted(times)
    assert not any(math.isnan(t) for t in times)
