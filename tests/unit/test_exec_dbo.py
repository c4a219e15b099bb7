"""executor/dbo.py: whether the executor splits a step into two micro-batches (vLLM's rule, the cost
model's sim/cost/dbo.splits)."""
import dataclasses

import pytest

from rackplan.executor.dbo import dbo_splits
from rackplan.specs import load_plan

pytestmark = pytest.mark.unit


def _layout(dbo=True, ep_dp=2, decode=32, prefill=512):
    lay = load_plan("tiny-cpu").decode[0]
    return dataclasses.replace(lay, dp=ep_dp, dbo=dbo, dbo_decode_token_threshold=decode,
                               dbo_prefill_token_threshold=prefill)


def test_the_split_is_the_cost_models_rule():
    lay = _layout(decode=4, prefill=100)
    assert dbo_splits(lay, [4, 9], False)  # every rank at the decode threshold
    assert not dbo_splits(lay, [3, 9], False)  # one rank below it: no rank splits
    assert not dbo_splits(lay, [99, 400], True)  # prompt tokens: the prefill threshold
    assert dbo_splits(lay, [100, 100], True)
    assert not dbo_splits(_layout(dbo=False, decode=2), [8, 8], False)  # DBO off
    assert not dbo_splits(_layout(ep_dp=1, decode=2), [8], False)  # EP1: no all-to-all to overlap
