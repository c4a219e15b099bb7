"""The typed step shape (executor/step_shape.py): what the executor records, the schema checks and
calibration reads back into the cost model's RankWork."""
import json

import numpy as np
import pytest

from rackplan.calibration.samples import step_samples
from rackplan.calibration.synthetic import synth_records
from rackplan.executor.schema import validate_record
from rackplan.executor.step_shape import StepShape
from rackplan.sim.cost.batch import RankBatch, RankWork
from rackplan.specs import SpecError, load_plan, load_profile

pytestmark = pytest.mark.unit


def test_decode_and_prefill_shapes_count_by_hand():
    # decode: 3 sequences with 10, 20, 30 tokens before the step, 1 + 2 draft tokens each
    d = StepShape.decode([10, 20, 30], queries=3)
    assert (d.batch, d.tokens, d.ctx_sum) == (3, 9, 13 + 23 + 33)
    assert d.to_rank_work() == RankWork(3.0, 69.0)
    # prefill: a 100-token chunk after 50 cached, a whole 40-token prompt
    p = StepShape.prefill([100, 40], [50, 0])
    assert (p.batch, p.tokens, p.ctx_sum) == (2, 140, 190)
    assert p.to_rank_work() == RankWork(chunks=((1.0, 100.0, 50.0), (1.0, 40.0, 0.0)))
    # the cost model's own reduction of the same rank's work gives the same RankWork
    rb = RankBatch(np.zeros(1), np.zeros(1), [np.array([100.0, 40.0])], [np.array([50.0, 0.0])])
    assert rb.step().works == (p.to_rank_work(),)


def test_a_record_round_trips_through_json():
    s = StepShape.prefill([7, 9], [3, 0]).with_extra(instance="prefill[0].0", dp_rank=1, tokens_global=32,
                                                     eplb={"slots": [0, 1]})
    rec = json.loads(json.dumps(s.to_record()))
    assert rec == {"batch": 2, "tokens": 16, "ctx_sum": 19, "prefill_new": [7, 9], "prefill_prefix": [3, 0],
                   "instance": "prefill[0].0", "dp_rank": 1, "tokens_global": 32, "eplb": {"slots": [0, 1]}}
    back = StepShape.from_record(rec)
    assert back == s and back.extra == s.extra
    assert StepShape.decode([4]).to_record() == {"batch": 1, "tokens": 1, "ctx_sum": 5}  # no prefill lists


def test_records_written_before_the_type_still_load():
    # older prefill records carried no prefill_prefix (no prefix), older decode ones no ctx_sum
    old = StepShape.from_record({"batch": 1, "tokens": 64, "prefill_new": [64]})
    assert old.prefill_prefix == (0,) and old.to_rank_work() == RankWork(chunks=((1.0, 64.0, 0.0),))
    assert StepShape.from_record({"batch": 8, "tokens": 8}).to_rank_work() == RankWork(8.0, 0.0)


@pytest.mark.parametrize("shape, field", [
    ({"batch": -1}, "shape.batch"), ({"batch": 2.5}, "shape.batch"), ({"ctx_sum": float("nan")}, "shape.ctx_sum"),
    ({"prefill_new": 5}, "shape.prefill_new"), ({"prefill_new": [4, 4], "prefill_prefix": [0]}, "shape.prefill_prefix"),
    ({"instance": 3}, "shape.instance"), ({"tokens": True}, "shape.tokens")])
def test_the_schema_names_the_shape_field_that_breaks(shape, field):
    rec = synth_records(load_plan("tiny-cpu"), load_profile("cpu-local"), repeats=1)[0]
    validate_record(rec, "m.jsonl:1")  # the synthetic record itself is valid
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        validate_record(dict(rec, shape=shape), "m.jsonl:1")


def test_calibration_reads_the_shapes_the_records_carry():
    plan = load_plan("tiny-cpu")
    recs = synth_records(plan, load_profile("cpu-local"), decode_batches=(4,), prefill_tokens=(128,), repeats=1)
    by_role = {s.role: s for s in step_samples(recs, plan)}
    dec, pre = by_role["decode"], by_role["prefill"]
    assert dec.size == 4 and list(dec.rb.dec_batch) == [4] * plan.decode[0].dp
    assert list(dec.rb.dec_ctx) == [4 * 64] * plan.decode[0].dp  # the synthetic 64 tokens of context each
    assert pre.size == 128 and [list(n) for n in pre.rb.pre_new] == [[128.0]] * plan.prefill[0].dp


def test_a_prefill_rank_without_chunks_still_records_its_lists():
    idle = StepShape.prefill([])  # a DP rank of a prefill step that ran no chunk this step
    assert idle.to_record() == {"batch": 0, "tokens": 0, "ctx_sum": 0, "prefill_new": [], "prefill_prefix": []}
    assert StepShape.from_record(idle.to_record()).is_prefill and idle.to_rank_work() == RankWork()
