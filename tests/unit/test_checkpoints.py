"""Published checkpoint formats selected as `<model>:<format>` (rackplan/specs/model.py CHECKPOINTS): NVIDIA's
NVFP4 checkpoints quantise only the routed experts' linears, so attention and dense weights stay BF16 without the
plan saying so."""
import pytest

from rackplan.specs import Layout, SpecError, load_model, ops, spec_ref

pytestmark = pytest.mark.unit


def test_nvfp4_checkpoint_keeps_attention_and_dense_weights_bf16():
    m = load_model("deepseek-v3:nvfp4")
    base = load_model("deepseek-v3")
    assert m.name == "deepseek-v3:nvfp4"
    d = m.dtypes
    assert (d.attention_weights, d.dense_weights, d.compute) == ("bf16", "bf16", "bf16")
    assert (d.expert_weights, d.expert_compute_dtype) == ("nvfp4", "fp4")
    assert (d.kv_cache, d.dispatch, d.combine) == (base.dtypes.kv_cache, base.dtypes.dispatch, base.dtypes.combine)
    assert (m.num_layers, m.moe) == (base.num_layers, base.moe)


def test_nvfp4_checkpoint_prices_bf16_projections():
    m = load_model("deepseek-v3:nvfp4")
    gemms = {op.name: op for op in ops.layer_gemms(m, Layout(role="decode", dp=8), 3, 58)}
    # q_a [7168 -> 1536] in BF16: 2 bytes per weight
    q_a = gemms["attn.proj"].gemms[0]
    assert (q_a.weight_dtype, q_a.compute_dtype) == ("bf16", "bf16")
    assert q_a.weight_bytes == 7168 * 1536 * 2


def test_plan_names_keep_the_format():
    assert spec_ref("models", "deepseek-v3:nvfp4") == "deepseek-v3:nvfp4"
    assert spec_ref("models", "deepseek-v3") == "deepseek-v3"


def test_unknown_format_is_one_line_naming_the_field():
    with pytest.raises(SpecError, match="model.*nvfp4.*deepseek-v3:int3"):
        load_model("deepseek-v3:int3")
