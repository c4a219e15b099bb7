"""Workload generation: seeded draws, length distributions, prefix hits, public trace formats."""
import numpy as np
import pytest

from rackplan.sim.workload import make_requests, read_trace
from rackplan.specs import Arrival, LengthDist, SpecError, Workload

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


def test_azure_csv_trace(tmp_path):
    p = tmp_path / "azure.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
                 "2023-11-16 18:15:47.0000000,879,0\n")
    t, isl, osl = read_trace(p)
    assert t[0] == 0.0 and t[-1] == pytest.approx(4.3146, abs=1e-3)
    assert list(isl) == [374, 879, 396] and list(osl) == [44, 1, 109]  # sorted by time, osl >= 1
    w = wl(arrival=Arrival(kind="trace", time_scale=0.5), isl=LengthDist(kind="trace"),
           osl=LengthDist(kind="trace"), trace=str(p))
    r = make_requests(w)
    assert len(r) == 3 and r.arrival_s[-1] == pytest.approx(4.3146 / 2, abs=1e-3)


def test_mooncake_jsonl_trace(tmp_path):
    p = tmp_path / "mooncake.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [1, 2]}\n'
                 '{"timestamp": 1500, "input_length": 7000, "output_length": 10, "hash_ids": [1]}\n')
    t, isl, osl = read_trace(p)
    assert list(t) == [0.0, 1.5] and list(isl) == [6955, 7000]


def test_bad_trace(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("when,what\n1,2\n")
    with pytest.raises(SpecError, match="trace"):
        read_trace(p)


def test_weighted_percentiles_equal_repeated():
    from rackplan.sim.metrics import weighted_percentiles
    rng = np.random.default_rng(0)
    v, w = rng.random(50), rng.integers(0, 20, 50)
    rep = np.repeat(v, w)
    for q in (50, 90, 99):
        assert weighted_percentiles(v, w.astype(float), [q])[0] == np.percentile(rep, q, method="inverted_cdf")
