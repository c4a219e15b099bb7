"""The serving policy (rackplan/policy) on small hand-worked cases: routing, rank binding, FIFO
queues, chunking, paged KV and recompute preemption."""
from __future__ import annotations

import math
import random

import pytest

from rackplan.policy import EngineCore, Router, bind_rank, blocks, choose

pytestmark = pytest.mark.unit


def _core(role, ranks=2, budget=8, seqs=4, kv=100, block=4, isl=(), osl=(), cached=None, q=1, tps=1.0, keep=False):
    """keep=False: a preempted sequence's blocks are lost (the recompute path these hand traces follow);
    the engine's default keeps them cached (test_preempted_blocks_stay_cached)."""
    isl, osl = list(isl), list(osl)
    return EngineCore(role, ranks, budget, seqs, kv, block, isl, osl, list(cached or [0] * len(isl)), q, tps,
                      keep_preempted=keep)


def _step(core, emitted=None):
    batch = core.schedule()
    return batch, core.finish(batch, emitted)


def test_routers_pick_as_documented():
    # least_loaded: lowest load; ties go to the first at or after the decision count (mod n)
    assert choose("least_loaded", [3, 1, 1], 1, 1) == 1
    assert choose("least_loaded", [3, 1, 1], 2, 1) == 2
    assert choose("least_loaded", [3, 1, 1], 3, 1) == 1  # 3 mod 3 = 0: instance 0 is not among the lowest
    assert [choose("round_robin", [9, 0, 0], d, t) for d, t in ((1, 1), (2, 2), (3, 3), (4, 4))] == [0, 1, 2, 0]
    assert choose("prefix_aware", [5, 5], 1, 1, uncached=[5, 2]) == 1  # the bigger cache hit wins
    r = Router("least_loaded")
    assert [r.pick("p", [0, 0]) for _ in range(3)] == [1, 0, 1] and r.decisions == 3
    with pytest.raises(ValueError):
        Router("random")


def test_rank_binding_is_vllms_score():
    assert bind_rank([0, 0], [3, 2]) == 1  # 4 x waiting + running: 3 vs 2
    assert bind_rank([1, 0], [0, 3]) == 1  # 4 vs 3
    assert bind_rank([0, 0], [1, 1]) == 0  # ties: the first


def test_a_chunked_prompt_stays_on_its_rank_and_the_queue_is_fifo():
    """Budget 8 per rank: rid 0 (20 tokens) binds to rank 0, rid 1 (4) to rank 1 (scores 4, 0), rid 2
    to rank 0 (scores 4, 4: the first). rid 0 takes rank 0's budget for three steps (8, 8, 4); rid 2
    waits behind it on rank 0 (rank 1 is free, but a prompt does not move), then takes what is left."""
    core = _core("prefill", isl=[20, 4, 6], osl=[1, 1, 1])
    for rid in range(3):
        core.add(rid)
    steps = [_step(core) for _ in range(3)]
    assert [b.chunks for b, _ in steps] == [[[(0, 8, 0)], [(1, 4, 0)]], [[(0, 8, 8)], []],
                                            [[(0, 4, 16), (2, 4, 0)], []]]
    assert [d.prefilled for _, d in steps] == [[(1, 1)], [], [(0, 0)]]
    b, d = _step(core)
    assert b.chunks == [[(2, 2, 4)], []] and d.prefilled == [(0, 2)] and not core.busy


def test_decode_kv_grows_in_blocks_and_the_newest_is_preempted():
    """One rank of 5 four-token blocks; a decoding sequence of context c holds ceil((c + 1) / 4).
    Step 1: rid 0 (ctx 6), rid 1 (5), rid 2 (2) hold 2 + 2 + 1 = 5. Step 3: contexts 8, 7, 4 need
    3 + 2 + 2 = 7: rid 2, the newest, is preempted (context 4, 6 tokens left). Step 4: contexts 9, 8
    need 3 + 3: rid 1 is preempted (8, 5 left), and nobody is admitted in a step that preempted;
    rid 0 emits its last token. Step 5: rid 1 recomputes its 8 tokens (the whole budget) as a prefill
    chunk; rid 2 waits behind it. Step 6: rid 1 decodes on from context 8, rid 2 recomputes."""
    core = _core("decode", ranks=1, kv=5, isl=[6, 5, 2], osl=[4, 8, 8])
    for rid in range(3):
        core.add(rid)
    b, _ = _step(core)
    assert b.admitted == [0, 1, 2] and b.decoding == 3
    b, _ = _step(core)
    assert b.preempted == [] and b.decoding == 3
    b, _ = _step(core)
    assert b.preempted == [2] and b.decoding == 2 and core.resume[2] == (4.0, 6.0)
    b, d = _step(core)
    assert b.preempted == [1] and not b.chunks[0] and d.finished == [0] and core.resume[1] == (8.0, 5.0)
    b, _ = _step(core)
    assert b.chunks == [[(1, 8, 0)]] and b.decoding == 0
    b, _ = _step(core)
    assert b.decoding == 1 and core.context(1) == (9.0, 4.0) and b.chunks == [[(2, 4, 0)]]  # (after the step)


def test_preempted_blocks_stay_cached():
    """The trace above with vLLM V1's default prefix caching: a preempted sequence's full blocks go back to the
    free queue with their hashes and are found again on readmission (KVCacheManager.get_computed_blocks), so
    the recompute runs only what they do not hold, and at least its last token. Step 5: rid 1 (context 8, two
    full blocks kept) resumes from 7 (8 - 1: a whole-context hit computes its last token), 1 token in 2 blocks;
    rid 2 (context 4, one block kept) from 3, 1 token in 1 block: 3 of 5 blocks, 2 of the 8-token budget, both
    in one step where the lost-blocks trace spends the budget on rid 1's 8 tokens. Step 6: both decode."""
    core = _core("decode", ranks=1, kv=5, isl=[6, 5, 2], osl=[4, 8, 8], keep=True)
    for rid in range(3):
        core.add(rid)
    for _ in range(3):
        _step(core)
    b, d = _step(core)
    assert b.preempted == [1] and d.finished == [0] and core.kept == {2: 4, 1: 8}
    b, _ = _step(core)
    assert b.chunks == [[(1, 1, 7), (2, 1, 3)]] and b.decoding == 0 and core.kept == {}
    b, _ = _step(core)
    assert b.decoding == 2 and core.context(1) == (9.0, 4.0) and core.context(2) == (5.0, 5.0)


def test_lazy_block_count_equals_block_by_block_allocation():
    """The engine sums a rank's blocks only when its bound says it could run out; a reference that
    allocates block by block for every sequence every step makes the same preemptions."""
    rng = random.Random(3)
    for trial in range(20):
        block, kv, q, tps = rng.choice((4, 16)), rng.randint(8, 40), rng.choice((1, 2)), rng.choice((1.0, 2.0, 1.5))
        n = 40
        isl = [rng.randint(1, 3 * block) for _ in range(n)]
        osl = [rng.randint(1, 30) for _ in range(n)]
        core = _core("decode", ranks=1, budget=10**6, seqs=64, kv=kv, block=block, isl=isl, osl=osl, q=q, tps=tps)
        isl = [min(i, kv * block - o - q - 1) for i, o in zip(isl, osl, strict=True)]
        core.isl[:] = isl
        added = 0
        for _ in range(400):
            if added < n and rng.random() < 0.5:
                core.add(added)
                added += 1
            batch = core.schedule()
            # the reference: every decoding sequence's blocks for this step, allocated one by one
            held = sum(blocks(core.context(rid)[0] + q, block) for rid in core.decoding_on(0))
            held += sum(core.held.values())
            assert held <= kv, trial
            core.finish(batch)
            if added == n and not core.busy:
                break
        assert not core.busy


def test_aggregated_first_token_at_the_last_chunk_then_decode_on_the_same_rank():
    core = _core("both", ranks=1, budget=6, isl=[10], osl=[3])
    core.add(0)
    b, d = _step(core)
    assert b.chunks == [[(0, 6, 0)]] and not d.first
    b, d = _step(core)
    assert b.chunks == [[(0, 4, 6)]] and d.first == [0]
    b, d = _step(core)
    assert b.decoding == 1 and core.context(0) == (11.0, 1.0) and not d.finished
    b, d = _step(core)
    assert d.finished == [0] and not core.busy
    assert math.isclose(core.ctx[0], 0.0)


def test_drawn_acceptance_short_of_the_expected_rate_keeps_the_sequence_decoding():
    """Speculation at 2.2 expected tokens per step: a sequence with 2 tokens left is scheduled to end
    this step (ceil(2 / 2.2) = 1). When the drawn acceptance emits only 1 it must decode one more step
    (ending it on the expected rate lost its last token: the executor's output came out one short)."""
    core = _core("decode", ranks=1, isl=[4], osl=[2], q=3, tps=2.2)
    core.add(0)
    _, d = _step(core, {0: 1})  # 2 left before this step, 1 emitted
    assert d.finished == [] and core.context(0) == (5.0, 1.0)
    _, d = _step(core, {0: 1})
    assert d.finished == [0]
    core2 = _core("decode", ranks=1, isl=[4], osl=[2], q=3, tps=2.2)
    core2.add(0)
    _, d = _step(core2, {0: 2})  # all drafts kept: done in one step
    assert d.finished == [0]
