"""The one op list per model (rackplan/specs/ops.py model_ops): names from the vocabulary, layer
counts by scope, GEMM shapes whose weights are the ones memory.py holds, priced by the cost model."""
import pytest

from rackplan.sim.cost.memory import weight_bytes_per_rank
from rackplan.sim.cost.step import CostContext, RankWork, Step, step_cost
from rackplan.specs import CONFIG_DIR, Layout, load_hardware, load_model, load_profile, ops

pytestmark = pytest.mark.unit
MODELS = sorted(p.stem for p in (CONFIG_DIR / "models").glob("*.yaml"))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_op_list_names_layers_and_weights(name, phase):
    model = load_model(name)
    lay = Layout("prefill" if phase == "prefill" else "decode", dp=2, tp=2)
    listed = {op.name: op for op in ops.model_ops(model, lay, phase)}
    dense, moe = model.layers_in(phase)
    for op in listed.values():
        assert op.name in ops.BY_NAME
        if ops.BY_NAME[op.name].scope != "step":
            assert op.layers == ops.op_layers(op.name, dense, moe)
    held = weight_bytes_per_rank(model, lay)  # what a rank of this role holds
    per_rank = {n: sum(g.weight_bytes for g in listed[n].gemms) * listed[n].layers for n in listed}
    assert per_rank["attn.proj"] == pytest.approx(held["attention"], rel=1e-12)
    assert per_rank.get("dense_ffn", 0.0) == pytest.approx(held["dense_ffn"], rel=1e-12)
    assert per_rank.get("shared_expert", 0.0) == pytest.approx(held["shared_experts"], rel=1e-12)
    assert per_rank.get("router", 0.0) == pytest.approx(held["router"], rel=1e-12)  # 0 for a dense model


def test_cost_model_reads_the_listed_gemms():
    """A decode step's attn.proj bytes: the listed weights plus bf16 activations in and out."""
    model, hw, prof = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_profile("datasheet")
    lay = Layout("decode", dp=8)
    m = 64.0
    cost = step_cost(CostContext(model, hw, lay, prof), Step.uniform(8, RankWork(m, m * 2000.0)))
    proj = {op.name: op for op in ops.model_ops(model, lay, "decode")}["attn.proj"]
    want = proj.layers * sum(g.weight_bytes + m * (g.k + g.n) * 2.0 for g in proj.gemms)
    got = next(op.bytes for op in cost.ops if op.name == "attn.proj")
    assert got == pytest.approx(want, rel=1e-12)
