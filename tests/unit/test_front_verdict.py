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
