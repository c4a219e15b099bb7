"""The simulator core's own bookkeeping gives what the plain computation gives.

Percentiles and medians of the summary are numpy's (np.percentile, linear method; np.nanmedian on
what is not NaN), float for float, with +inf and NaN as numpy treats them. A decode instance's
running sequences, kept by the step they finish at, finish in the steps and the order (rid order
within a step) a heap of (finish step, rid) gives, and its free-seat heap finds the least-loaded
rank with room, lowest index first. The request log's per-request writes land in its arrays, also after it grows.
"""
import heapq
import math
import random
import warnings

import numpy as np
import pytest

from rackplan.policy import EngineCore
from rackplan.sim.metrics import RequestLog
from rackplan.sim.steady import median, percentiles

pytestmark = pytest.mark.unit


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_percentiles_equal_numpys():
    rng = np.random.default_rng(3)
    for trial in range(3000):
        n = int(rng.integers(1, 40)) if trial % 3 else int(rng.integers(1, 3000))
        a = rng.lognormal(0.0, 2.0, n)
        if trial % 5 == 1:
            a[rng.integers(0, n, max(1, n // 4))] = np.inf
        elif trial % 5 == 2:
            a[rng.integers(0, n)] = np.nan
        elif trial % 5 == 3:
            a = np.round(a, 1)  # ties
        qs = (50, 90, 99) if trial % 2 else (float(rng.uniform(0.0, 100.0)), 0, 100, 90.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = [float(v) for v in np.percentile(a, qs)]
        got = percentiles(a, qs)
        assert all(type(g) is float and _same(g, w) for g, w in zip(got, want)), (n, qs, got, want)


def test_median_equals_numpys():
    rng = np.random.default_rng(4)
    for trial in range(3000):
        n = int(rng.integers(1, 1500))
        a = rng.lognormal(0.0, 2.0, n)
        if trial % 3 == 1:
            a[rng.integers(0, n, max(1, n // 4))] = np.inf
        if trial % 3 == 2:
            a = np.round(a, 1)
        assert median(a) == float(np.median(a))


def test_decode_sequences_finish_as_a_heap_orders_them():
    """The serving policy's decode engine (rackplan/policy) finishes sequences in the order a heap
    of (finish step, rid) pops them, and counts the next step's finishing ones."""
    rng = random.Random(5)
    isl, osl = [], []
    core = EngineCore("decode", 8, 8192, 64, 10**9, 16, isl, osl, [])
    heap, rid = [], 0
    for _ in range(400):
        for _ in range(rng.choice((0, 1, 2, 5))):
            isl.append(100)
            osl.append(rng.choice((1, 2, 3, 17, 40)))
            core.add(rid)
            heapq.heappush(heap, (core.step + osl[-1], rid))
            rid += 1
        batch = core.schedule()
        assert batch.decoding == len(heap)
        assert batch.finishing == sum(1 for s, _ in heap if s == core.step + 1)
        assert core.steps_left() == {r: s - core.step for s, r in heap}
        want = []
        while heap and heap[0][0] <= core.step + 1:
            want.append(heapq.heappop(heap)[1])
        assert core.finish(batch).finished == sorted(want)

def test_request_log_writes_land_in_its_arrays_after_growing():
    log = RequestLog(3)
    log.arrive(0, 1.5)
    log.prefilled(1, 2.0)
    log.grow(2)  # a continued run's new arrivals: new arrays, the per-request writes follow them
    log.arrive(4, 7.25)
    log.first_tokens([3, 4], 8.0)
    log.done(4, 9.5)
    assert log.arrival.tolist()[0] == 1.5 and log.arrival[4] == 7.25 and np.isnan(log.arrival[3])
    assert log.prefill_done[1] == 2.0
    assert log.first_token.tolist()[3:] == [8.0, 8.0] and np.isnan(log.first_token[:3]).all()
    assert log.finish[4] == 9.5 and np.isnan(log.finish[:4]).all()
    head = log.head(2)
    assert len(head.arrival) == 2 and head.arrival[0] == 1.5
