"""Decode pool sizes of a deployment family (sim/search/pools.py): exact up to EXACT_GPUS, computed
beyond it, and never missing the best rate match."""
from __future__ import annotations

import math

import pytest

from rackplan.sim.search import pools

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("ratio, limit, expected", [
    (0.4, 1000, {1, 2, 5}),  # 0.4 = [0; 2, 2]: convergents 0/1, 1/2, 2/5
    (2.5, 1000, {1, 2}),  # [2; 2]: 2/1, 5/2
    (math.pi, 1000, {1, 7, 106, 113, 7 * 113 + 106}),  # 3, 22/7, 333/106, 355/113; then a = 292: 7 x 113 + 106
    (math.pi, 100, {1, 7}),  # 106 > 100: the last semiconvergent t x 7 + 1 <= 100 is 99
])
def test_approximation_denominators_by_hand(ratio, limit, expected):
    got = pools.approximation_denominators(ratio, limit)
    if limit == 100:
        expected = expected | {99}
    assert got == expected


def _best(ratio: float, limit: int, upper: bool) -> float:
    """Brute force: the rate-matched prefill-to-decode ratio nearest `ratio` from above (ceil) or
    below (floor, at least one prefill instance) over every decode count up to `limit`."""
    if upper:
        return min(math.ceil(q * ratio) / q for q in range(1, limit + 1))
    return max(math.floor(q * ratio) / q for q in range(1, limit + 1) if math.floor(q * ratio) >= 1)


@pytest.mark.parametrize("ratio", [0.1234567, 0.37, 1 / 3 + 1e-7, 0.618034, 1.41421356, 2.718281828, 7.3])
@pytest.mark.parametrize("limit", [50, 400, 5000])
def test_the_best_matches_from_both_sides_are_among_the_tried_sizes(ratio, limit):
    qs = pools.approximation_denominators(ratio, limit)
    assert min(math.ceil(q * ratio) / q for q in qs) == _best(ratio, limit, True)
    lower = [math.floor(q * ratio) / q for q in qs if math.floor(q * ratio) >= 1]
    if ratio * limit >= 2:
        assert max(lower) == _best(ratio, limit, False)


def test_small_budgets_try_every_count_that_fits():
    # 576 GPUs, DEP2 prefill and decode, 0.37 prefill per decode instance: n_d + ceil(0.37 n_d) - 1 <= 288
    assert list(pools.decode_pool_counts(2, 2, 0.37, 576)) == list(range(1, 211))


@pytest.mark.parametrize("gpus", [10_000, 100_000, 1_000_000])
def test_large_families_try_logarithmically_many_counts_all_within_budget(gpus):
    ratio, g_p, g_d = 0.37, 2, 2
    counts = list(pools.decode_pool_counts(g_p, g_d, ratio, gpus))
    top = pools.largest_decode_pool(g_p, g_d, ratio, gpus)
    assert counts == sorted(set(counts)) and counts[-1] == top
    assert len(counts) < pools.DENSE * (3 + math.log(top / pools.DENSE))
    assert set(range(1, pools.DENSE + 1)) <= set(counts)
    for n in counts:
        assert max(1, math.ceil(n * ratio) - 1) * g_p + n * g_d <= gpus
    n = top + 1  # the next count does not fit even with one prefill instance fewer than matched
    assert max(1, math.ceil(n * ratio) - 1) * g_p + n * g_d > gpus


@pytest.mark.parametrize("g_p, g_d, ratio", [(32, 1, 0.01), (1, 32, 50.0), (2, 2, 0.37), (16, 8, 1.0), (8, 64, 3.3)])
@pytest.mark.parametrize("gpus", [40, 577, 4096])
def test_largest_decode_pool_by_brute_force(g_p, g_d, ratio, gpus):
    fits = [n for n in range(1, gpus + 1) if max(1, math.ceil(n * ratio) - 1) * g_p + n * g_d <= gpus]
    assert pools.largest_decode_pool(g_p, g_d, ratio, gpus) == max(fits, default=0)

