"""Decode instance: continuous batching over DP ranks, one SimPy event per step.

Per-rank state lives in numpy arrays (running sequences, context sums, reserved KV tokens);
finishing steps sit in a heap, so a step costs O(ranks) + O(sequences that start or finish).
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


class DecodeRanks:
    """Running sequences of one instance, vectorised per DP rank."""

    def __init__(self, ranks: int, max_batch: int, kv_capacity: float, tokens_per_step: float):
        self.batch = np.zeros(ranks)  # [R] running sequences
        self.ctx = np.zeros(ranks)  # [R] sum of their contexts
        self.kv_used = np.zeros(ranks)  # [R] reserved KV tokens
        self.max_batch = max_batch
        self.kv_capacity = kv_capacity
        self.tps = tokens_per_step
        self.step = 0
        self._heap: list[tuple[int, int, int, float, float]] = []  # (finish step, rid, rank, ctx, kv)

    @property
    def running(self) -> int:
        return len(self._heap)

    def pick_rank(self, kv_need: float) -> int | None:
        """Least-loaded rank with a free slot and room for `kv_need` tokens, or None."""
        ok = (self.batch < self.max_batch) & (self.kv_used + kv_need <= self.kv_capacity)
        if not ok.any():
            return None
        return int(np.argmin(np.where(ok, self.batch, np.inf)))

    def admit(self, rid: int, rank: int, ctx: float, new_tokens: int, kv_need: float) -> None:
        """Start decoding `new_tokens` tokens for a sequence with `ctx` tokens of context."""
        steps = max(1, math.ceil(new_tokens / self.tps))
        self.batch[rank] += 1
        self.ctx[rank] += ctx
        self.kv_used[rank] += kv_need
        heapq.heappush(self._heap, (self.step + steps, rid, rank, ctx + steps * self.tps, kv_need))

    def reserve(self, rank: int, kv_need: float) -> None:
        """Hold KV room on a rank for a sequence still in prefill (aggregated serving)."""
        self.kv_used[rank] += kv_need

    def advance(self) -> list[int]:
        """One step done: contexts grow; returns the ids of sequences that finished."""
        self.ctx += self.batch * self.tps
        self.step += 1
        done = []
        while self._heap and self._heap[0][0] <= self.step:
            _, rid, rank, end_ctx, kv = heapq.heappop(self._heap)
            self.batch[rank] -= 1
            self.ctx[rank] = max(self.ctx[rank] - end_ctx, 0.0)
            self.kv_used[rank] -= kv
            done.append(rid)
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
        while True:
            if self.ranks.running == 0 and not self.waiting:
                yield self.idle()
                continue
            yield from self.take_turn()
            new = self._admit()
            if self.ranks.running == 0:  # head of line waits for KV room
                self.end_turn()
                yield self.idle()
                continue
            dt = self.pricer.decode(self.ranks.batch, self.ranks.ctx)
            yield self.busy(dt)
            self.end_turn()
            now = self.env.now
            # ITL: continuing sequences got their previous token at the previous step's end (colocated
            # pools: a prefill turn may sit in between); new sequences got their first token (TTFT)
            self.log.step_durations.append(now - self._last_end)
            self.log.step_seqs.append(self.ranks.running - len(new))
            self._last_end = now
            self.log.step_end.append(now)
            self.log.step_tokens.append(self.ranks.running * self.ranks.tps)
            for rid in new:
                self.log.first_token[rid] = now
            for rid in self.ranks.advance():
                self.on_done(rid)
