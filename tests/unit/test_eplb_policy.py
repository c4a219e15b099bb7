"""EPLB placement policies: invariants, balancedness against no EPLB, determinism, bad input."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackplan.sim.eplb import (
    balanced_packing,
    contiguous_share,
    identity_placement,
    placement_from_phy2log,
    rebalance_experts,
    replicate_experts,
)
from rackplan.specs import SpecError

pytestmark = pytest.mark.unit

# (experts, slots, gpus, nodes, groups, policy)
CASES = [
    (16, 16, 4, 1, 1, "global"),
    (16, 20, 4, 2, 4, "hierarchical"),
    (64, 72, 8, 2, 8, "hierarchical"),
    (64, 64, 16, 4, 8, "hierarchical"),
    (256, 288, 32, 4, 8, "hierarchical"),
    (256, 320, 64, 8, 8, "hierarchical"),
    (256, 288, 72, 18, 8, "hierarchical"),  # 8 groups % 18 nodes != 0: runs as global
    (256, 288, 72, 1, 1, "global"),
]


def _loads(num_layers, num_experts, seed, kind="lognormal"):
    rng = np.random.default_rng(seed)
    if kind == "lognormal":
        return rng.lognormal(0.0, 1.0, (num_layers, num_experts))
    if kind == "zipf":
        ranked = np.arange(1, num_experts + 1) ** -0.8
        return np.stack([ranked[rng.permutation(num_experts)] for _ in range(num_layers)]) * 1000
    return rng.integers(0, 100, (num_layers, num_experts)).astype(float)


def _max_over_mean(placement, weight):
    load = placement.gpu_load(weight)
    return load.max(1) / load.mean(1)


@pytest.mark.parametrize("num_e,slots,gpus,nodes,groups,policy", CASES)
def test_every_expert_placed_and_equal_slots(num_e, slots, gpus, nodes, groups, policy):
    w = _loads(4, num_e, seed=1)
    pl = rebalance_experts(w, slots, gpus, nodes, groups, policy)
    assert pl.phy2log.shape == (4, slots)
    assert np.all(pl.logcnt >= 1) and np.all(pl.logcnt.sum(1) == slots)
    per_gpu = np.bincount(np.arange(slots) // pl.slots_per_gpu, minlength=gpus)
    assert np.all(per_gpu == slots // gpus)
    for lay in range(4):  # log2phy and phy2log agree
        for e in range(num_e):
            phys = pl.log2phy[lay, e, : pl.logcnt[lay, e]]
            assert np.all(pl.phy2log[lay, phys] == e) and np.all(pl.log2phy[lay, e, pl.logcnt[lay, e]:] == -1)
    np.testing.assert_allclose(pl.share().sum(-1), 1.0)


def test_hierarchical_keeps_replicas_inside_their_node():
    num_e, slots, gpus, nodes, groups = 64, 80, 16, 4, 8
    pl = rebalance_experts(_loads(3, num_e, seed=2), slots, gpus, nodes, groups, "hierarchical")
    node_of_slot = np.arange(slots) // (slots // nodes)
    group_of = pl.phy2log // (num_e // groups)
    for lay in range(3):
        for g in range(groups):  # a whole expert group, replicas included, sits on one node
            assert len(set(node_of_slot[group_of[lay] == g])) == 1


@pytest.mark.parametrize("kind", ["lognormal", "zipf", "integers"])
@pytest.mark.parametrize("num_e,slots,gpus,nodes,groups,policy", CASES)
def test_never_worse_than_no_eplb(kind, num_e, slots, gpus, nodes, groups, policy):
    w = _loads(32, num_e, seed=3, kind=kind)
    base = contiguous_share(num_e, gpus)  # no EPLB: contiguous experts, redundant slots unused
    base_load = w @ base
    got = _max_over_mean(rebalance_experts(w, slots, gpus, nodes, groups, policy), w)
    assert np.all(got <= base_load.max(1) / base_load.mean(1) + 1e-9)
    assert np.all(got >= 1.0 - 1e-9)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), gpus=st.sampled_from([2, 4, 8]), per_gpu=st.integers(1, 6),
       extra=st.integers(0, 2), global_policy=st.booleans())
def test_never_worse_property(seed, gpus, per_gpu, extra, global_policy):
    num_e = gpus * per_gpu
    slots = num_e + extra * gpus
    w = np.random.default_rng(seed).exponential(1.0, (2, num_e)) ** 2
    nodes, groups = (1, 1) if global_policy else (2, 2)
    pl = rebalance_experts(w, slots, gpus, nodes, groups, "global" if global_policy else "hierarchical")
    assert np.all(pl.logcnt >= 1)
    base = w @ contiguous_share(num_e, gpus)
    assert np.all(pl.gpu_load(w).max(1) <= base.max(1) * (1 + 1e-9))


def test_replicas_help_the_hot_expert():
    w = np.ones((1, 16))
    w[0, 3] = 20.0
    flat = rebalance_experts(w, 16, 4, policy="global")
    repl = rebalance_experts(w, 32, 4, policy="global")
    assert repl.logcnt[0, 3] > 1
    assert _max_over_mean(repl, w)[0] < _max_over_mean(flat, w)[0]


def test_deterministic():
    w = _loads(4, 64, seed=5)
    a = rebalance_experts(w, 80, 16, 2, 8)
    b = rebalance_experts(w.copy(), 80, 16, 2, 8)
    for x, y in ((a.phy2log, b.phy2log), (a.log2phy, b.log2phy), (a.logcnt, b.logcnt)):
        np.testing.assert_array_equal(x, y)


def test_packing_and_replication_primitives():
    pack, pos = balanced_packing(np.array([[5.0, 4, 3, 3, 2, 1]]), 2)
    assert sorted(np.bincount(pack[0])) == [3, 3]
    assert np.bincount(pack[0], weights=[5, 4, 3, 3, 2, 1]).max() == 9
    assert sorted(pos[0][pack[0] == 0]) == [0, 1, 2]
    phy2log, cnt = replicate_experts(np.array([[10.0, 1.0, 4.0]]), 5)
    np.testing.assert_array_equal(cnt, [[3, 1, 1]])
    np.testing.assert_array_equal(phy2log, [[0, 1, 2, 0, 0]])


def test_identity_and_contiguous():
    pl = identity_placement(8, 4)
    np.testing.assert_array_equal(pl.phy2log[0], np.arange(8))
    share = contiguous_share(10, 4)  # 3, 3, 2, 2 experts
    np.testing.assert_array_equal(share.sum(0), [3, 3, 2, 2])


@pytest.mark.parametrize("weight,slots,gpus,field", [
    (np.ones(16), 12, 4, "num_slots"),  # fewer slots than experts
    (np.ones(16), 18, 4, "num_slots"),  # slots not divisible by GPUs
    (np.array([1.0, np.nan, 1.0, 1.0]), 4, 2, "weight"),
    (np.array([1.0, -1.0, 1.0, 1.0]), 4, 2, "weight"),
    (np.array([1.0, np.inf, 1.0, 1.0]), 4, 2, "weight"),
])
def test_bad_input_is_a_spec_error(weight, slots, gpus, field):
    with pytest.raises(SpecError, match=f"field '{field}'"):
        rebalance_experts(weight, slots, gpus, policy="global")


def test_bad_policy_and_unplaced_expert():
    with pytest.raises(SpecError, match="policy"):
        rebalance_experts(np.ones(4), 4, 2, policy="round_robin")
    with pytest.raises(SpecError, match="phy2log"):
        placement_from_phy2log(np.array([[0, 0, 1, 1]]), 3, 2)
