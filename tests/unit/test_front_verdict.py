"""Verdicts of verified front points (sim/search/front.py) say what the probes found."""
from rackplan.sim.search.front import Verified
from rackplan.sim.search.verify import Check, Probe


def probe(rate: float, misses: dict | None = None) -> Probe:
    return Probe(rate, {"prefill_capacity_rps": 0.0}, True, (), misses or {}, 1000)


def test_a_point_whose_only_passing_rates_lie_above_a_bound_is_unresolved_not_failed():
    chk = Check(100.0, {}, False, {}, [probe(90.0, {"ttft_p90_s": 0.1}), probe(100.0)])
    assert Verified(None, chk).verdict() == ("unresolved: meets SLOs at 100 req/s, but above 97% of what a "
                                             "saturated pool served, after 2 probes")


def test_a_failing_last_probe_is_a_failure():
    chk = Check(90.0, {}, False, {"ttft_p90_s": 0.1}, [probe(90.0, {"ttft_p90_s": 0.1})])
    assert Verified(None, chk).verdict() == "fails: misses ttft_p90_s"


def capacity_probe(served_per_busy_s: float, offered: float, window_requests: float) -> Probe:
    m = {"prefill_capacity_rps": served_per_busy_s, "offered_rps": offered, "window_requests": window_requests}
    return Probe(offered, m, True, (), {}, int(window_requests))


def test_over_capacity_needs_more_than_the_arrivals_noise():
    # 10,000 requests in the window: 2 standard errors of the count are 2%
    assert not capacity_probe(99.0, 100.0, 10_000).over_capacity  # a busy pool keeping up, 1% under: noise
    assert capacity_probe(97.5, 100.0, 10_000).over_capacity  # 2.5% under: saturated
    # the same 1% shortfall over 250,000 requests (0.4%) is a clear verdict
    assert capacity_probe(99.0, 100.0, 250_000).over_capacity
    assert not capacity_probe(101.0, 100.0, 250_000).over_capacity
    unstable = Probe(100.0, {"prefill_capacity_rps": 120.0, "offered_rps": 100.0}, False, ("prefill",), {}, 1000)
    assert unstable.over_capacity  # a growing queue is always over capacity
