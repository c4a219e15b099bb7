"""Pricing gpt-oss: sliding layers read and compute over min(context, window) keys, the full-attention curve read
at the windowed context, the window's KV blocks held per sequence, sinks in the parameter count, MXFP4 experts as
vLLM's default kernels run them (weight bytes 4.25 bits per parameter, BF16 math on Hopper and Blackwell).
Expected values derived by hand."""
from __future__ import annotations

import pytest

from rackplan.policy import EngineCore
from rackplan.policy.kv import longest_admitted, window_tokens
from rackplan.sim.cost.attention import Component, prefill_component
from rackplan.sim.cost.moe import expert_bytes
from rackplan.sim.cost.prices import EPSide
from rackplan.sim.cost.step import CostContext, RankWork, Step, step_cost
from rackplan.specs import Layout, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit
HEADS, D, ENTRY = 64, 64, 2048  # gpt-oss-120b: 64 query heads of 64; K + V of 8 KV heads x 64 in BF16 per token
SLIDING = FULL = 18  # layers of each kind (layer_types alternates)
WINDOW = 128


@pytest.fixture(scope="module")
def model():
    return load_model("gpt-oss-120b")


def _comps(model):
    return {c.name: c for c in model.attention.kv}


def test_decode_step_reads_the_window_on_sliding_layers(model):
    """One sequence at context 4096: KV bytes (18 x 128 + 18 x 4096) x 2048, FLOPs 2 x 64 heads x keys x (64 + 64)."""
    lay = Layout("decode", dp=1)
    cost = step_cost(CostContext(model, load_hardware("h200-sxm"), lay, load_profile("datasheet")),
                     Step.uniform(1, RankWork(1.0, 4096.0)))
    core = [op for op in cost.ops if op.name == "attn.core"]
    keys = SLIDING * WINDOW + FULL * 4096
    assert sum(op.bytes for op in core) == keys * ENTRY
    assert sum(op.flops for op in core) == 2.0 * HEADS * keys * (D + D)


def test_prefill_flops_of_a_sliding_layer(model):
    """A chunk of 2048 new tokens after 8192 cached: every query sees exactly 128 keys; a first chunk of 4096:
    the mean-position rule prices n x min(n / 2, 128) pairs (the exact band, 128 x 129 / 2 + 3968 x 128, is 1.6%
    fewer); a full layer: n x (n / 2) pairs."""
    hw, prof = load_hardware("h200-sxm"), load_profile("datasheet")
    swa, full = _comps(model)["swa"], _comps(model)["full"]

    def flops(comp, new, prefix):
        return prefill_component(model, comp, ((1.0, float(new), float(prefix)),), 1, 1, hw, prof)[1]

    assert flops(swa, 2048, 8192) == 2.0 * HEADS * 2048 * WINDOW * (D + D)
    assert flops(swa, 4096, 0) == 2.0 * HEADS * 4096 * WINDOW * (D + D)
    assert flops(full, 4096, 0) == 2.0 * HEADS * 4096 * 2048 * (D + D)
    # bytes: the window's entries before the chunk's end, and the chunk's own
    assert prefill_component(model, swa, ((1.0, 2048.0, 8192.0),), 1, 1, hw, prof)[2] == (WINDOW + 2048) * ENTRY


@pytest.mark.parametrize("profile,hw", [("h200-sxm-vllm", "h200-sxm"), ("gb300-nvl72-vllm", "gb300-nvl72")])
def test_sliding_decode_is_full_attention_at_the_windowed_context(model, profile, hw):
    """No table has a window argument: a sliding layer at context 4096 is priced as a full layer at context 128
    (same keys read, the curve read at 128), not at 4096."""
    hw, prof = load_hardware(hw), load_profile(profile)
    swa, full = (Component(model, _comps(model)[n], 1, hw, prof) for n in ("swa", "full"))
    at_window = full.decode(32.0, 32.0 * WINDOW, 1.0, 1)
    assert swa.decode(32.0, 32.0 * 4096, 1.0, 1) == at_window
    assert full.decode(32.0, 32.0 * 4096, 1.0, 1)[0] > at_window[0]


def test_kv_held_per_sequence(model):
    """Full layers hold every token (18 x 2048 bytes per token), sliding ones the window (18 x 128 x 2048)."""
    assert model.kv_bytes_per_token == FULL * ENTRY
    assert model.kv_bytes_per_sequence_fixed == SLIDING * WINDOW * ENTRY


def test_sinks_count_one_parameter_per_head_and_layer(model):
    import dataclasses

    plain = dataclasses.replace(model, attention=dataclasses.replace(model.attention, sinks=None))
    assert model.param_counts()["attention"] - plain.param_counts()["attention"] == HEADS * 36


@pytest.mark.parametrize("hw", ["h200-sxm", "gb300-nvl72"])
def test_mxfp4_experts_are_weight_only_on_both(model, hw):
    """vLLM's default MXFP4 MoE (quantization/mxfp4.py get_mxfp4_backend: SM90 triton_kernels / Marlin, SM100
    FlashInfer MXFP4 x BF16) reads 4.25-bit weights and multiplies in BF16: the bf16 experts curve and peak."""
    hw = load_hardware(hw)
    side = EPSide(model, hw, load_profile("datasheet"), 1, 128.0)
    assert side.kernel_dtype() == "bf16" and model.dtypes.expert_compute_dtype == "bf16"
    assert expert_bytes(model) == 3 * 2880 * 2880 * 4.25 / 8


def test_a_sequence_holds_the_windows_blocks(model):
    """vLLM's SlidingWindowManager keeps ceil((128 - 1) / 16) + 1 = 9 blocks of 16 per sliding layer; 18 sliding
    layers hold as many bytes per token as the 18 full ones: 144 tokens of the rank's capacity per sequence.
    Models without placed sliding layers hold none (V4's window sits beside its compressed KV on every layer)."""
    assert window_tokens(model, 16) == 144
    assert window_tokens(load_model("deepseek-v4-flash"), 64) == window_tokens(load_model("qwen3-30b-a3b"), 16) == 0


@pytest.mark.parametrize("window,admitted", [(0, 5), (144, 2)])
def test_decode_admission_counts_the_window(window, admitted):
    """A decode rank of 40 blocks of 16 admits sequences arriving at context 100: each needs ceil((100 + 1) / 16)
    = 7 blocks (5 fit: 35, 5 left), or with the window's 144 tokens ceil(245 / 16) = 16 blocks (2 fit: 32, 8 left)."""
    core = EngineCore("decode", 1, 8192, 64, 40, 16, [100] * 20, [50] * 20, [0] * 20, window=window)
    for rid in range(20):
        core.add(rid)
    assert len(core.schedule().admitted) == admitted


def test_longest_admitted_leaves_the_window():
    assert longest_admitted(1600.0, 16, 1, 144) == 1600 - 1 - 144
