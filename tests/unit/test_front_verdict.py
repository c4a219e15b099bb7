"""Verdicts of verified front points (sim/search/front.py) say what the probes found."""
import pytest

from rackplan.sim.search.front import Verified
from rackplan.sim.search.verify import Check, Probe

pytestmark = pytest.mark.unit


def probe(rate: float, misses: dict | None = None) -> Probe:
    return Probe(rate, {"prefill_capacity_rps": 0.0}, True, (), misses or {}, 1000)


def test_a_point_whose_only_passing_rates_lie_above_a_bound_is_unresolved_not_failed():
    chk = Check(100.0, {}, False, {}, [probe(90.0, {"ttft_p90_s": 0.1}), probe(100.0)])
    assert Verified(None, chk).verdict() == ("unresolved: meets SLOs at 100 req/s, but above 97% of what a "
                                             "saturated pool served, after 2 probes")


def test_a_failing_last_probe_is_a_failure():
    chk = Check(90.0, {}, False, {"ttft_p90_s": 0.1}, [probe(90.0, {"ttft_p90_s": 0.1})])
    assert Verified(None, chk).verdict() == "fails: misses ttft_p90_s"


def test_a_passing_point_given_up_says_its_rate_was_not_refined():
    chk = Check(90.0, {}, True, {}, [probe(90.0)], given_up=True)
    assert Verified(None, chk).verdict() == "verified at 90 req/s, not refined higher: it cannot beat the winner"
    assert Verified(None, Check(90.0, {}, True, {}, [probe(90.0)])).verdict() == "verified"


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


def _points(gpus: list[int]):
    from rackplan.sim.search.combine import Candidate
    from rackplan.specs import Layout

    lay = Layout("both", dp=1, tp=1)
    return [Candidate("aggregated", ((lay, {"replicas": g}),), g, 1.0, 0.1, 0.02, 1.0, 100.0, 2.0) for g in gpus]


def _runner(results: dict, probed: list):
    """Each point's Check from a table (tokens/s/user, passed), recording what was probed."""
    def run(cands):
        probed.extend(cands)
        return [Check(1.0, {"tps_per_user": results[id(c)][0], "output_tps_per_gpu": 10.0}, results[id(c)][1])
                for c in cands]
    return run


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_min_gpus_probes_the_fewest_gpus_first_and_stops_after_a_count_that_passes(workers):
    from rackplan.sim.search.front import verify_fixed

    pts = _points([32, 8, 16, 8])
    results = {id(pts[0]): (50.0, True), id(pts[1]): (40.0, False), id(pts[2]): (45.0, True),
               id(pts[3]): (42.0, False)}
    probed: list = []
    out = verify_fixed("min-gpus", pts, _runner(results, probed), None, workers)
    # both 8-GPU points fail, so 16 GPUs is probed and passes; 32 can no longer win
    assert [v.check is not None for v in out] == [False, True, True, True]
    assert out[0].skipped and not out[0].passed
    assert len(probed) == (3 if workers == 1 else 4)  # a batch of 2 or 4 probes 32 as well, then drops it


@pytest.mark.parametrize("workers", [1, 3])
def test_latency_probes_the_fastest_bound_first_and_stops_when_no_bound_reaches_the_best(workers):
    from rackplan.sim.search.front import verify_fixed

    pts = _points([8, 16, 24, 32])
    bound = {id(pts[0]): 100.0, id(pts[1]): 90.0, id(pts[2]): 80.0, id(pts[3]): 60.0}
    results = {id(pts[0]): (85.0, False), id(pts[1]): (88.0, True), id(pts[2]): (79.0, True),
               id(pts[3]): (59.0, True)}
    out = verify_fixed("latency", pts, _runner(results, []), lambda c: bound[id(c)], workers)
    # 100 fails; 90 passes at 88 tok/s/user; 80 and 60 cannot reach 88
    assert [v.check is not None for v in out] == [True, True, False, False]
    assert [v.passed for v in out] == [False, True, False, False]


@pytest.mark.parametrize("ceiling", [438.11892, 25.78826688808922, 1.0])
def test_a_failed_confirmation_bisects_from_the_lowest_rate_a_pass_ends_the_search_at(ceiling):
    import math

    from rackplan.sim.search.verify import RATE_TOL, UTIL_MAX, within_tol

    r = within_tol(ceiling)
    assert ceiling <= r * (1.0 + RATE_TOL)  # a pass at r ends max_rate's bisection (hi <= lo * (1 + tol))
    assert not ceiling <= math.nextafter(r, 0.0) * (1.0 + RATE_TOL)  # ... and at no lower rate
    assert UTIL_MAX * ceiling < r < ceiling  # (UTIL_MAX x the ceiling, the old start, did not end it)


def test_the_tolerance_start_survives_a_division_that_rounds_down():
    from rackplan.sim.search.verify import RATE_TOL, within_tol

    assert not 438.11892 <= 438.11892 / (1.0 + RATE_TOL) * (1.0 + RATE_TOL)  # the plain quotient misses by an ulp
    assert 438.11892 <= within_tol(438.11892) * (1.0 + RATE_TOL)
