"""A replayed rank runs the weights its records name: FP8 when the run has FP8 on, else the compute dtype."""
import dataclasses

import pytest
import torch

from rackplan.executor.fp8 import FP8Stack, FP8Weight
from rackplan.executor.model import Model, layer_ids
from rackplan.executor.parallel import make_ep_group
from rackplan.executor.replay import Replay
from rackplan.specs import load_model, load_plan

pytestmark = pytest.mark.unit


def _replay(fp8: bool):
    tiny = load_model("tiny-moe")
    spec = dataclasses.replace(tiny, dtypes=dataclasses.replace(tiny.dtypes, attention_weights="fp8",
                                                                dense_weights="fp8", expert_weights="fp8_block"))
    plan = load_plan("tiny-cpu-replay")
    model = Model(spec, 0, "cpu", torch.float32, make_ep_group(None, 0, 1, spec.moe.num_experts),
                  layer_ids(spec, "decode", 1, 1), build_experts=False)
    Replay(model, plan, plan.decode[0], 0, 0, fp8=fp8)
    return model


def test_replay_runs_fp8_weights_when_on():
    model = _replay(True)
    moe = [layer for layer in model.layers if not layer.dense][0]
    assert isinstance(moe.experts.w13, FP8Stack) and isinstance(moe.experts.w2, FP8Stack)
    assert isinstance(moe.attn.w["q_a"], FP8Weight)  # attention too, as a measured rank's
    assert isinstance(moe.shared.w13, FP8Weight)


def test_replay_keeps_compute_dtype_when_off():
    model = _replay(False)
    moe = [layer for layer in model.layers if not layer.dense][0]
    assert isinstance(moe.experts.w13, torch.Tensor) and moe.experts.w13.dtype == torch.float32
    assert isinstance(moe.attn.w["q_a"], torch.Tensor)
