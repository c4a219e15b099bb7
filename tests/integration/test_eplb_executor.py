"""EPLB placement applied in the gloo EP MoE layer: output equals the no-EPLB reference, and the
per-rank token counts measured by dispatch match the imbalance model within sampling error."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from rackplan.executor.attention import randn, sub_seed
from rackplan.executor.moe import Experts, Router, moe_reference
from rackplan.executor.parallel import dispatch, make_ep_group, moe_forward, to_slots
from rackplan.executor.timing import NullTimer
from rackplan.sim.cost.imbalance import NUM_LAYERS, SEED, imbalance_factor
from rackplan.sim.eplb import rebalance_experts
from rackplan.sim.routing import layer_popularity
from rackplan.specs import load_model

from .exec_harness import run_ranks

pytestmark = pytest.mark.integration
SPEC = load_model("tiny-moe")  # 16 experts, top-4
E, K, LAYER, WORLD, REDUNDANT, SKEW = 16, 4, 1, 2, 4, 0.6
POP = layer_popularity(E, SKEW, NUM_LAYERS, K, SEED)
PLACEMENT = rebalance_experts(POP, E + REDUNDANT, WORLD, policy="global")


def _output_rank(rank, world, tokens):
    ep = make_ep_group(dist.group.WORLD, rank, world, E, PLACEMENT.phy2log[LAYER])
    experts = Experts(SPEC, LAYER, SEED, ep.local_logical, torch.float32, "cpu")
    x = randn((tokens, SPEC.hidden_size), sub_seed(SEED, "x", rank), torch.float32, "cpu")
    ids, w = Router(SPEC, LAYER, SEED, "cpu")(x)
    return x, ids, w, moe_forward(x, ids, w, experts, ep, NullTimer())


def test_placement_output_equals_reference(tmp_path):
    every = Experts(SPEC, LAYER, SEED, list(range(E)), torch.float32, "cpu")
    for x, ids, w, out in run_ranks(_output_rank, WORLD, tmp_path, 24):
        torch.testing.assert_close(out, moe_reference(x, ids, w, every), rtol=1e-5, atol=1e-6)


def _counts_rank(rank, world, tokens, steps):
    """Received token-expert rows per step on this rank, for ids drawn from the routing model."""
    gen = torch.Generator().manual_seed(100 + rank)
    received = []
    for step in range(steps):
        lay = step % NUM_LAYERS
        ep = make_ep_group(dist.group.WORLD, rank, world, E, PLACEMENT.phy2log[lay])
        ids = torch.multinomial(torch.as_tensor(POP[lay]), tokens * K, replacement=True, generator=gen)
        x = torch.zeros(tokens, 8)
        routed, _ = dispatch(x, to_slots(ids.view(tokens, K), ep), ep)
        received.append(int(routed.counts.sum()))
    return received


def test_measured_rank_counts_match_model(tmp_path):
    tokens, steps = 64, 48  # per rank per step
    per_rank = np.array(run_ranks(_counts_rank, WORLD, tmp_path, tokens, steps))  # [ranks, steps]
    ratios = per_rank.max(0) / per_rank.mean(0)
    predicted = imbalance_factor(tokens * WORLD, K, E, WORLD, SKEW, REDUNDANT, "global")
    sem = ratios.std() / np.sqrt(steps)
    assert abs(ratios.mean() - predicted) < 4 * sem + 0.02 * predicted
    none = imbalance_factor(tokens * WORLD, K, E, WORLD, SKEW, 0, "none")
    assert ratios.mean() < none  # EPLB measurably better than contiguous experts here
