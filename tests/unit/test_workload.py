"""Workload generation: seeded draws, length distributions, flat prefix hits (traces: test_traces.py)."""
import numpy as np
import pytest

from rackplan.sim.workload import make_requests
from rackplan.specs import Arrival, LengthDist, Workload

pytestmark = pytest.mark.unit


def wl(**kw):
    base = dict(name="w", arrival=Arrival(kind="poisson", rate=10.0), isl=LengthDist(kind="fixed", value=100),
                osl=LengthDist(kind="fixed", value=10), num_requests=2000, seed=1)
    base.update(kw)
    return Workload(**base)


def test_seeded_and_deterministic():
    a, b = make_requests(wl()), make_requests(wl())
    assert np.array_equal(a.arrival_s, b.arrival_s)
    c = make_requests(wl(), seed=2)
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert np.mean(np.diff(a.arrival_s)) == pytest.approx(0.1, rel=0.06)  # Poisson at 10 req/s


def test_length_distributions_and_prefix_hits():
    r = make_requests(wl(isl=LengthDist(kind="lognormal", mean=2000, sigma=0.8, max=20000),
                         osl=LengthDist(kind="uniform", low=5, high=15), prefix_hit_rate=0.5))
    assert r.isl.mean() == pytest.approx(2000, rel=0.08) and r.isl.max() <= 20000
    assert r.osl.min() >= 5 and r.osl.max() <= 15
    assert np.array_equal(r.cached, np.minimum(np.floor(r.isl * 0.5), r.isl - 1))


def test_weighted_percentiles_equal_repeated():
    from rackplan.sim.metrics import weighted_percentiles
    rng = np.random.default_rng(0)
    v, w = rng.random(50), rng.integers(0, 20, 50)
    rep = np.repeat(v, w)
    for q in (50, 90, 99):
        assert weighted_percentiles(v, w.astype(float), [q])[0] == np.percentile(rep, q, method="inverted_cdf")
