"""Serving mode's pieces without ranks: the scheduler's tick plans and timeline on a fake clock,
and chunked prefill (a prompt in chunks equals the prompt at once)."""
from __future__ import annotations

import math

import pytest
import torch

from rackplan.executor.model import Batch, Model, layer_ids
from rackplan.executor.parallel import make_ep_group
from rackplan.executor.serving import DecodeSeats, PrefillQueue, Scheduler
from rackplan.executor.timing import NullTimer
from rackplan.policy import EngineCore

from .test_exec_model import _variant

pytestmark = pytest.mark.unit


def _sched(isl, osl, arrival, n_prefill=2, budget=8, max_seqs=2, n_decode=2, max_batch=1, concurrency=0):
    isl, osl, cached = list(isl), list(osl), [0] * len(isl)
    pre = EngineCore("prefill", n_prefill, budget, max_seqs, 10**6, 16, isl, osl, cached)
    dec = EngineCore("decode", n_decode, budget, max_batch, 10**6, 16, isl, osl, cached)
    return Scheduler(isl, osl, list(arrival), PrefillQueue(pre), DecodeSeats(dec), concurrency)


def _run(sched, dt=1.0, max_ticks=100):
    """Tick at a fixed step time dt (ticks end at dt, 2dt, ...); returns the plans."""
    now, ticks = 0.0, []
    while not sched.finished and len(ticks) < max_ticks:
        sched.arrive(now)
        if not sched.busy:
            now = sched.next_arrival()
            continue
        tick = sched.plan(now)
        ticks.append(tick)
        now += dt
        sched.done(tick, now)
    return ticks


def test_timeline_prefill_handoff_first_decode_step():
    """One request: prefill, KV hand-off and first decode step share tick 0 (TTFT = 1 tick), then
    osl - 1 more decode steps."""
    s = _sched([5], [3], [0.0])
    ticks = _run(s)
    assert [t.has_prefill for t in ticks] == [True, False, False]
    assert ticks[0].transfers[0].length == 5 and ticks[0].decode[0][0].new
    t = s.times[0]
    assert (t.arrival, t.prefill_done, t.first_token, t.finish) == (0.0, 1.0, 1.0, 3.0)


def test_long_prompt_is_chunked_on_one_rank_at_the_budget():
    s = _sched([20], [1], [0.0], budget=8)
    ticks = _run(s)
    chunks = [c for t in ticks for per in t.prefill for c in per]
    assert [(c.start, c.take, c.last) for c in chunks] == [(0, 8, False), (8, 8, False), (16, 4, True)]
    assert len({c.slot for c in chunks}) == 1
    assert {r for t in ticks for r, per in enumerate(t.prefill) if per} == {0}
    assert s.times[0].first_token == 3.0


def test_continuous_batching_seats_a_request_when_one_finishes():
    """One decode rank with one seat: the second request waits staged until the first finishes."""
    s = _sched([4, 4], [2, 2], [0.0, 0.0], n_decode=1, max_batch=1)
    ticks = _run(s)
    assert [[x.rid for x in t.decode[0]] for t in ticks] == [[0], [0], [1], [1]]
    assert s.times[1].prefill_done == 1.0 and s.times[1].first_token == 3.0


def test_idle_engine_waits_for_arrivals_and_closed_loop_releases_on_finish():
    s = _sched([4, 4], [1, 1], [0.0, 5.0])
    _run(s)
    assert s.times[1].arrival == 5.0 and s.times[1].first_token == 6.0
    c = _sched([4, 4, 4], [2, 2, 2], [math.nan] * 3, concurrency=2)
    _run(c)
    assert [t.arrival for t in c.times] == [0.0, 0.0, c.times[0].finish]


@pytest.mark.parametrize("kind", ["mla", "gqa", "csa"])
def test_chunked_prefill_equals_whole_prompt(kind):
    spec = _variant(kind)
    model = Model(spec, 0, "cpu", torch.float32, make_ep_group(None, 0, 1, spec.moe.num_experts),
                  layer_ids(spec, "prefill"))
    toks = torch.randint(0, spec.vocab_size, (23,), generator=torch.Generator().manual_seed(2))
    whole = model.kv_cache(1, 24)
    want = model.forward(Batch.prefill(toks, [23]), whole, NullTimer())
    cache, slot = model.kv_cache(2, 24), torch.tensor([1])
    for start, end in ((0, 9), (9, 17), (17, 23)):
        got = model.forward(Batch.prefill(toks[start:end], [end - start], slot, [start]), cache, NullTimer())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for a, b in zip(whole.data, cache.data, strict=True):
        torch.testing.assert_close(b[1, :23], a[0, :23], rtol=1e-4, atol=1e-4)


def test_a_preempted_sequence_finds_its_kept_kv_in_its_new_slot():
    """The policy's kept-blocks trace (test_policy.test_preempted_blocks_stay_cached: blocks of 4, 5 of them)
    through DecodeSeats and a KVCache whose position p of request r holds 100 r + p: rids 1 and 2 are
    preempted first with 8 and 4 tokens kept, their slots given back (and wiped: a free slot holds nothing the
    policy counts on); readmitted, each recompute chunk starts at 7 and 3 in a slot that holds the request's
    positions before it (KVCache.keep), and every seat's slot holds its whole context every step."""
    from rackplan.executor.attention import KVCache

    seats = DecodeSeats(EngineCore("decode", 1, 8, 4, 5, 4, [6, 5, 2], [4, 8, 8], [0] * 3))
    for rid in range(3):
        seats.stage(rid)
    cache = KVCache(1, 4, 16, 1, torch.float32, "cpu")  # 1 layer, 4 slots, 16 positions, entry dim 1
    d = cache.data[0][..., 0]  # [slots, positions]

    def want(rid, n):
        return torch.arange(n, dtype=torch.float32) + 100 * rid

    kept, starts = {}, {}
    for _ in range(20):
        if not seats.busy:
            break
        per = seats.seat()
        cache.keep(seats.kept[0], seats.chunks[0])
        for k in seats.kept[0]:
            kept.setdefault(k.rid, k.tokens)
            d[k.slot] = -1
        for c in seats.chunks[0]:
            starts.setdefault(c.rid, c.start)
            assert torch.equal(d[c.slot, :c.start], want(c.rid, c.start))
            d[c.slot, c.start:c.start + c.take] = want(c.rid, c.start + c.take)[c.start:]  # the recompute
        for s in per[0]:
            if s.new:
                d[s.slot, :s.ctx] = want(s.rid, s.ctx)  # the KV hand-off
            assert torch.equal(d[s.slot, :s.ctx], want(s.rid, s.ctx))
            d[s.slot, s.ctx] = 100 * s.rid + s.ctx  # this step's token
        seats.book(per)
    assert not seats.busy and kept == {1: 8, 2: 4} and starts == {1: 7, 2: 3} and cache.kept == {}
