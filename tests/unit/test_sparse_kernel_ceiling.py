"""FlashMLA sparse kernels priced no faster than their own published best (sim/cost/attention.py
SPARSE_KERNEL_CEILING, sparse_floor), derived by hand.

FlashMLA's README: the FP8 sparse decode kernel reaches "up to 350 TFlops on B200" (410 on H800
SXM5), the BF16 sparse prefill kernel 1450 on B200 (640 on H800). As shares of those GPUs' dense
BF16 peaks (2,250 and 989 TFLOP/s) they bound the kernel on every Blackwell / Hopper part.
"""
import dataclasses

import pytest

from rackplan.sim.cost import attention as attn
from rackplan.specs import load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit

V32, V3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
GB300, H200 = load_hardware("gb300-nvl72"), load_hardware("h200-sxm")
COMP = V32.attention.kv[0]


def test_floor_is_the_published_throughput_scaled_by_the_bf16_peak():
    # GB300's BF16 peak 2,500 TFLOP/s x 350 / 2,250 = 388.9 TFLOP/s for the FP8 decode kernel
    assert 1.0 / attn.sparse_floor(V32, COMP, "decode", GB300) == pytest.approx(2500e12 * 350 / 2250)
    assert 1.0 / attn.sparse_floor(V32, COMP, "prefill", GB300) == pytest.approx(2500e12 * 1450 / 2250)
    assert 1.0 / attn.sparse_floor(V32, COMP, "decode", H200) == pytest.approx(410e12)  # 989 x 410 / 989


def test_components_off_the_sparse_kernels_have_no_floor():
    assert attn.sparse_floor(V3, V3.attention.kv[0], "decode", GB300) == 0.0


def test_bf16_cache_decode_takes_the_prefill_kernel_ceiling():
    bf16 = dataclasses.replace(V32, dtypes=dataclasses.replace(V32.dtypes, kv_cache="bf16"))
    assert attn.sparse_floor(bf16, bf16.attention.kv[0], "decode", GB300) == \
        attn.sparse_floor(V32, COMP, "prefill", GB300)


@pytest.mark.parametrize("profile", ["gb300-nvl72-vllm", "datasheet"])
def test_gb300_decode_at_tp2_is_held_to_the_kernel(profile):
    # 512 sequences at context 2,560, TP2 (64 heads, the decode tile): 2 x 512 x 64 x 2,048 x (576 + 512)
    # = 146.0 GFLOP of attention math in one layer, 375.5 us at 388.9 TFLOP/s, + the profile's op_fixed_s;
    # both profiles' curves would price the layer (indexer included) faster than that
    prof = load_profile(profile)
    sec, _, _ = attn.decode_component(V32, COMP, 512.0, 512.0 * 2560, 1.0, 2, 1, GB300, prof)
    core = 2 * 512 * 64 * 2048 * 1088
    assert sec == pytest.approx(core / (2500e12 * 350 / 2250) + prof.op_fixed_s)


def test_a_slower_curve_is_kept():
    # H200: the kernel's 410 TFLOP/s would take 358 us for the same layer; h200-sxm-vllm's curve prices
    # it slower, so the floor does not bind
    prof = load_profile("h200-sxm-vllm")
    sec, _, _ = attn.decode_component(V32, COMP, 512.0, 512.0 * 2560, 1.0, 2, 1, H200, prof)
    assert sec > 2 * 512 * 64 * 2048 * 1088 / 410e12 + prof.op_fixed_s


def test_gb300_prefill_curve_already_under_the_ceiling():
    # one 2,048-token prompt at TP2: 2 x 128 x 2,048 x 1,024 x 1,088 = 584 GFLOP, 362.6 us at 1,611 TFLOP/s;
    # the measured curve prices it slower (the floor does not bind)
    prof = load_profile("gb300-nvl72-vllm")
    sec, _, _ = attn.prefill_component(V32, COMP, [(1, 2048.0, 0.0)], 2, 1, GB300, prof)
    assert sec > 2 * 128 * 2048 * 1024 * 1088 / (2500e12 * 1450 / 2250)
