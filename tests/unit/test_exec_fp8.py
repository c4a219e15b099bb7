"""FP8 weights (torch._scaled_mm, row-wise scales) against the same model in fp32, on CPU."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from rackplan.executor.fp8 import FP8Weight, quantise_model
from rackplan.executor.model import Batch, Model, layer_ids
from rackplan.executor.parallel import make_ep_group
from rackplan.executor.timing import NullTimer
from rackplan.specs import load_model

pytestmark = pytest.mark.unit
TINY = load_model("tiny-moe")


def test_fp8_weight_gemm_is_close_to_fp32():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 256, generator=gen), torch.randn(256, 96, generator=gen) / 16
    y, want = x @ FP8Weight(w), x @ w
    assert y.shape == (32, 96)
    assert ((y - want).norm() / want.norm()).item() < 0.06  # e4m3: 3 mantissa bits on both operands
    assert (x[:0] @ FP8Weight(w)).shape == (0, 96)


def test_fp8_model_tracks_the_fp32_model():
    spec = dataclasses.replace(TINY, dtypes=dataclasses.replace(TINY.dtypes, attention_weights="fp8",
                                                                 dense_weights="fp8", expert_weights="mxfp4"))
    ep = make_ep_group(None, 0, 1, spec.moe.num_experts)
    ref, fp8 = (Model(spec, 0, "cpu", torch.float32, ep, layer_ids(spec, "prefill")) for _ in range(2))
    assert quantise_model(fp8) == {"attention": "fp8", "dense": "fp8", "experts": "fp8"}
    assert hasattr(fp8.layers[-1].experts.w13, "grouped")  # routed experts: one FP8 GEMM per slot
    toks = torch.randint(0, spec.vocab_size, (20,), generator=torch.Generator().manual_seed(1))
    a, b = (m.forward(Batch.prefill(toks, [12, 8]), None, NullTimer()) for m in (ref, fp8))
    assert torch.nn.functional.cosine_similarity(a, b, dim=-1).min() > 0.98
    assert quantise_model(Model(TINY, 0, "cpu", torch.float32, ep, [0])) == {"attention": "float32",
                                                                              "dense": "float32",
                                                                              "experts": "float32"}
