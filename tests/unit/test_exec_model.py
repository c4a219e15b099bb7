"""Model pieces: decode paths equal prefill, router rules, placement tables, workload shapes."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from rackplan.executor.model import Batch, Model, layer_ids
from rackplan.executor.moe import Router
from rackplan.executor.parallel import make_ep_group, slot_bounds, to_slots
from rackplan.executor.timing import NullTimer
from rackplan.executor.workload import prefill_lengths
from rackplan.specs import load_model, load_workload

pytestmark = pytest.mark.unit
TINY = load_model("tiny-moe")


def _variant(kind: str):
    a = TINY.attention
    if kind == "gqa":
        a = dataclasses.replace(a, kind="gqa", num_heads=4, num_kv_heads=2, head_dim=32)
    elif kind == "csa":  # band of window + topk = 6 tokens, shorter than the prompt
        kv = (dataclasses.replace(a.kv[0], window=4, topk=2),)
        a = dataclasses.replace(a, kind="csa", num_heads=4, head_dim=32, q_lora_rank=64, o_lora_rank=32,
                                o_groups=2, kv=kv)
    return dataclasses.replace(TINY, attention=a)


@pytest.mark.parametrize("kind", ["mla", "gqa", "csa"])
def test_decode_step_equals_prefill(kind):
    """The absorbed MLA decode (and the gqa/csa decode) reading the cache gives the same logits as
    the prefill path computing the whole sequence."""
    spec = _variant(kind)
    ep = make_ep_group(None, 0, 1, spec.moe.num_experts)
    model = Model(spec, 0, "cpu", torch.float32, ep, layer_ids(spec, "decode"))
    toks = torch.randint(0, spec.vocab_size, (11,), generator=torch.Generator().manual_seed(1))
    full = model.forward(Batch.prefill(toks, [11]), None, NullTimer())
    cache = model.kv_cache(2, 16)
    model.forward(Batch.prefill(toks[:10], [10], torch.tensor([1])), cache, NullTimer())
    dec = model.forward(Batch.decode(toks[10:], [10], torch.tensor([1])), cache, NullTimer())
    torch.testing.assert_close(dec, full, rtol=1e-4, atol=1e-4)


def test_router_grouped_topk_stays_in_chosen_groups():
    r = Router(TINY, 1, 0, "cpu")
    ids, w = r(torch.randn(64, TINY.hidden_size, generator=torch.Generator().manual_seed(0)))
    groups = ids // (TINY.moe.num_experts // TINY.moe.num_groups)
    assert all(len(set(g.tolist())) <= TINY.moe.topk_groups for g in groups)
    torch.testing.assert_close(w.sum(-1), torch.full((64,), TINY.moe.routed_scaling))


def test_placement_replicas_and_bounds():
    ep = make_ep_group(None, 0, 2, 4, [0, 1, 2, 3, 0, 3])
    assert ep.bounds == [0, 3, 6] and ep.local_logical == [0, 1, 2]
    slots = to_slots(torch.tensor([[0, 3], [0, 3]]), ep)
    assert slots.tolist() == [[0, 3], [4, 5]]  # each choice of an expert takes the next replica
    assert slot_bounds(256, 72)[-1] == 256
    with pytest.raises(ValueError):
        make_ep_group(None, 0, 1, 4, [0, 1, 2])


def test_prefill_lengths_fill_the_budget():
    wl = load_workload("tiny-chat")
    lens = prefill_lengths(wl, 256, 8, np.random.default_rng(0))
    assert sum(lens) <= 256 and len(lens) <= 8
    assert sum(lens) == 256 or len(lens) == 8
