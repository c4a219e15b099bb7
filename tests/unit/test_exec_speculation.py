"""Speculation on the executor: a verify step of 1 + depth tokens per sequence emits 1 + accepted
tokens, its first token is an ordinary decode step, and the cache after a partial acceptance is
the cache of the accepted sequence."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rackplan.executor.model import Batch, Model, layer_ids
from rackplan.executor.parallel import make_ep_group
from rackplan.executor.speculate import (
    Drafter,
    accept,
    acceptance_rate,
    draw_accepted,
    verify_batch,
)
from rackplan.executor.timing import NullTimer, StepTimer
from rackplan.sim.search.space import acceptance_length
from rackplan.specs import load_model

pytestmark = pytest.mark.unit
SPEC = load_model("tiny-moe-mtp")
NULL = NullTimer()
CTX, DEPTH = [7, 11], 2


def _model():
    return Model(SPEC, 0, "cpu", torch.float32, make_ep_group(None, 0, 1, SPEC.moe.num_experts),
                 layer_ids(SPEC, "decode"))


def _prompts():
    gen = torch.Generator().manual_seed(5)
    return [torch.randint(0, SPEC.vocab_size, (c + 1,), generator=gen) for c in CTX]  # prompt + last token


def _prefilled(model):
    cache = model.kv_cache(len(CTX), max(CTX) + DEPTH + 4)
    toks = _prompts()
    model.forward(Batch.prefill(torch.cat([t[:-1] for t in toks]), CTX), cache, NULL)
    return cache, torch.stack([t[-1] for t in toks])


@pytest.mark.parametrize("kind,passes", [("mtp", DEPTH), ("draft_model", 3)])
def test_speculation_step_emits_one_plus_accepted_tokens(kind, passes):
    model = _model()
    cache, last = _prefilled(model)
    drafter = Drafter(SPEC, kind, DEPTH, passes, 0, "cpu", torch.float32, len(CTX), max(CTX) + DEPTH + 4)
    timer = StepTimer("cpu")
    drafts = drafter.propose(last, CTX, None, timer)
    assert drafts.shape == (len(CTX), DEPTH) and timer.collect()["draft"] > 0
    logits = model.forward(verify_batch(last, drafts, CTX, None), cache, NULL)
    assert logits.shape == (len(CTX) * (DEPTH + 1), SPEC.vocab_size)
    for accepted in ([0, 0], [1, 2], [2, 0]):
        out = accept(logits, drafts, accepted)
        assert [len(e) for e in out.emitted] == [1 + a for a in accepted]
        assert out.accepted == sum(accepted)
        assert all(e[:a] == d[:a] for e, d, a in zip(out.emitted, drafts.tolist(), accepted, strict=True))


def test_verify_equals_decode_and_partial_acceptance_keeps_a_consistent_cache():
    """Verify logits at position 0 equal a plain decode step; after keeping `a` drafts, the next
    decode step equals the reference that prefilled prompt + last + those drafts."""
    model = _model()
    cache, last = _prefilled(model)
    drafts = torch.tensor([[3, 9], [4, 1]])
    logits = model.forward(verify_batch(last, drafts, CTX, None), cache, NULL).view(len(CTX), DEPTH + 1, -1)
    ref = _model()
    ref_cache, _ = _prefilled(ref)
    plain = ref.forward(Batch.decode(last, CTX), ref_cache, NULL)
    torch.testing.assert_close(logits[:, 0], plain, rtol=1e-4, atol=1e-4)
    out = accept(logits.view(-1, SPEC.vocab_size), drafts, [1, 0])
    nxt = torch.tensor(out.next_tokens)
    step = model.forward(Batch.decode(nxt, [CTX[0] + 2, CTX[1] + 1]), cache, NULL)
    for i, kept in enumerate(([3], [])):
        seq = torch.cat([_prompts()[i], torch.tensor(kept, dtype=torch.long), nxt[i:i + 1]])
        want = _model().forward(Batch.prefill(seq, [len(seq)]), None, NULL)
        torch.testing.assert_close(step[i:i + 1], want, rtol=1e-4, atol=1e-4)


def test_acceptance_rate_gives_the_plans_acceptance_length():
    rate = acceptance_rate(5, 3.5)
    assert acceptance_length(5, rate) == pytest.approx(3.5, abs=1e-9)
    drawn = draw_accepted(np.random.default_rng(0), 20000, 5, rate)
    assert 1 + np.mean(drawn) == pytest.approx(3.5, abs=0.03)
    assert draw_accepted(np.random.default_rng(0), 3, 4, 1.0) == [4, 4, 4]
    assert draw_accepted(np.random.default_rng(0), 3, 4, 0.0) == [0, 0, 0]
