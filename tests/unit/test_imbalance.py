"""Imbalance factor: the cached sampled table against independent sampling and its limits."""

import numpy as np
import pytest

from rackplan import diskcache
from rackplan.sim.cost.imbalance import NUM_LAYERS, SEED, factor_table, imbalance_factor, random_routing_factor
from rackplan.sim.eplb import placement_for, replay_factor
from rackplan.sim.routing import layer_popularity, sample_counts
from rackplan.specs import SpecError

pytestmark = pytest.mark.unit
E, K = 64, 4  # small model: 64 experts, top-4


def test_fixed_and_trivial_cases():
    assert imbalance_factor(1000, K, E, 8, fixed=1.3) == 1.3
    assert imbalance_factor(1000, K, E, 1, skew=0.6) == 1.0
    assert imbalance_factor(0, K, E, 8) == 1.0


@pytest.mark.parametrize("tokens", [16, 256, 4096])
@pytest.mark.parametrize("ep", [4, 16])
def test_uniform_matches_direct_multinomial(tokens, ep):
    loads = np.random.default_rng(123).multinomial(tokens * K, np.full(ep, 1 / ep), size=20000)
    direct = loads.max(1).mean() / (tokens * K / ep)
    assert imbalance_factor(tokens, K, E, ep) == pytest.approx(direct, rel=0.02)
    # the closed form (Gumbel tail, sqrt(2 ln ep)) is a loose upper estimate of the same thing
    assert direct <= random_routing_factor(tokens, K, ep) * 1.02


@pytest.mark.parametrize("policy,redundant", [("none", 0), ("global", 0), ("global", 16), ("hierarchical", 16)])
def test_skewed_matches_independent_sampling(policy, redundant):
    ep, skew, tokens = 16, 0.6, 128
    pop = layer_popularity(E, skew, NUM_LAYERS, K, SEED)
    placement = placement_for(pop, ep, redundant, policy, gpus_per_node=8, num_groups=8)
    counts = sample_counts(pop, np.array([tokens]), K, 200, np.random.default_rng(99))[0]
    direct = replay_factor(counts, ep, placement, np.random.default_rng(5)).mean()
    got = imbalance_factor(tokens, K, E, ep, skew, redundant, policy, gpus_per_node=8, num_groups=8)
    assert got == pytest.approx(direct, rel=0.03)


@pytest.mark.parametrize("policy,redundant", [("none", 0), ("global", 0), ("global", 16)])
def test_large_batches_reach_the_expected_load_limit(policy, redundant):
    ep = 16
    pop = layer_popularity(E, 0.6, NUM_LAYERS, K, SEED)
    placement = placement_for(pop, ep, redundant, policy)
    limit = replay_factor(pop[None] * 1e9, ep, placement).item()  # expected loads, no variance
    assert imbalance_factor(2**21, K, E, ep, 0.6, redundant, policy) == pytest.approx(limit, rel=0.01)


@pytest.mark.parametrize("skew", [0.0, 0.3, 0.6])
@pytest.mark.parametrize("ep", [4, 8, 16, 32])
def test_eplb_never_worse_and_redundancy_helps(skew, ep):
    xs, none = factor_table(ep, 0, "none", skew, K, E)
    _, flat = factor_table(ep, 0, "global", skew, K, E)
    _, repl = factor_table(ep, 2 * ep, "global", skew, K, E)
    none, flat, repl = np.array(none), np.array(flat), np.array(repl)
    # Same draws for all three. From 16 tokens up EPLB is never worse (2%: round-robin split
    # noise); below, a step's few choices dominate and no placement can promise anything.
    big = np.asarray(xs) >= 4
    assert np.all(flat[big] <= none[big] * 1.02) and np.all(repl[big] <= none[big] * 1.02)
    assert np.all(repl <= none * 1.05)
    if skew > 0:
        assert repl[-1] < none[-1]


def test_decreases_with_batch_and_stays_above_one():
    xs = [2.0**i for i in range(0, 21)]
    f = [imbalance_factor(x, K, E, 16, 0.3, 16, "global") for x in xs]
    assert all(v >= 1.0 for v in f)
    assert f[0] > f[8] > f[-1]


def test_a_step_reads_sampled_points_and_samples_nothing_new(monkeypatch):
    """What makes the factor cheap enough for the simulator's every step: after the grid points
    around a token count are sampled once, nearby calls only interpolate them (counted, not timed;
    the speed itself is benchmarks/sim_speed.py's)."""
    import rackplan.sim.cost.imbalance as imb

    tokens = [3000.0 + i for i in range(0, 20000, 7)]
    first = [imbalance_factor(t, K, E, 8, 0.3, 8, "global") for t in tokens]
    sampled = []
    real = imb._sample_point
    monkeypatch.setattr(imb, "_sample_point", lambda cfg, i: sampled.append(i) or real(cfg, i))
    assert [imbalance_factor(t, K, E, 8, 0.3, 8, "global") for t in tokens] == first
    assert sampled == []


def test_deterministic_and_bad_slots():
    a = factor_table(8, 8, "global", 0.3, K, E)
    factor_table.cache_clear()
    assert factor_table(8, 8, "global", 0.3, K, E) == a
    with pytest.raises(SpecError, match="redundant_experts"):
        imbalance_factor(100, K, E, 24, 0.3, 0, "global")  # 64 slots on 24 ranks
    with pytest.raises(SpecError, match="policy"):
        imbalance_factor(100, K, E, 8, 0.3, 0, "random")


def test_disk_cache_round_trip_and_invalidation(tmp_path, monkeypatch):
    """Points sampled once are read back bit for bit; another sampling-code version, a corrupt
    file or a disabled cache all sample afresh, to the same values."""
    from rackplan.sim.cost import imbalance as imb

    def factor():
        return imbalance_factor(3000.0, K, E, 8, 0.3, 8, "global")

    monkeypatch.setenv(diskcache.CACHE_ENV, str(tmp_path))
    factor_table.cache_clear()
    fresh = factor()
    files = list((tmp_path / "imbalance").glob("*.json"))
    assert len(files) == 1 and '"points"' in files[0].read_text()
    factor_table.cache_clear()
    monkeypatch.setattr(imb, "_sample_point", lambda *a: pytest.fail("sampled despite a warm cache"))
    assert factor() == fresh
    monkeypatch.undo()
    for change in ("version", "corrupt", "off"):
        factor_table.cache_clear()
        if change == "version":
            monkeypatch.setattr(imb, "sampling_version", lambda: "another-version")
        elif change == "corrupt":
            files[0].write_text("{not json")
        monkeypatch.setenv(diskcache.CACHE_ENV, "off" if change == "off" else str(tmp_path))
        calls = []
        real = imb._sample_point
        monkeypatch.setattr(imb, "_sample_point", lambda *a, calls=calls, real=real: calls.append(a) or real(*a))
        assert factor() == fresh
        assert calls, change
        monkeypatch.undo()
