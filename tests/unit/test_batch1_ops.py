"""benchmarks/batch1_ops.py's per-layer bytes, derived by hand, and the V4-Flash single-user case read as the
run its source describes (issue 35, mechanism 2: the 4.19 ms TPOT is an MTP 3-1-4 run, not a speculation-free
batch-1 step)."""
import dataclasses
import importlib.util
from pathlib import Path

import pytest

from rackplan.accuracy.cases import load_cases
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import load_hardware, load_model, load_plan, load_profile

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PR_28590 = "https://github.com/sgl-project/sglang/pull/28590"


def _script():
    spec = importlib.util.spec_from_file_location("batch1_ops", ROOT / "benchmarks" / "batch1_ops.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def step():
    mod = _script()
    lay = dataclasses.replace(load_plan(mod.PLAN).aggregated[0], ep=1, speculation=None)
    cx = CostContext(load_model(mod.MODEL), load_hardware(mod.HARDWARE), lay, load_profile("datasheet"), 0.0)
    return mod, decode_step(cx, 1.0, 4096.0)


def test_shared_expert_and_router_bytes_per_layer_by_hand(step):
    mod, st = step
    # V4-Flash at TP4: the shared expert's gate, up and down (3 x 4096 x 2048 / 4 ranks) in FP8 with one FP32 scale
    # per 128 x 128 block, and one token's activations in and out (4096 + 3 x 512 columns, BF16)
    shared = 3 * 4096 * 512 * (1 + 4 / (128 * 128)) + (4096 + 3 * 512) * 2
    assert mod.layer_bytes(st, ("shared_expert",), 43) == pytest.approx(shared, rel=1e-9)
    # the router: 4096 x 256 FP32 weights, replicated on every rank, and one token in and its 256 logits out
    router = 4096 * 256 * 4 + (4096 + 256) * 2
    assert mod.layer_bytes(st, ("router",), 43) == pytest.approx(router, rel=1e-9)


def test_layer_seconds_add_up_to_the_step(step):
    mod, st = step
    named = {n for _, names in mod.ROWS for n in names}
    rest = sum(op.seconds for op in st.ops if op.name not in named)  # LM head, sampler, host: once a step
    per_layer = sum(mod.layer_seconds(st, names, 43) for _, names in mod.ROWS)
    assert per_layer * 43 + rest == pytest.approx(st.seconds, rel=1e-9)


def test_every_figure_of_the_low_latency_recipe_reads_as_speculative():
    # PR 28590 filled the cookbook cell of the GB300 Flash low-latency command, which runs EAGLE/MTP 3-1-4: no
    # figure it published is a speculation-free step, and none is expressible without its acceptance length
    cases = [c for c in load_cases() if c.source == PR_28590]
    assert {c.id for c in cases} >= {"v4flash-gb300-single-user-nospec-tpot", "v4flash-gb300-nospec-c16"}
    for c in cases:
        assert not c.expressible, c.id
        assert "EAGLE/MTP 3-1-4" in c.description, c.id
    single = next(c for c in cases if c.id == "v4flash-gb300-single-user-nospec-tpot")
    assert "--speculative-num-steps 3" in single.missing and "--speculative-num-draft-tokens 4" in single.missing
    assert single.phase == "single-user"
