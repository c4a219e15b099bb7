"""One length sampler (rackplan/specs sample_lengths) for the simulator's requests and the executor's
batch shapes: the same seed gives both the same lengths, and each kind draws what its spec says."""
import numpy as np
import pytest

from rackplan.executor.workload import decode_contexts, drawn_lengths, prefill_lengths
from rackplan.sim.workload import make_requests
from rackplan.specs import Arrival, LengthDist, SpecError, Workload, sample_lengths

pytestmark = pytest.mark.unit

LOGNORMAL = LengthDist(kind="lognormal", mean=2000, sigma=0.8, max=6000)
UNIFORM = LengthDist(kind="uniform", low=5, high=15)


def workload(isl: LengthDist, osl: LengthDist) -> Workload:
    return Workload(name="w", arrival=Arrival(kind="poisson", rate=10.0), isl=isl, osl=osl, num_requests=300, seed=7)


@pytest.mark.parametrize("isl, osl", [(LOGNORMAL, UNIFORM), (UNIFORM, LengthDist(kind="fixed", value=9))])
def test_the_simulator_and_the_executor_draw_the_same_lengths_from_one_seed(isl, osl):
    wl = workload(isl, osl)
    reqs = make_requests(wl)  # the simulator draws the prompts' lengths, then the outputs', from the seed
    rng = np.random.default_rng(wl.seed)
    assert drawn_lengths(wl.isl, rng, 300) == reqs.isl.tolist()
    assert drawn_lengths(wl.osl, rng, 300) == reqs.osl.tolist()


def test_the_executors_decode_contexts_are_the_shared_draws_plus_a_share_of_the_output():
    wl, rng = workload(LOGNORMAL, UNIFORM), np.random.default_rng(3)
    ctx = decode_contexts(wl, 40, np.random.default_rng(3))
    isl, osl = sample_lengths(LOGNORMAL, 40, rng), sample_lengths(UNIFORM, 40, rng)
    assert ctx == [int(i) + int(rng.integers(0, o)) for i, o in zip(isl, osl)]
    first = sample_lengths(LOGNORMAL, 1, np.random.default_rng(4))[0]
    assert prefill_lengths(wl, 10**6, 1, np.random.default_rng(4)) == [first]  # one whole prompt


def test_each_kind_draws_what_its_spec_says():
    rng = np.random.default_rng(0)
    assert sample_lengths(LengthDist(kind="fixed", value=12, max=10), 3, rng).tolist() == [10, 10, 10]
    # sigma 0: every draw is exp(ln(mean)) = the mean, rounded
    assert sample_lengths(LengthDist(kind="lognormal", mean=123.4, sigma=0.0), 4, rng).tolist() == [123] * 4
    u = sample_lengths(UNIFORM, 5000, rng)
    assert u.dtype == np.int64 and u.min() == 5 and u.max() == 15  # both ends inclusive
    tiny = sample_lengths(LengthDist(kind="lognormal", mean=1.0, sigma=2.0), 5000, rng)
    assert tiny.min() == 1  # never an empty prompt
    with pytest.raises(ValueError, match="read from the trace"):
        sample_lengths(LengthDist(kind="trace"), 1, rng)
    with pytest.raises(SpecError, match="for execute"):
        drawn_lengths(LengthDist(kind="trace"), rng, 1)
