"""A steady-state run continued from n to 2n requests (sim/simulator.Run.result) is the run of 2n: the
request stream's first n never depend on what follows, so the simulation repeats event for event
and the figures are identical, not only close. Explicit datasheet profile, tiny seeded runs."""
import gc
import weakref

import numpy as np
import pytest

from rackplan.sim.simulator import Run, simulate_steady
from rackplan.sim.workload import STREAM_CHUNK, RequestStream
from rackplan.specs import Scenario

from .tiny_h200 import HW, MODEL, PLAN, PROF, WL

pytestmark = pytest.mark.integration


def same(a: dict, b: dict) -> bool:
    """The same figures (NaN where both have none)."""
    return a.keys() == b.keys() and all(a[k] == b[k] or (np.isnan(a[k]) and np.isnan(b[k])) for k in a)


def test_a_streams_first_requests_do_not_depend_on_how_many_follow():
    one, two = RequestStream(WL, 3, 10 * STREAM_CHUNK), RequestStream(WL, 3, 10 * STREAM_CHUNK)
    a, b = one.next(), two.next()
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.osl, b.osl)
    c = one.next()
    assert c.arrival_s[0] > a.arrival_s[-1]  # arrivals go on from the last one
    assert not np.array_equal(RequestStream(WL, 4, STREAM_CHUNK).next().osl, a.osl)  # another seed, other draws
    assert RequestStream(WL, 3, len(a)).next() is not None and one.drawn == 2 * STREAM_CHUNK


def test_a_continued_run_measures_exactly_what_a_fresh_longer_run_does():
    live = Run(Scenario(PLAN, MODEL, HW, WL, PROF))
    short = live.result(1500)
    go_on = live.result(3000)
    live.close()
    fresh = Run(Scenario(PLAN, MODEL, HW, WL, PROF))
    long = fresh.result(3000)
    fresh.close()
    assert short.metrics["num_requests"] == 1500 and go_on.metrics["num_requests"] == 3000
    assert same(go_on.metrics, long.metrics) and go_on.steps == long.steps
    assert np.array_equal(go_on.ttft_s, long.ttft_s, equal_nan=True)
    # the first 1,500 requests' latencies are the same in both (those it had seen): only what came after was added
    seen = np.isfinite(short.ttft_s)
    assert seen.mean() > 0.95 and np.array_equal(short.ttft_s[seen], long.ttft_s[:1500][seen])
    # every request of the window has its first token; those still decoding count with their TPOT so far
    assert np.isfinite(go_on.ttft_s[:int(go_on.metrics["window_requests"])]).all()
    assert short.metrics["window_unfinished"] > 0 and short.metrics["e2e_p99_s"] == np.inf
    assert short.metrics["tpot_p90_s"] == pytest.approx(go_on.metrics["tpot_p90_s"], rel=0.03)
    assert short.stable and go_on.stable and go_on.metrics["warm_sequences"] > 0


def test_simulate_steady_goes_on_with_a_given_run():
    live = Run(Scenario(PLAN, MODEL, HW, WL, PROF))
    simulate_steady(Scenario(PLAN, MODEL, HW, WL, PROF), first=1200, most=1200, run=live)
    before = live.work
    res = simulate_steady(Scenario(PLAN, MODEL, HW, WL, PROF), first=2400, run=live)
    live.close()
    alone = simulate_steady(Scenario(PLAN, MODEL, HW, WL, PROF), first=2400)
    assert same(res.metrics, alone.metrics)
    assert 0 < before < live.work  # the second call only simulated what the first had not


def test_a_closed_run_is_freed_by_reference_counting():
    """close() frees the run's deployment and request log without the cyclic collector (the
    pending arrival's timeout, held by the SimPy environment, held the arrivals' stream and the
    deployment: left so, they kept the whole run until a rare full collection; 576-GPU plan: peak
    RSS 240 -> 186 MB). The environment itself stays cyclic (its bound event classes refer to it);
    its queue holds no run state then."""
    live = Run(Scenario(PLAN, MODEL, HW, WL, PROF))
    collecting = gc.isenabled()
    gc.disable()
    try:
        live.result(1500)
        refs = [weakref.ref(live.dep), weakref.ref(live.log)]
        live.close()
        assert [r() for r in refs] == [None, None]
    finally:
        if collecting:
            gc.enable()
