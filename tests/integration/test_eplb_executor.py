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
from rackplan.executor.placement import plan_placements
from rackplan.executor.timing import NullTimer
from rackplan.sim.cost.imbalance import NUM_LAYERS, SEED, imbalance_factor
from rackplan.sim.eplb import rebalance_experts
from rackplan.sim.routing import layer_popularity
from rackplan.specs import EPLBConfig, Layout, load_hardware, load_model

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


# --- the plan's EPLB placement: what `execute` runs is what the simulator prices -----------------

def _sim_placement(layout, skew):
    """The placement sim/cost/imbalance.py prices `layout` with (its own cached config)."""
    from rackplan.sim.cost.imbalance import _placement
    hw = load_hardware("cpu-local")
    cfg = (layout.ep_size, layout.eplb.redundant_experts, layout.eplb.policy, float(skew), K, E,
           hw.gpus_per_node, SPEC.moe.num_groups)
    return _placement(cfg)  # the cached config the imbalance curve samples with


@pytest.mark.parametrize("policy,redundant", [("global", 2), ("hierarchical", 4)])
def test_execute_uses_the_simulators_placement(policy, redundant):
    lay = Layout("decode", dp=2, eplb=EPLBConfig(redundant, policy))
    mine = plan_placements(SPEC, lay, load_hardware("cpu-local"), SKEW)
    sim = _sim_placement(lay, SKEW)
    moe_layers = range(SPEC.num_dense_layers, SPEC.num_layers)
    assert sorted(mine) == list(moe_layers)
    for i, idx in enumerate(moe_layers):
        assert mine[idx].tolist() == sim.phy2log[i].tolist()
    assert plan_placements(SPEC, Layout("decode", dp=2), load_hardware("cpu-local"), SKEW) is None


def _rank_rows(rank, world, layout, tokens, steps):
    """Per step: logical expert counts of this rank's tokens and the rows its experts received."""
    placement = plan_placements(SPEC, layout, load_hardware("cpu-local"), SKEW)
    idx = SPEC.num_dense_layers
    ep = make_ep_group(dist.group.WORLD, rank, world, E, placement[idx])
    gen = torch.Generator().manual_seed(7 + rank)
    pop = torch.as_tensor(layer_popularity(E, SKEW, NUM_LAYERS, K, SEED)[0])  # the first MoE layer's
    out = []
    for _ in range(steps):
        ids = torch.stack([torch.multinomial(pop, K, generator=gen) for _ in range(tokens)])  # [T, k] distinct
        routed, _ = dispatch(torch.zeros(tokens, 4), to_slots(ids, ep), ep)
        out.append((torch.bincount(ids.reshape(-1), minlength=E), int(routed.counts.sum())))
    return out


def test_per_rank_token_counts_match_the_simulators_accounting(tmp_path):
    """The rows each rank's experts receive under the plan's placement equal sim.eplb.rank_loads
    of the same expert counts, up to how a replicated expert's tokens round over its replicas."""
    from rackplan.sim.eplb import rank_loads
    lay = Layout("decode", dp=2, eplb=EPLBConfig(2, "global"))
    per_rank = run_ranks(_rank_rows, WORLD, tmp_path, lay, 16, 6)
    placement = _sim_placement(lay, SKEW)
    replicated = int((placement.logcnt[0] > 1).sum())
    for step in range(6):
        counts = sum(per_rank[r][step][0] for r in range(WORLD)).numpy()[None, None]  # [1, 1, E]
        sim = rank_loads(np.broadcast_to(counts, (1, NUM_LAYERS, E)), WORLD, placement)[0, 0]
        got = np.array([per_rank[r][step][1] for r in range(WORLD)])
        assert got.sum() == sim.sum() == 16 * WORLD * K
        assert np.all(np.abs(got - sim) <= WORLD * replicated)
