"""DEP MoE over gloo equals the single-process dense reference; splits and token conservation."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from rackplan.executor.attention import randn, sub_seed
from rackplan.executor.moe import Experts, Router, moe_reference
from rackplan.executor.parallel import make_ep_group, moe_forward, moe_forward_dbo, moe_forward_static
from rackplan.executor.timing import NullTimer
from rackplan.specs import load_model

from .exec_harness import run_ranks

pytestmark = pytest.mark.integration
SPEC = load_model("tiny-moe")
LAYER, SEED = 1, 7


def _inputs(rank: int, n_tokens: int, force_expert):
    x = randn((n_tokens, SPEC.hidden_size), sub_seed(SEED, "x", rank), torch.float32, "cpu")
    ids, w = Router(SPEC, LAYER, SEED, "cpu")(x)
    if force_expert is not None:  # every pair to one expert: all other splits empty
        ids = torch.full_like(ids, force_expert)
    return x, ids, w


def _moe_rank(rank, world, tokens, force_expert, placement):
    ep = make_ep_group(dist.group.WORLD, rank, world, SPEC.moe.num_experts, placement)
    experts = Experts(SPEC, LAYER, SEED, ep.local_logical, torch.float32, "cpu")
    x, ids, w = _inputs(rank, tokens[rank], force_expert)
    # device-side sizes only; a token's top-k experts are distinct, so one source sends at most T rows
    # to a slot (the forced case repeats an expert k times per token)
    cap = max(tokens) * (SPEC.moe.top_k if force_expert is not None else 1)
    static = moe_forward_static(x, ids, w, experts, ep, NullTimer(), cap)
    rows = int(experts.rows)
    return (moe_forward(x, ids, w, experts, ep, NullTimer()), moe_forward_dbo(x, ids, w, experts, ep, NullTimer()),
            static, rows)


@pytest.mark.parametrize("world,tokens,force,placement", [
    (2, [24, 17], None, None),
    (4, [9, 0, 31, 1], None, None),  # a rank with no tokens
    (4, [5, 6, 7, 8], 3, None),  # every pair to rank 0's expert: empty splits elsewhere
    (2, [12, 12], None, list(range(16)) + [0, 5, 9, 15]),  # replicated slots (EPLB-style placement)
])
def test_dep_moe_equals_dense_reference(tmp_path, world, tokens, force, placement):
    outs = run_ranks(_moe_rank, world, tmp_path, tokens, force, placement)
    every = Experts(SPEC, LAYER, SEED, list(range(SPEC.moe.num_experts)), torch.float32, "cpu")
    assert sum(rows for *_, rows in outs) == SPEC.moe.top_k * sum(tokens[:world])  # static path: every pair once
    for rank, (out, out_dbo, out_static, _) in enumerate(outs):
        x, ids, w = _inputs(rank, tokens[rank], force)
        ref = moe_reference(x, ids, w, every)
        for got in (out, out_dbo, out_static):
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


class _Identity:
    """Experts that return their rows: combine must give x * sum of the token's weights."""

    def __init__(self):
        self.rows = 0

    def __call__(self, rows, counts):
        assert int(counts.sum()) == rows.shape[0]
        self.rows += rows.shape[0]
        return rows


def _conservation_rank(rank, world, tokens, seed):
    ep = make_ep_group(dist.group.WORLD, rank, world, SPEC.moe.num_experts)
    gen = torch.Generator().manual_seed(seed * 100 + rank)
    x = torch.randn(tokens[rank], 8, generator=gen)
    ids = torch.randint(0, SPEC.moe.num_experts, (tokens[rank], 3), generator=gen)
    w = torch.rand(tokens[rank], 3, generator=gen)
    experts = _Identity()
    out = moe_forward(x, ids, w, experts, ep, NullTimer())
    return out, x * w.sum(-1, keepdim=True), experts.rows


@settings(max_examples=4, deadline=None)
@given(world=st.sampled_from([2, 4]), tokens=st.lists(st.integers(0, 40), min_size=4, max_size=4),
       seed=st.integers(0, 1000))
def test_token_conservation_random_routing(tmp_path_factory, world, tokens, seed):
    outs = run_ranks(_conservation_rank, world, tmp_path_factory.mktemp("cons"), tokens, seed)
    assert sum(rows for _, _, rows in outs) == 3 * sum(tokens[:world])  # every pair computed once
    for out, expect, _ in outs:
        torch.testing.assert_close(out, expect)
