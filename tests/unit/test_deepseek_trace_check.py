"""benchmarks/deepseek_trace_check.py: the trace's shape and rates by hand, and rackplan priced at that shape."""

import pytest

from tests.bench_scripts import script

pytestmark = pytest.mark.unit


def test_the_trace_shape_and_rates_by_hand():
    k = script("deepseek_trace_check.py")
    # one micro-batch: 64 sequences x 2 queries (MTP 1) x 128 heads x 4,096 keys x (576 + 512) x 2 FLOPs
    assert k.attention_flops() == pytest.approx(146.03e9, rel=1e-4)
    # 255 us for that is 573 TFLOP/s: FlashMLA's published 580 within 2%
    assert k.attention_flops() / 255e-6 / 1e12 == pytest.approx(k.FLASHMLA_TFLOPS, rel=0.02)
    # experts: 128 tokens x 8 x 128 ranks / 256 experts = 512 tokens on each of a rank's 2 experts
    up, down = k.expert_flops()
    assert up == pytest.approx(2 * 1024 * 7168 * 4096)
    assert down == pytest.approx(up / 2)  # 2048 x 7168 against 7168 x 4096
    # the attention kernels of the reading sum to its own "attention sum" row, 388 us (page row)
    attention = ("attn.core", "attn.proj", "norm", "rope", "quantize")
    assert sum(k.TRACE_US[n][0] for n in attention) - 3.0 == pytest.approx(388.0)  # (less the post-attention norm)


def test_rackplan_prices_the_trace_shape():
    k = script("deepseek_trace_check.py")
    priced = k.per_layer_us(k.CLOSEST)
    # the attention core rackplan prices is the trace's work: its FLOPs a layer equal the hand count
    assert priced["attn.core"][1] == pytest.approx(k.attention_flops(), rel=1e-6)
    # the router class folds the gate GEMM and the top-k
    assert k.trace_class_us(priced, "router") == pytest.approx(priced["router"][0] + priced["moe.route"][0])


def test_prefill_step_and_kernel_rates_by_hand():
    k = script("deepseek_trace_check.py")
    # up/gate then down at 1,297 and 1,099 TFLOP/s with FLOPs 2 : 1: 3 / (2 / 1297 + 1 / 1099) = 1,223.5
    assert k.up_down_rate(k.DEEPGEMM_CONTIGUOUS_TFLOPS) == pytest.approx(1223.5, abs=0.1)
    assert k.up_down_rate((500.0, 500.0)) == pytest.approx(500.0)
    pre = k.prefill_per_layer("datasheet")
    # one rank's routed work a MoE layer: 16,384 tokens x 8 experts (uniform over EP32: as many in as out), each
    # pair 3 GEMMs of 2 x 7,168 x 2,048 FLOPs, times the busiest rank's share of a multinomial draw: above 1, below
    # the closed form 1 + sqrt(2 ln 32) x sqrt(131,072 x 31 / 32) / 131,072 = 1.0072
    pairs = 16384 * 8 * 3 * 2 * 7168 * 2048
    assert pairs < pre["moe.experts"][1] < pairs * 1.0072
