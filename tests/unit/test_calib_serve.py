"""The lockstep replay prices a served request's timeline with the cost model, tick by tick."""
import dataclasses

import numpy as np
import pytest

from rackplan.calibration.serve_replay import compare, lockstep
from rackplan.sim.cost.step import CostContext, RankBatch, step_cost
from rackplan.sim.cost.transfer import kv_transfer_seconds
from rackplan.specs import load_hardware, load_model, load_plan, load_profile

pytestmark = pytest.mark.unit
PLAN = load_plan("tiny-cpu")
# tiny-cpu schedules synchronously: every host part adds to the step
PROF = dataclasses.replace(load_profile("datasheet"),
                           host=dataclasses.replace(load_profile("datasheet").host, schedule_step_s=1e-3))


def _req(rid, isl, osl, arrival, ttft=0.05, tpot=0.01):
    return {"op": "request", "step": rid, "rank": 0, "isl": isl, "osl": osl, "arrival_s": arrival,
            "ttft_s": ttft, "tpot_s": tpot, "e2e_s": ttft + tpot * (osl - 1), "shape": {"cached": 0}}


def test_one_request_is_prefill_transfer_then_decode_steps():
    model, hw = load_model(PLAN.model), load_hardware(PLAN.hardware)
    pre, dec = PLAN.prefill[0], PLAN.decode[0]
    got = lockstep(PLAN, [_req(0, 40, 3, 0.5)], PROF)
    t_pre = step_cost(CostContext(model, hw, pre, PROF),
                      RankBatch(np.zeros(2), np.zeros(2), [np.array([40.0]), np.zeros(0)],
                                [np.zeros(1), np.zeros(0)])).period_s
    t_xfer = kv_transfer_seconds(model, hw, PROF, 40, same_domain=True)

    def t_dec(ctx):
        return step_cost(CostContext(model, hw, dec, PROF), RankBatch(np.array([1.0, 0.0]),
                                                                      np.array([ctx + 1.0, 0.0]))).period_s

    # each step's period carries the engine loop (the scheduler part) once (cost/host.py), nothing on top
    c = step_cost(CostContext(model, hw, dec, PROF), RankBatch(np.array([1.0, 0.0]), np.array([41.0, 0.0])))
    assert c.host.part("host.schedule") >= 1e-3 and t_dec(40) == pytest.approx(c.seconds)
    assert got["ttft"][0] == pytest.approx(t_pre + t_xfer + t_dec(40))
    assert got["tpot"][0] == pytest.approx((t_dec(41) + t_dec(42)) / 2)


def test_compare_reports_both_readings():
    recs = [_req(i, 20 + 7 * i, 2 + i % 4, 0.05 * i) for i in range(8)]
    out = compare(PLAN, recs, PROF)
    assert out["requests"] == 8
    for name in ("lockstep", "simulator"):
        assert np.isfinite(out[f"{name}.ttft_p50_err"]) and out[f"{name}.tpot_p90_predicted_s"] > 0
