"""calibration/fit.py fit_loop_host: the decode loop's host seconds per step, fixed + per request admitted +
per request finished, from serving runs' decode-leader records (loop record + host.exposed)."""
import itertools

import pytest

from rackplan.calibration.fit import MIN_LOOP_STEPS, fit_loop_host, loop_steps

pytestmark = pytest.mark.unit

FIXED, PER_ADMIT, PER_FINISH = 1.0e-3, 5.0e-4, 2.0e-4


SAMPLE = 4.0e-5  # sampling: inside host.exposed (executor/disagg.py), no loop time


def _step(step: int, admitted: int, finished: int, rank: int = 1, exposed_share: float = 0.3) -> list[dict]:
    """One decode-leader step: the host seconds split between the plan (30%: host.exposed less
    host.sample) and the loop record."""
    host = FIXED + PER_ADMIT * admitted + PER_FINISH * finished
    shape = {"instance": "decode[0].0", "admitted_global": admitted, "finished_global": finished,
             "time_shared": False}
    return [{"op": "host.exposed", "role": "decode", "rank": rank, "step": step,
             "seconds": exposed_share * host + SAMPLE, "shape": shape},
            {"op": "host.sample", "role": "decode", "rank": rank, "step": step, "seconds": SAMPLE, "shape": shape},
            {"op": "host", "role": "serve", "rank": rank, "step": step, "seconds": (1 - exposed_share) * host,
             "shape": {"instance": "decode[0].0", "decode_steps": 1, "time_shared": False}}]


def _records(n: int) -> list[dict]:
    mixes = itertools.cycle([(0, 0), (1, 0), (0, 1), (1, 1), (2, 1), (0, 2), (3, 2)])
    return [r for i, (a, f) in zip(range(n), mixes) for r in _step(i, a, f)]


def test_the_fixed_and_per_request_terms_are_recovered_from_exact_steps():
    recs = _records(35)
    rows = loop_steps(recs)
    assert len(rows) == 35 and rows[4] == (pytest.approx(FIXED + 2 * PER_ADMIT + PER_FINISH), 2, 1)
    fixed, admit, finish = fit_loop_host(recs)
    assert fixed == pytest.approx(FIXED, rel=2e-3)
    assert admit == pytest.approx(PER_ADMIT, rel=2e-3)
    assert finish == pytest.approx(PER_FINISH, rel=2e-3)


def test_too_few_steps_or_no_turnover_fit_nothing():
    assert fit_loop_host(_records(MIN_LOOP_STEPS - 1)) is None
    still = [r for i in range(40) for r in _step(i, 0, 0)]  # no step admits or finishes: the terms are not seen
    assert fit_loop_host(still) is None


def test_only_the_leaders_own_exposed_time_joins_its_loop_record():
    recs = _records(30)
    other = [dict(r, rank=2) for r in recs if r["op"].startswith("host.")]  # a non-leader rank's records
    assert len(loop_steps(recs + other)) == 30
    shared = [dict(r, shape=dict(r["shape"], time_shared=True)) if r["op"] == "host" else r for r in recs]
    assert loop_steps(shared) == []  # a time-shared (colocated) loop is not a decode loop's alone


def test_the_fits_serving_step_leaves_out_the_plan_the_loop_terms_price():
    from rackplan.calibration.samples import raw_steps
    from rackplan.specs import load_plan

    plan = load_plan("tiny-disagg")
    base = {"role": "decode", "rank": 1, "step": 0, "source": "measured", "plan_hash": "h", "layers": 4,
            "world_size": 2}
    shape = {"instance": "decode[0].0", "time_shared": False, "serving": True, "batch": 2, "ctx_sum": 100,
             "tokens": 2}
    recs = [dict(base, op="step", seconds=0.020, shape=shape),  # forward 15 ms + sampling 1 ms + the plan 4 ms
            dict(base, op="host.exposed", seconds=0.005, shape=shape), dict(base, op="host.sample", seconds=0.001,
                                                                            shape=shape),
            dict(base, op="attn.core", seconds=0.015, shape=shape)]
    (s,) = raw_steps(recs, plan)
    assert s.step_s == pytest.approx(0.016) and s.serve
    shared = [dict(r, shape=dict(shape, time_shared=True)) for r in recs]  # colocated: its loop is priced apart
    (t,) = raw_steps(shared, plan)
    assert t.step_s == pytest.approx(0.020)


PER_ARRIVAL = 1.0e-3  # s a request the prefill leader takes in


def _prefill_step(step: int, admitted: int) -> list[dict]:
    """One prefill-leader step: fixed + per admitted request, split between the plan and the loop record."""
    host = FIXED + PER_ARRIVAL * admitted
    shape = {"instance": "prefill[0].0", "admitted_global": admitted, "finished_global": admitted,
             "time_shared": False}
    return [{"op": "host.exposed", "role": "prefill", "rank": 0, "step": step, "seconds": 0.6 * host + SAMPLE,
             "shape": shape},
            {"op": "host.sample", "role": "prefill", "rank": 0, "step": step, "seconds": SAMPLE, "shape": shape},
            {"op": "host", "role": "serve", "rank": 0, "step": step, "seconds": 0.4 * host,
             "shape": {"instance": "prefill[0].0", "prefill_steps": 1, "time_shared": False}}]


def test_the_prefill_leaders_intake_per_request_is_recovered_apart_from_the_decode_loop():
    from rackplan.calibration.fit import fit_prefill_intake
    pre = [r for i, a in zip(range(30), itertools.cycle([1, 2, 4, 3, 1, 6])) for r in _prefill_step(i, a)]
    assert loop_steps(pre, "prefill")[2] == (pytest.approx(FIXED + 4 * PER_ARRIVAL), 4, 4)
    assert fit_prefill_intake(pre) == pytest.approx(PER_ARRIVAL, rel=2e-3)
    both = pre + [dict(r, step=r["step"] + 1000) for r in _records(35)]
    assert fit_prefill_intake(both) == pytest.approx(PER_ARRIVAL, rel=2e-3)  # the decode loop's steps stay apart
    assert len(loop_steps(both)) == 35 and len(loop_steps(both, "prefill")) == 30
    assert fit_prefill_intake(pre[:3 * (MIN_LOOP_STEPS - 1)]) is None
