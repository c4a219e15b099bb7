"""One serving instance's scheduler: its DP ranks' queues, chunked prefill, paged KV, decode.

`EngineCore(role, ...)` is a prefill instance ('prefill'), a decode instance ('decode': requests
arrive with their KV) or an aggregated one ('both'). A driver calls `add(rid)` as requests reach
it, then per step `schedule()` -> Batch, runs (or prices) the batch, and `finish(batch)` -> Done.

Per DP rank (vLLM: one engine core per rank; a request stays on the rank it was bound to):
  1. running decode sequences first: each needs KV for its context plus this step's queries
     (1 + draft tokens); a rank short of blocks preempts its newest running sequence (vLLM V1's
     recompute preemption: its blocks freed, it goes back to the head of the rank's queue and
     recomputes its context as prefill when readmitted, from the full blocks the prefix cache still
     holds: `keep_preempted`), until the rest fit;
  2. prompts part-way through prefill, in order, chunked to what is left of the rank's token
     budget (decode queries count against it), blocks for each chunk allocated (preempting as in 1);
  3. the rank's waiting queue, FIFO, unless the rank preempted this step (as vLLM's scheduler): a
     request starts when a seat is free (max_seqs running per rank), budget is left, and its
     chunk's (decode: its context's) blocks are free; the head waits otherwise and the rest behind
     it (the rank's queue is FIFO; other ranks go on).
Decode sequences advance together, `tokens_per_step` tokens a step (a fluid mean under
speculation unless the driver passes each sequence's count), so a step costs O(ranks) vector
work plus O(1) per sequence that starts or finishes. Their blocks are not counted step by step:
a rank's held blocks are the sum of ceil((context + queries) / block) over its sequences (exactly
what block-by-block allocation holds, as nothing is freed mid-life), and are only summed when the
bound (contexts + queries) / block + sequences says the rank could run out.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .kv import block_tokens, blocks, capacity_blocks
from .route import WAITING_WEIGHT

Chunk = tuple[int, int, int]  # (rid, new tokens, tokens before them: prefix-cached or earlier chunks)
Role = Literal["prefill", "decode", "both"]


@dataclass(slots=True)
class Batch:
    """One step of one instance: per DP rank its prefill chunks; every decoding sequence runs."""

    chunks: list[list[Chunk]]  # [rank] -> chunks (new prompts, continued ones, recomputes)
    decoding: int  # decoding sequences this step (all ranks)
    admitted: list[int]  # decode sequences whose first step this is (a decode instance: first token)
    preempted: list[int]  # sequences preempted before this step (they recompute later)
    finishing: int  # decoding sequences whose last token this step emits
    completing: list[int]  # prompts (and recomputes) whose last chunk this step runs, rank by rank
    has_prefill: bool  # any rank has chunks (set by the scheduler: no scan of the ranks per read)


@dataclass(slots=True)
class Done:
    """What a step finished: prompts whose last chunk ran, their first tokens, whole requests."""

    prefilled: list[tuple[int, int]] = field(default_factory=list)  # (rank, rid): prefill instance's hand-offs
    first: list[int] = field(default_factory=list)  # aggregated: rids whose first token this step emitted
    finished: list[int] = field(default_factory=list)  # rids whose last token this step emitted


@dataclass(slots=True)
class _Seq:
    """A decoding sequence: its context and tokens left `ctx0`, `left0` as of step `step0`."""

    rank: int
    ctx0: float
    left0: float
    step0: int
    end: int  # the step whose tokens are its last


class EngineCore:
    """The scheduler of one instance over `ranks` DP ranks (see the module docstring).

    `isl`, `osl`, `cached`: per rid its prompt tokens, output tokens and prefix-cached prompt
    tokens (tables the driver owns and may grow); `kv_blocks`: blocks per rank; `queries`: query
    tokens of a decode sequence per step (1 + draft tokens); `tokens_per_step`: tokens it emits;
    `window`: KV tokens every sequence holds beside its context (the sliding layers' blocks, kv.window_tokens).
    `on_start(rid) -> hit` runs when a prompt is first scheduled (a prefix cache decides its hit
    then and writes `cached[rid]`)."""

    def __init__(self, role: Role, ranks: int, budget: int, max_seqs: int, kv_blocks: int, block: int,
                 isl: Sequence[int], osl: Sequence[int], cached: Sequence[int], queries: int = 1,
                 tokens_per_step: float = 1.0, on_start: Callable[[int], int] | None = None,
                 priority: Sequence[int] | None = None, window: int = 0, keep_preempted: bool = True):
        self.role, self.ranks, self.budget, self.max_seqs = role, ranks, budget, max_seqs
        self.keep_preempted = keep_preempted  # a preempted sequence's full blocks stay cached (`kept`); False: lost
        self.window = window  # KV tokens a sequence holds beside its context (0: none)
        # [rid] request class priority (rackplan/specs/slo.py; vLLM's priority policy: lower first, then
        # arrival); None: FIFO
        self.priority = priority
        self.kv_blocks, self.block, self.q, self.tps = kv_blocks, block, queries, tokens_per_step
        self.isl, self.osl, self.cached, self.on_start = isl, osl, cached, on_start
        self.batch = np.zeros(ranks)  # [R] decoding sequences
        self.ctx = np.zeros(ranks)  # [R] sum of their contexts
        self._batch, self._ctx = memoryview(self.batch), memoryview(self.ctx)  # per-element writes, no numpy scalar
        self.waiting: list[deque[int]] = [deque() for _ in range(ranks)]
        self.running: list[dict[int, None]] = [{} for _ in range(ranks)]  # admission order (prefilling + decoding)
        self.prefilling: list[list[int]] = [[] for _ in range(ranks)]  # part-way prompts, in order
        self.progress: dict[int, int] = {}  # rid -> tokens computed (prefill, recompute)
        self.target: dict[int, int] = {}  # rid -> tokens its prefill must reach
        self.pblocks = [0] * ranks  # blocks held by prefilling sequences
        self.held: dict[int, int] = {}  # rid -> blocks of a prefilling sequence
        self.resume: dict[int, tuple[float, float]] = {}  # preempted decode: rid -> (context, tokens left)
        # preempted sequence: rid -> context tokens in its full blocks, which stay in the prefix cache when freed
        # (vLLM V1, prefix caching on by default: KVCacheManager.free returns a request's blocks to the free queue
        # with their hashes, tail blocks first to be evicted; on readmission get_computed_blocks finds them)
        self.kept: dict[int, int] = {}
        self.rank_of: dict[int, int] = {}
        self.incoming = [0] * ranks  # bound requests not yet added (their KV on its way)
        self._arrived: list[int] = []  # added since the last step, not bound yet
        # per rank route.bind_rank's score, WAITING_WEIGHT x (waiting + incoming) + running, kept current
        self._score = [0] * ranks
        self._most_blocks = 0  # max_seqs x the blocks of the longest decode sequence yet, at its end
        self._no_chunks: list[list[Chunk]] = [[] for _ in range(ranks)]  # a step without prefill (never written)
        self.seqs: dict[int, _Seq] = {}  # decoding sequences
        self._ending: dict[int, list[int]] = {}  # step -> rids whose last token it emits
        self.step = 0  # steps finished
        # called when the router's measures (`load`, `queued_tokens`) may have moved: a pool's LoadIndex.touch
        self.on_load: Callable[[], None] = _nothing
        self._queued = 0  # prompt tokens not yet prefilled (queued_tokens)
        self.num_waiting = 0
        self._active: set[int] = set()  # ranks with waiting or part-way prompts
        self._started: set[int] = set()  # [prefix cache] prompts whose hit `on_start` decided

    @classmethod
    def for_layout(cls, lay, kv_tokens: float, attention_kind: str, isl: Sequence[int], osl: Sequence[int],
                   cached: Sequence[int], on_start: Callable[[int], int] | None = None,
                   priority: Sequence[int] | None = None, window: int = 0) -> "EngineCore":
        """One instance of Layout `lay` (rackplan.specs) with `kv_tokens` KV tokens per rank (the
        memory model's capacity, sim/cost/memory.py) in the model's block size; `window`: kv.window_tokens."""
        block = block_tokens(attention_kind)
        return cls(lay.role, lay.dp, lay.max_tokens_per_step, lay.max_batch_per_rank, capacity_blocks(kv_tokens, block),
                   block, isl, osl, cached, lay.queries_per_step, lay.tokens_per_step, on_start, priority, window)

    # -- arrivals ---------------------------------------------------------------------------------
    @property
    def load(self) -> int:
        """Requests on the instance (bound, waiting or running): a decode pool's least-loaded measure.
        O(1): every bound request (incoming, waiting, running) is in `rank_of` until it leaves."""
        return len(self.rank_of) + len(self._arrived)

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens queued, not yet prefilled: a prefill pool's least-loaded measure."""
        return self._queued

    @queued_tokens.setter
    def queued_tokens(self, value: int) -> None:
        self._queued = value
        self.on_load()

    @property
    def busy(self) -> bool:
        return bool(self.seqs) or bool(self._active) or bool(self._arrived)

    def bind(self, rid: int, rank: int | None = None) -> int:
        """Bind a request to a DP rank before it can run (a decode instance: at hand-off, while its KV
        is on its way; vLLM's decode server has it then); `rank`: the binding another process made
        from this instance's counts (executor/control.py). It counts as waiting there."""
        if rank is None:
            score = self._score  # bind_rank's score, kept as requests come and go
            rank = score.index(min(score))
        self.rank_of[rid] = rank
        self.incoming[rank] += 1
        self._score[rank] += WAITING_WEIGHT
        self.on_load()
        return rank

    def add(self, rid: int) -> None:
        """A request reaches the instance (a decode instance: its KV arrived). One bound already
        (`bind`) joins its rank's queue; the others bind at the next `schedule`, in arrival order, on
        the counts as of the last step (vLLM's balancer reads the engines' per-step stats)."""
        if self.role != "decode":
            self.queued_tokens += self.isl[rid] - self.cached[rid]
        r = self.rank_of.get(rid)
        if r is None:
            self._arrived.append(rid)
            self.on_load()
            return
        self.incoming[r] -= 1
        self._score[r] -= WAITING_WEIGHT
        self._queue(r, rid)

    def _queue(self, r: int, rid: int) -> None:
        self._score[r] += WAITING_WEIGHT
        queue, prio = self.waiting[r], self.priority
        if prio is None or not queue or prio[queue[-1]] <= prio[rid]:
            queue.append(rid)
        else:  # behind every waiting request of its priority or a lower value, ahead of the rest
            i = len(queue)
            while i > 0 and prio[queue[i - 1]] > prio[rid]:
                i -= 1
            queue.insert(i, rid)
        self.num_waiting += 1
        self._active.add(r)

    # -- scheduling -------------------------------------------------------------------------------
    def schedule(self) -> Batch:
        """This step's batch: decode sequences (after any preemption), then chunks per rank."""
        if self._arrived:
            for rid in self._arrived:
                r = self.bind(rid)
                self.incoming[r] -= 1
                self._score[r] -= WAITING_WEIGHT
                self._queue(r, rid)
            self._arrived.clear()
        preempted: list[int] = []
        active = self._active
        # (pblocks are sums of `held`'s block counts: all 0 while no prefilling sequence holds any)
        if self.seqs and self._most_blocks > self.kv_blocks - (max(self.pblocks) if active and self.held else 0):
            self._fit_decodes(preempted)  # (its O(1) test inlined: no rank can be short in the common case)
        admitted: list[int] = []
        chunks, completing = self._no_chunks, []
        if active:
            full, running, prefilling = self.max_seqs, self.running, self.prefilling
            for r in sorted(active) if len(active) > 1 else tuple(active):
                if len(running[r]) >= full and not prefilling[r]:
                    continue  # no seat: its queue waits (the common case of a full decode rank)
                mine: list[Chunk] = []
                left = self.budget - int(self._batch[r]) * self.q
                before = len(preempted)
                if prefilling[r]:
                    left = self._continue(r, left, mine, preempted)
                if len(preempted) == before and not (before and r in {self.rank_of[p] for p in preempted}):
                    self._admit(r, left, mine, admitted)  # (vLLM: a step that preempted admits no one)
                if mine:
                    if chunks is self._no_chunks:
                        chunks = [[] for _ in range(self.ranks)]
                    chunks[r] = mine
                    target = self.target
                    completing += [rid for rid, take, start in mine if start + take >= target[rid]]
        ending = self._ending.get(self.step + 1)
        return Batch(chunks, len(self.seqs), admitted, preempted, len(ending) if ending else 0, completing,
                     chunks is not self._no_chunks)

    def _fit_decodes(self, preempted: list[int]) -> None:
        """Preempt on every rank whose decode sequences' blocks for this step would not fit."""
        if not self.seqs:
            return
        held = max(self.pblocks) if self._active else 0
        if self._most_blocks <= self.kv_blocks - held:
            return  # no rank can be short: max_seqs of the longest sequence yet fit (the common case, O(1))
        bound = (self.ctx + self.batch * (self.q + self.window)) / self.block + self.batch  # [R] blocks at most
        room = np.subtract(self.kv_blocks, self.pblocks) if self._active else self.kv_blocks
        for r in np.flatnonzero(bound > room).tolist():
            while self.running[r] and self._decode_blocks(r) + self.pblocks[r] > self.kv_blocks:
                preempted.append(self._preempt(r))

    def _decode_blocks(self, r: int, extra: int = 0) -> int:
        """Blocks rank r's decode sequences hold this step (with `extra` more queries each)."""
        step, tps, q, b = self.step, self.tps, self.q + extra + self.window, self.block
        return sum(blocks(s.ctx0 + (step - s.step0) * tps + q, b)
                   for s in (self.seqs.get(rid) for rid in self.running[r]) if s is not None)

    def _free_blocks(self, r: int) -> int:
        """Blocks free on rank r this step (decode sequences' counted exactly only when tight)."""
        free = self.kv_blocks - self.pblocks[r]
        b, c = self._batch[r], self._ctx[r]
        if not b and not c:  # (no decode sequence: a prefill rank's case; the bound is 0.0)
            return free
        bound = (c + b * (self.q + self.window)) / self.block + b
        return free - (int(bound) if bound <= free else self._decode_blocks(r))

    def _continue(self, r: int, left: int, out: list[Chunk], preempted: list[int]) -> int:
        """Chunks of rank r's part-way prompts, in order; returns the budget left."""
        for rid in list(self.prefilling[r]):
            if left <= 0:
                break
            if rid not in self.held:  # preempted by an earlier chunk's allocation
                continue
            start = self.progress[rid]
            take = min(self.target[rid] - start, left)
            while self._free_blocks(r) < blocks(start + take + self.window, self.block) - self.held[rid]:
                victim = self._preempt(r)
                preempted.append(victim)
                if victim == rid:
                    break
            if rid not in self.held:
                continue
            self._hold(r, rid, blocks(start + take + self.window, self.block))
            out.append((rid, take, start))
            left -= take
        return left

    def _admit(self, r: int, left: int, out: list[Chunk], admitted: list[int]) -> None:
        """Rank r's waiting requests, FIFO, while a seat, budget and blocks are free."""
        queue, running = self.waiting[r], self.running[r]
        full, resume, block, window = self.max_seqs, self.resume, self.block, self.window
        decode = self.role == "decode"
        while queue and len(running) < full:
            rid = queue[0]
            if decode and rid not in resume:  # its KV arrived: decode from this step
                ctx = float(self.isl[rid])
                if self._free_blocks(r) < blocks(ctx + self.q + window, block):
                    break
                self._pop(r)
                self._decode(r, rid, ctx, float(self.osl[rid]))
                admitted.append(rid)
                continue
            if left <= 0:
                break
            first, target = self._prompt(rid)
            start, kept = first, self.kept.get(rid, 0)
            if kept > start:  # its freed blocks not yet evicted: the free queue hands out the older free blocks first;
                # a whole-context hit still computes its last token (vLLM: num_computed_tokens <= num_tokens - 1)
                start = max(start, min(kept, self._free_blocks(r) * block, target - 1))
            take = min(target - start, left)
            if self._free_blocks(r) < blocks(start + take + window, block):
                break
            self._pop(r)
            if kept:
                del self.kept[rid]
                if rid not in resume:  # (a recompute's tokens never counted as queued)
                    self.queued_tokens -= start - first
            if self.on_start is not None and rid not in resume and rid not in self._started:
                self._started.add(rid)
                self.queued_tokens -= self.on_start(rid)  # [prefix cache] the hit is known once scheduled
                start = self.cached[rid]
                take = min(target - start, left)
            running[rid] = None
            self._score[r] += 1
            self.prefilling[r].append(rid)
            n = blocks(start + take + window, block)  # (its blocks: _hold from none)
            self.progress[rid], self.target[rid], self.held[rid] = start, target, n
            self.pblocks[r] += n
            out.append((rid, take, start))
            left -= take
        if not queue and not self.prefilling[r]:
            self._active.discard(r)

    def _prompt(self, rid: int) -> tuple[int, int]:
        """(tokens already computed, tokens to reach) of a request about to start its prefill."""
        if rid in self.resume:  # recompute its whole context (prompt + tokens emitted so far)
            return 0, math.ceil(self.resume[rid][0])
        return self.cached[rid], self.isl[rid]

    def _pop(self, r: int) -> None:
        self.waiting[r].popleft()
        self.num_waiting -= 1
        self._score[r] -= WAITING_WEIGHT

    def _hold(self, r: int, rid: int, n: int) -> None:
        """A prefilling sequence's blocks grow to `n`."""
        self.pblocks[r] += n - self.held[rid]
        self.held[rid] = n

    def _decode(self, r: int, rid: int, ctx: float, left: float) -> None:
        """Start decoding `left` tokens from context `ctx` on rank r at the current step."""
        step, tps = self.step, self.tps
        steps = max(1, math.ceil(left / tps))
        end = step + steps
        most = self.max_seqs * blocks(ctx + steps * tps + self.q + self.window, self.block)
        if most > self._most_blocks:  # a rank's blocks at most: max_seqs sequences as long as this one at its end
            self._most_blocks = most
        self.seqs[rid] = _Seq(r, ctx, left, step, end)
        self.running[r][rid] = None
        self._score[r] += 1
        self._batch[r] += 1
        self._ctx[r] += ctx
        ending = self._ending.get(end)
        if ending is None:
            self._ending[end] = [rid]
        else:
            ending.append(rid)

    def _preempt(self, r: int) -> int:
        """Recompute preemption of rank r's newest running sequence; returns its rid."""
        rid = next(reversed(self.running[r]))
        del self.running[r][rid]
        self._score[r] += WAITING_WEIGHT - 1
        s = self.seqs.pop(rid, None)
        if s is not None:  # decoding: keep its context and tokens left for the recompute
            ctx = s.ctx0 + (self.step - s.step0) * self.tps
            self._batch[r] -= 1
            self._ctx[r] = max(self._ctx[r] - ctx, 0.0)
            self._ending[s.end].remove(rid)
            self.resume[rid] = (ctx, s.left0 - (self.step - s.step0) * self.tps)
            if self.keep_preempted:
                self.kept[rid] = int(ctx) // self.block * self.block
        else:  # prefilling: its blocks are freed, its full blocks' tokens stay cached until evicted (kept)
            self.prefilling[r].remove(rid)
            self.pblocks[r] -= self.held.pop(rid)
            if rid not in self.resume:
                self.queued_tokens += self.progress[rid] - self.cached[rid]
            if self.keep_preempted:  # (a recompute preempted again keeps what it recomputed too)
                self.kept[rid] = self.progress[rid] // self.block * self.block
            del self.progress[rid], self.target[rid]
        self.waiting[r].appendleft(rid)
        self.num_waiting += 1
        self._active.add(r)
        return rid

    # -- after the step ---------------------------------------------------------------------------
    def finish(self, batch: Batch, emitted: dict[int, int] | None = None) -> Done:
        """The step ran: contexts grow, chunks count, and what finished leaves. `emitted`: tokens
        each decoding sequence emitted when it differs from `tokens_per_step` (drawn acceptance)."""
        done = Done()
        if self.seqs:
            self.ctx += self.batch if self.tps == 1.0 else self.batch * self.tps  # (x 1.0 is exact)
            if emitted:
                self._reanchor(emitted)
        self.step += 1
        ending = self._ending.pop(self.step, None)
        if ending:
            if len(ending) > 1:
                ending.sort()  # in rid order
            for rid in ending:
                self._end_decode(rid)
            done.finished.extend(ending)
        if batch.has_prefill:
            progress, resume, target = self.progress, self.resume, self.target
            for r, per in enumerate(batch.chunks):
                for rid, take, start in per:
                    progress[rid] = start + take
                    if rid not in resume:
                        self.queued_tokens -= take
                    if start + take >= target[rid]:
                        self._end_prefill(r, rid, done)
        return done

    def _reanchor(self, emitted: dict[int, int]) -> None:
        """Sequences that emitted other than `tokens_per_step` this step: restated from the next step
        (before the step counter moves; the context sums already grew by `tokens_per_step`)."""
        k, tps = self.step, self.tps
        for rid, n in emitted.items():
            s = self.seqs.get(rid)
            if s is None or n == tps:
                continue
            left = s.left0 - (k - s.step0) * tps - n
            if s.end == k + 1 and left <= 1e-9:
                continue  # it emitted its last token this step, as scheduled
            # (a sequence scheduled to end now that emitted fewer than it had left goes on: ending it
            # on the expected rate lost its last tokens)
            ctx = s.ctx0 + (k - s.step0) * tps + n
            self._ctx[s.rank] += n - tps
            self._ending[s.end].remove(rid)
            s.ctx0, s.left0, s.step0 = ctx, left, k + 1
            s.end = k + 1 + (math.ceil(left / tps) if left > 0 else 0)
            self._ending.setdefault(s.end, []).append(rid)

    def _end_decode(self, rid: int) -> None:
        s = self.seqs.pop(rid)
        r = s.rank
        del self.running[r][rid]
        self._score[r] -= 1
        self._batch[r] -= 1
        ctx = self._ctx
        ctx[r] = max(ctx[r] - (s.ctx0 + (s.end - s.step0) * self.tps), 0.0)
        self.rank_of.pop(rid, None)
        self.on_load()

    def _end_prefill(self, r: int, rid: int, done: Done) -> None:
        """Rank r's prompt `rid` is prefilled: a prefill instance hands it off, the others decode it."""
        prefilling = self.prefilling[r]
        prefilling.remove(rid)
        if self._started:
            self._started.discard(rid)
        del self.progress[rid], self.target[rid], self.running[r][rid]
        self._score[r] -= 1
        self.pblocks[r] -= self.held.pop(rid)
        resumed = self.resume.pop(rid, None)
        if resumed is not None:  # a recomputed sequence goes on decoding (its blocks now the decode's)
            self._decode(r, rid, *resumed)
        elif self.role == "prefill":
            self.rank_of.pop(rid, None)
            done.prefilled.append((r, rid))
        else:  # aggregated: the last chunk emitted the first token
            done.first.append(rid)
            if self.osl[rid] > 1:
                self._decode(r, rid, float(self.isl[rid]), float(self.osl[rid] - 1))
            else:
                self.rank_of.pop(rid, None)
                done.finished.append(rid)
        if not prefilling and not self.waiting[r]:
            self._active.discard(r)
        self.on_load()

    # -- views for drivers ------------------------------------------------------------------------
    def decoding_on(self, r: int) -> list[int]:
        """Rank r's decoding sequences this step, in admission order."""
        return [rid for rid in self.running[r] if rid in self.seqs]

    def context(self, rid: int) -> tuple[float, float]:
        """(context, tokens left) of a decoding sequence at the current step."""
        s = self.seqs[rid]
        k = self.step - s.step0
        return s.ctx0 + k * self.tps, s.left0 - k * self.tps

    def steps_left(self) -> dict[int, int]:
        """Steps each decoding sequence still has to go (rid -> steps; a snapshot)."""
        return {rid: s.end - self.step for rid, s in self.seqs.items()}

    def seat(self, rid: int, ctx: float, left: float) -> bool:
        """Seat a decoding sequence directly (a warm start's running sequences) on the rank a new
        request would bind to; False when that rank has no seat or blocks for it."""
        r = self._score.index(min(self._score))
        if len(self.running[r]) >= self.max_seqs or (
                self._free_blocks(r) < blocks(ctx + self.q + self.window, self.block)):
            return False
        self.rank_of[rid] = r
        self._decode(r, rid, ctx, left)
        self.on_load()
        return True

    def seat_many(self, rids: Sequence[int], ctxs: Sequence[float], lefts: Sequence[float]) -> list[int]:
        """`seat` of each (rid, context, tokens left) in turn, the rank a new request would bind to found
        in O(log ranks) (a heap of (score, rank): the lowest score, the first rank on ties, as `seat`'s
        scan); returns the rids that found no seat or blocks (nothing of theirs is kept)."""
        heap = [(score, r) for r, score in enumerate(self._score)]  # (seating only raises a seated rank's score)
        heapq.heapify(heap)
        refused, running, full, need = [], self.running, self.max_seqs, self.q + self.window
        for rid, ctx, left in zip(rids, ctxs, lefts):
            score, r = heap[0]
            if len(running[r]) >= full or self._free_blocks(r) < blocks(ctx + need, self.block):
                refused.append(rid)
                continue
            self.rank_of[rid] = r
            self._decode(r, rid, ctx, left)
            heapq.heapreplace(heap, (score + 1, r))
        self.on_load()
        return refused


def _nothing() -> None:
    """EngineCore.on_load where no index listens (the executor's engines)."""
