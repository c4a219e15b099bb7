"""executor/placement.py: routing through physical slots equals the dense logical MoE, and the
per-rank token counts it produces match the imbalance model."""
import numpy as np
import pytest
import torch

from rackplan.executor.placement import (
    expert_counts,
    map_to_slots,
    moe_reference,
    physical_weights,
    placement_tensors,
    tokens_per_rank,
    tokens_per_slot,
)
from rackplan.sim.cost.imbalance import NUM_LAYERS, SEED, imbalance_factor
from rackplan.sim.eplb import identity_placement, placement_for, rebalance_experts
from rackplan.sim.routing import layer_popularity

pytestmark = pytest.mark.unit
E, K, EP, H, INTER = 16, 4, 4, 32, 16


def _placement(redundant=8, seed=0):
    w = np.random.default_rng(seed).lognormal(0, 1, E)
    pl = rebalance_experts(w, E + redundant, EP, policy="global")
    return placement_tensors(pl.phy2log[0], pl.log2phy[0], pl.logcnt[0])


def _route(num_tokens, seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_tokens, E, generator=g) ** 3
    w, ids = scores.topk(K, dim=-1)
    return ids, w / w.sum(-1, keepdim=True)


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_slots_hold_the_chosen_expert_and_split_evenly(offset):
    phy2log, log2phy, logcnt = _placement()
    ids, _ = _route(256)
    slots = map_to_slots(ids, log2phy, logcnt, offset)
    assert torch.equal(phy2log[slots], ids)
    assert torch.equal(map_to_slots(ids, log2phy, logcnt, offset), slots)  # deterministic
    per_slot = tokens_per_slot(slots, len(phy2log))
    for e in range(E):  # round-robin: replicas of one expert differ by at most one choice
        reps = per_slot[log2phy[e, : logcnt[e]]]
        assert int(reps.max() - reps.min()) <= 1 and int(reps.sum()) == int((ids == e).sum())


def test_physical_moe_equals_dense_reference():
    torch.manual_seed(0)
    phy2log, log2phy, logcnt = _placement()
    w13, w2 = torch.randn(E, 2 * INTER, H) / H**0.5, torch.randn(E, H, INTER) / INTER**0.5
    x = torch.randn(64, H)
    ids, topw = _route(64, seed=1)
    ref = moe_reference(x, ids, topw, w13, w2)
    slots = map_to_slots(ids, log2phy, logcnt, offset=2)
    out = moe_reference(x, slots, topw, physical_weights(w13, phy2log), physical_weights(w2, phy2log))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_counts_conserve_tokens():
    phy2log, log2phy, logcnt = _placement()
    ids, _ = _route(100)
    slots = map_to_slots(ids, log2phy, logcnt)
    assert int(tokens_per_rank(slots, len(phy2log), EP).sum()) == 100 * K
    assert int(expert_counts(ids, E).sum()) == 100 * K


@pytest.mark.parametrize("policy,redundant", [("none", 0), ("global", 0), ("global", 8)])
def test_measured_rank_counts_match_the_model(policy, redundant):
    """Tokens sampled from the routing model, routed through the placement by the executor
    helpers: mean busiest-rank / mean load equals the model's factor within sampling error."""
    skew, tokens, steps, ep = 0.6, 64, 100, EP
    pop = layer_popularity(E, skew, NUM_LAYERS, K, SEED)
    pl = placement_for(pop, ep, redundant, policy) or identity_placement(E, ep, NUM_LAYERS)  # none: contiguous
    g = torch.Generator().manual_seed(7)
    ratios = []
    for step in range(steps):
        lay = step % NUM_LAYERS
        ids = torch.multinomial(torch.as_tensor(pop[lay]), tokens * K, replacement=True, generator=g)
        _, log2phy, logcnt = placement_tensors(pl.phy2log[lay], pl.log2phy[lay], pl.logcnt[lay])
        counts = tokens_per_rank(map_to_slots(ids.reshape(tokens, K), log2phy, logcnt, offset=step),
                                 pl.phy2log.shape[1], ep).double()
        ratios.append(float(counts.max() / counts.mean()))
    predicted = imbalance_factor(tokens, K, E, ep, skew, redundant, policy)
    sem = np.std(ratios) / np.sqrt(steps)
    assert abs(np.mean(ratios) - predicted) < 4 * sem + 0.02 * predicted
