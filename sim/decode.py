"""Decode instance: continuous batching over DP ranks, one SimPy event per step.

Per-rank state: running sequences and context sums in numpy arrays (a step advances them all),
seats and reserved KV per rank in lists; running sequences sit in lists by the step they finish
at, free seats in a heap, so a step costs O(ranks) vector work + O(1) per sequence that starts or
finishes (+ O(log) per seat change).
Every running sequence emits `tokens_per_step` tokens a step (the speculation acceptance length).
"""
from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np
import simpy

from .instance import Instance
from .metrics import RequestLog
from .pricer import StepPricer

RANK_BITS = 20  # a free-seat heap key: seats << RANK_BITS | rank (an int compares faster than a tuple)
RANK_MASK = (1 << RANK_BITS) - 1


class DecodeRanks:
    """Running sequences of one instance per DP rank, and the seats and KV room they hold.

    batch, ctx: [R] running sequences and the sum of their contexts (numpy: every step advances
    all ranks at once). A seat is held by a running sequence or by one still in prefill on this
    rank (aggregated serving); free seats are found through a heap of (seats, rank) entries, stale
    ones skipped, so an admission does not scan the ranks."""

    def __init__(self, ranks: int, max_batch: int, kv_capacity: float, tokens_per_step: float):
        self.batch = np.zeros(ranks)  # [R] running sequences
        self.ctx = np.zeros(ranks)  # [R] sum of their contexts
        # the same two arrays element by element (a memoryview reads and writes a rank's float in place
        # without a numpy scalar: per sequence that starts or finishes)
        self._batch, self._ctx = memoryview(self.batch), memoryview(self.ctx)
        self.kv_used = [0.0] * ranks  # reserved KV tokens per rank
        self.seats = [0] * ranks  # running + reserved sequences per rank
        self.max_batch = max_batch
        self.kv_capacity = kv_capacity
        self.tps = tokens_per_step
        self.step = 0
        # running sequences: the rids that finish at each step (a step's last token), and per rid its
        # (rank, context at the end, KV tokens)
        self._ending: dict[int, list[int]] = {}
        self._seqs: dict[int, tuple[int, float, float]] = {}
        # ranks by (seats, rank), least loaded first, as one int each: seats << RANK_BITS | rank
        assert ranks <= RANK_MASK, "DP ranks beyond a free-seat key's rank bits"
        self._free = list(range(ranks))

    @property
    def running(self) -> int:
        return len(self._seqs)

    @property
    def finishing(self) -> int:
        """Sequences whose last token the next step emits."""
        return len(self._ending.get(self.step + 1, ()))

    def pick_rank(self, kv_need: float) -> int | None:
        """Least-loaded rank (fewest seats, then lowest index) with a free seat and room for
        `kv_need` tokens, or None."""
        free, seats, skipped, found = self._free, self.seats, [], None
        while free:
            s, r = free[0] >> RANK_BITS, free[0] & RANK_MASK
            if s != seats[r]:
                heapq.heappop(free)  # stale entry
                continue
            if s >= self.max_batch:
                break
            if self.kv_used[r] + kv_need <= self.kv_capacity:
                found = r
                break
            skipped.append(heapq.heappop(free))
        for e in skipped:
            heapq.heappush(free, e)
        return found

    def _seat(self, rank: int, seats: int, kv: float) -> None:
        """Take (seats=1, kv > 0) or give back (seats=-1, kv < 0) a seat and its KV room on a rank."""
        self.seats[rank] += seats
        self.kv_used[rank] += kv
        heapq.heappush(self._free, self.seats[rank] << RANK_BITS | rank)
        if len(self._free) > 4 * len(self.seats) + 64:  # drop stale entries now and then
            self._free = sorted({s << RANK_BITS | r for r, s in enumerate(self.seats)})

    def reserve(self, rank: int, kv_need: float) -> None:
        """Hold a seat and KV room on a rank for a sequence still in prefill (aggregated serving)."""
        self._seat(rank, 1, kv_need)

    def release(self, rank: int, kv_need: float) -> None:
        """Give back a reservation whose sequence needs no decode step."""
        self._seat(rank, -1, -kv_need)

    def admit(self, rid: int, rank: int, ctx: float, new_tokens: int, kv_need: float,
              reserved: bool = False) -> None:
        """Start decoding `new_tokens` tokens for a sequence with `ctx` tokens of context (on a seat
        and KV room it reserved, or taking them now)."""
        steps = max(1, math.ceil(new_tokens / self.tps))
        self._batch[rank] += 1
        self._ctx[rank] += ctx
        if not reserved:
            self._seat(rank, 1, kv_need)
        ending = self._ending.get(self.step + steps)
        if ending is None:
            self._ending[self.step + steps] = [rid]
        else:
            ending.append(rid)
        self._seqs[rid] = (rank, ctx + steps * self.tps, kv_need)

    def steps_left(self) -> dict[int, int]:
        """Steps each running sequence still has to go (rid -> steps; a snapshot)."""
        step = self.step
        return {rid: end - step for end, rids in self._ending.items() for rid in rids}

    def advance(self) -> list[int]:
        """One step done: contexts grow; returns the ids of sequences that finished."""
        ctx = self.ctx
        ctx += self.batch if self.tps == 1.0 else self.batch * self.tps  # (x 1.0 is exact: no temporary array)
        batch, ctx = self._batch, self._ctx
        self.step += 1
        done = self._ending.pop(self.step, [])
        if len(done) > 1:
            done.sort()  # in rid order
        for rid in done:
            rank, end_ctx, kv = self._seqs.pop(rid)
            batch[rank] -= 1
            ctx[rank] = max(ctx[rank] - end_ctx, 0.0)
            self._seat(rank, -1, -kv)
        return done


class DecodeInstance(Instance):
    """A decode instance: admits requests whose KV has arrived, steps until they finish."""

    def __init__(self, env: simpy.Environment, name: str, pricer: StepPricer, ranks: DecodeRanks,
                 log: RequestLog, ctx_of, osl_of, on_done, shared=None):
        self.ranks, self.log = ranks, log
        self.ctx_of, self.osl_of, self.on_done = ctx_of, osl_of, on_done
        self.waiting: deque[int] = deque()
        self._last_end = 0.0  # end of the previous decode step: continuing sequences' last token
        super().__init__(env, name, pricer, shared)

    @property
    def load(self) -> int:
        return self.ranks.running + len(self.waiting)

    def deliver(self, rid: int) -> None:
        """KV of `rid` has arrived."""
        self.waiting.append(rid)
        self.notify()

    def _admit(self) -> list[int]:
        new = []
        while self.waiting:
            rid = self.waiting[0]
            ctx, osl = self.ctx_of(rid), self.osl_of(rid)
            rank = self.ranks.pick_rank(ctx + osl)
            if rank is None:
                break  # head of line waits for KV room or a slot
            self.waiting.popleft()
            self.ranks.admit(rid, rank, ctx, osl, ctx + osl)
            new.append(rid)
        return new

    def run(self):
        ranks, log = self.ranks, self.log
        while True:
            if ranks.running == 0 and not self.waiting:
                yield self.idle()
                continue
            if self.shared is not None:  # colocated: wait for the turn on the shared GPUs
                yield self.take_turn()
            new = self._admit()
            running = ranks.running  # sequences of this step (only this loop admits and finishes them)
            if running == 0:  # head of line waits for KV room
                self.end_turn()
                yield self.idle()
                continue
            turnover = (len(new), ranks.finishing) if self.pricer.turnover else (0, 0)
            dt = self.pricer.decode(ranks.batch, ranks.ctx, running, *turnover)
            yield self.busy(dt)
            self.end_turn()
            now = self.env.now
            # ITL: continuing sequences got their previous token at the previous step's end (colocated
            # pools: a prefill turn may sit in between); new sequences got their first token (TTFT)
            log.step_durations.append(now - self._last_end)
            log.step_seqs.append(running - len(new))
            self._last_end = now
            log.step_end.append(now)
            log.step_tokens.append(running * ranks.tps)
            log.first_tokens(new, now)
            for rid in ranks.advance():
                self.on_done(rid)
