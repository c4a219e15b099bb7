"""Layouts equal under price_key price every step the same, a step's cost without its op breakdown
(StepModel.cost, the planner's pricing stage) has the same seconds and period, and a pricer shared
between runs (StepPricer.shared) gives what a fresh one gives.

price_key sets a layout's replicas and its batch and token caps to fixed values: they decide which
steps an instance runs, not what a step costs. On random layouts and batches of every embedded model
(test_step_scalar's cases) the same steps priced for layouts that differ only there agree to the last
bit, in seconds, op breakdown and period. A shared pricer's cache holds each step's period (and its
spread) as a function of the step's key alone, so one that a previous run warmed returns, draw for
draw, what a fresh pricer returns.
"""
import dataclasses
import random

import numpy as np
import pytest

from rackplan.sim import pricer as pricer_mod
from rackplan.sim.cost.step import CostContext, StepModel, price_key
from rackplan.sim.pricer import StepPricer

from .test_pricing_paths import _steps
from .test_step_scalar import CASES, hardware, model, profile

pytestmark = pytest.mark.unit
SEED = 23


@pytest.mark.parametrize("i", range(1, len(CASES), 2))
def test_layouts_equal_under_price_key_price_every_step_the_same(i):
    name, hw, prof, skew, lay, works = CASES[i]
    other = dataclasses.replace(lay, replicas=3, max_batch_per_rank=7, max_tokens_per_step=1000)
    assert price_key(other) == price_key(lay) and price_key(lay).replicas == 1
    a = StepModel(CostContext(model(name), hardware(hw), lay, profile(prof), skew))
    b = StepModel(CostContext(model(name), hardware(hw), other, profile(prof), skew))
    for step in _steps(works, random.Random(SEED + i))[:4]:
        pa, pb = a.price(step), b.price(step)
        assert pa.seconds == pb.seconds and pa.breakdown() == pb.breakdown()
        for z in (0.0, 1.0):
            assert a.period(step, z) == b.period(step, z)
        light = a.cost(step)  # without the op breakdown: the same seconds, period and API-server wait
        assert (light.seconds, light.period_s, light.api_wait_s) == (pa.seconds, pa.period_s, pa.api_wait_s)


def _decode_periods(pr: StepPricer, rng: random.Random, n: int = 300) -> list[float]:
    ranks, out = pr.ranks, []
    for _ in range(n):
        batch = np.array([rng.randrange(1, 40) for _ in range(ranks)], dtype=float)
        ctx = batch * np.array([rng.uniform(500.0, 6000.0) for _ in range(ranks)])
        out.append(pr.decode(batch, ctx))
    return out


def test_a_shared_pricer_warmed_by_another_run_returns_what_a_fresh_one_does():
    name, hw, prof, skew, lay, _ = next(c for c in CASES if c[4].dp > 1)
    cx = CostContext(model(name), hardware(hw), lay, profile(prof), skew)
    pricer_mod._kept.clear()
    warm = StepPricer.shared(cx, np.random.default_rng(5))
    first = _decode_periods(warm, random.Random(1))
    again = StepPricer.shared(dataclasses.replace(cx, layout=dataclasses.replace(lay, max_batch_per_rank=9)),
                              np.random.default_rng(6))
    assert again.model is warm.model and again._cache is warm._cache  # the same pricing, kept
    shared = _decode_periods(again, random.Random(1))  # the same steps, other imbalance draws
    fresh = _decode_periods(StepPricer(cx, np.random.default_rng(6)), random.Random(1))
    assert shared == fresh and again.misses == 0  # every step priced by the first run already
    assert first != shared or not any(s for _, s in warm._cache.values())
    assert StepPricer.shared(cx).model is not warm.model  # without draws: a cache of its own
    for k in range(pricer_mod.KEPT + 1):  # only the last KEPT pricings are kept
        StepPricer.shared(dataclasses.replace(cx, skew=skew + 0.01 * (k + 1)))
    assert StepPricer.shared(cx, np.random.default_rng(0)).model is not warm.model
    pricer_mod._kept.clear()


def test_step_caches_persisted_across_processes_give_what_a_fresh_pricer_gives(tmp_path, monkeypatch):
    """pricer.persisted(): a pricing's step cache is written at the block's end and read back by the next
    block (a new process: nothing kept in memory); the same periods, draw for draw, with no step priced."""
    import pickle

    from rackplan import diskcache

    monkeypatch.setenv(diskcache.CACHE_ENV, str(tmp_path))
    name, hw, prof, skew, lay, _ = next(c for c in CASES if c[4].dp > 1)
    cx = CostContext(model(name), hardware(hw), lay, profile(prof), skew)
    pricer_mod._kept.clear()
    with pricer_mod.persisted():
        first = StepPricer.shared(cx, np.random.default_rng(5))
        periods = _decode_periods(first, random.Random(1))
    (path,) = sorted((tmp_path / "step-prices").glob("*"))
    assert first.misses > 0 and pickle.loads(path.read_bytes()) == first._cache
    pricer_mod._kept.clear()  # (what a new process starts with)
    with pricer_mod.persisted():
        again = StepPricer.shared(cx, np.random.default_rng(5))
        assert again._cache is not first._cache and again._cache == first._cache
        assert _decode_periods(again, random.Random(1)) == periods and again.misses == 0
    # a corrupt file is priced again (the same periods) and replaced
    path.write_bytes(b"\x00not a pickle")
    pricer_mod._kept.clear()
    with pricer_mod.persisted():
        third = StepPricer.shared(cx, np.random.default_rng(5))
        assert _decode_periods(third, random.Random(1)) == periods and third.misses == first.misses
    assert pickle.loads(path.read_bytes()) == first._cache
    # outside the block nothing is read or written
    pricer_mod._kept.clear()
    path.unlink()
    outside = StepPricer.shared(cx, np.random.default_rng(5))
    assert _decode_periods(outside, random.Random(1)) == periods and outside.misses == first.misses
    assert not path.exists()
    pricer_mod._kept.clear()
