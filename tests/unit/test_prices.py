"""The op list drives the price (sim/cost/prices.py): every op model_ops lists has one price function
found by its name, and a step's op breakdown prices exactly the ops its list names."""
from __future__ import annotations

import pytest

from rackplan.sim.cost.prices import PRICES, EPSide, EPWork, experts_seconds
from rackplan.sim.cost.step import CostContext, RankWork, Step, step_cost
from rackplan.specs import CONFIG_DIR, Layout, Speculation, load_hardware, load_model, load_profile, ops

pytestmark = pytest.mark.unit
MODELS = sorted(p.stem for p in (CONFIG_DIR / "models").glob("*.yaml"))
# what a step adds to its device ops besides the op list (overlap, gaps, offload, sends, host, shared cores)
STEP_TERMS = {"dbo.overlap", "kernel.gaps", "weights.offload", "pp.send", "host.exposed", "cores.shared", "cpu.speed"}


@pytest.mark.parametrize("name", MODELS)
def test_every_listed_op_has_one_price_function(name):
    model = load_model(name)
    for lay in (Layout("decode", dp=4), Layout("decode", dp=1, tp=4), Layout("prefill", dp=2, tp=2)):
        for phase in ("prefill", "decode"):
            for op in ops.model_ops(model, lay, phase):
                assert op.name in PRICES, f"{op.name} has no price function"
    assert set(PRICES) <= set(ops.BY_NAME)


@pytest.mark.parametrize("name,lay", [
    ("deepseek-v3", Layout("decode", dp=8)),
    ("deepseek-v3", Layout("decode", dp=1, tp=4)),  # TP: all-reduces, no all-to-all
    ("deepseek-v3", Layout("decode", dp=8, speculation=Speculation(2, 2.2))),  # MTP drafter
    ("deepseek-v4.1-flash", Layout("decode", dp=8)),  # mHC, Engram
    ("qwen3-30b-a3b", Layout("decode", dp=2, tp=2)),
    ("qwen3-0.6b", Layout("decode", dp=1, tp=2)),  # dense
])
def test_a_step_prices_exactly_the_listed_ops(name, lay):
    model, hw, prof = load_model(name), load_hardware("gb200-nvl72"), load_profile("datasheet")
    cost = step_cost(CostContext(model, hw, lay, prof), Step.uniform(lay.dp, RankWork(32.0, 32.0 * 3000.0)))
    priced = {op.name for op in cost.ops} - STEP_TERMS
    assert priced == {op.name for op in ops.model_ops(model, lay, "decode")}


def test_step_and_calibration_price_the_experts_with_one_function():
    """The moe.experts price of a step is experts_seconds at its work (what calibration's predictors call)."""
    model, hw, prof = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_profile("datasheet")
    side = EPSide(model, hw, prof, 1, 32.0)
    work = EPWork(pairs=1024.0, distinct=30.0, tokens_in=512.0, rows=512.0, send=0.0)
    sec, flops, nbytes = PRICES["moe.experts"].fn(side, work)
    h, inter = model.hidden_size, model.moe.expert_intermediate
    assert flops == 2.0 * 1024.0 * 3 * h * inter  # gate/up [h, 2 inter] and down [inter, h] per pair
    load = 512.0 * model.moe.top_k / 32.0  # moe.tile_load: copies entering x top-k / local experts
    kernel, compute = side.kernel_dtype(), model.dtypes.expert_compute_dtype  # fp8_block weights, fp8 compute
    assert (kernel, compute) == ("fp8_block", "fp8")
    assert sec == experts_seconds(hw, prof, kernel, compute, flops, nbytes, 1024.0 / 30.0, 2.0 * inter, float(h), load)
