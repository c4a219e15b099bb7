"""Aggregated instance: each DP rank runs chunked prefill and decode in the same step.

Decode tokens go first; what is left of the rank's token budget takes prefill chunks of the
requests pinned to that rank. A request's first token comes at the end of its last prefill
chunk; it then decodes its remaining output tokens on the same rank.
"""
from __future__ import annotations

from collections import deque

import simpy

from .decode import DecodeRanks
from .instance import Instance
from .metrics import RequestLog
from .pricer import StepPricer


class AggregatedInstance(Instance):
    """With `prefix` (sim/prefix_cache.InstancePrefixes) a request's cached tokens come from this
    instance's cache, decided when the request is pinned to a rank."""

    def __init__(self, env: simpy.Environment, name: str, pricer: StepPricer, ranks: DecodeRanks,
                 budget: int, queries_per_seq: float, log: RequestLog, need_of, osl_of, on_done, prefix=None):
        self.ranks, self.log, self.prefix = ranks, log, prefix
        self.queued_tokens = 0  # prompt tokens still to prefill (queued or pinned)
        self.budget, self.q = budget, queries_per_seq
        self.need_of, self.osl_of, self.on_done = need_of, osl_of, on_done
        n = len(ranks.batch)
        self.queue: deque[int] = deque()
        self.pinned: list[deque] = [deque() for _ in range(n)]  # requests in prefill per rank, in order
        self.progress: dict[int, int] = {}
        self.prefilling = 0  # requests pinned to a rank, still in prefill
        super().__init__(env, name, pricer)

    @property
    def load(self) -> int:
        return self.ranks.running + self.prefilling + len(self.queue)

    def submit(self, rid: int) -> None:
        cached, total = self.need_of(rid)
        self.queued_tokens += total - cached
        self.queue.append(rid)
        self.notify()

    def _pin(self) -> None:
        """Move queued requests onto ranks with a free seat and KV room (the least-loaded one)."""
        while self.queue:
            rid = self.queue[0]
            cached, total = self.need_of(rid)
            kv = total + self.osl_of(rid)
            rank = self.ranks.pick_rank(kv)
            if rank is None:
                return
            self.queue.popleft()
            if self.prefix is not None:  # [prefix cache] the hit is known once pinned
                cached = self.prefix.schedule(rid)
                self.queued_tokens -= cached
            self.ranks.reserve(rank, kv)
            self.prefilling += 1
            self.pinned[rank].append(rid)
            self.progress[rid] = cached

    def _chunks(self) -> list[list[tuple[int, int, int]]]:
        out = []
        for rank, pins in enumerate(self.pinned):
            left = self.budget - self.ranks.batch[rank] * self.q
            ch = []
            for rid in pins:
                if left <= 0:
                    break
                start = self.progress[rid]
                take = int(min(self.need_of(rid)[1] - start, left))
                ch.append((rid, take, start))
                left -= take
            out.append(ch)
        return out

    def _finish_prefill(self, rank: int, rid: int, now: float) -> None:
        if self.prefix is not None:
            self.prefix.finish(rid)
        self.pinned[rank].remove(rid)  # finished prompts are the head of their rank's pins: O(1)
        self.prefilling -= 1
        del self.progress[rid]
        self.log.first_tokens((rid,), now)  # the prefill step emits the first token (counted from first_token)
        total, osl = self.need_of(rid)[1], self.osl_of(rid)
        if osl > 1:  # the reservation becomes the decode sequence's own
            self.ranks.admit(rid, rank, total, osl - 1, total + osl, reserved=True)
        else:
            self.ranks.release(rank, total + osl)
            self.on_done(rid)

    def run(self):
        while True:
            self._pin()
            if self.ranks.running == 0 and not self.prefilling:
                yield self.idle()
                continue
            chunks = self._chunks()
            decoding = self.ranks.running
            if any(chunks):
                dt = self.pricer.step(chunks, self.ranks.batch, self.ranks.ctx)
            else:
                dt = self.pricer.decode(self.ranks.batch, self.ranks.ctx, self.ranks.running)
            yield self.busy(dt)
            now = self.env.now
            if decoding:
                self.log.step_durations.append(dt)
                self.log.step_seqs.append(decoding)
                self.log.step_end.append(now)
                self.log.step_tokens.append(decoding * self.ranks.tps)
                for rid in self.ranks.advance():
                    self.on_done(rid)
            for rank, ch in enumerate(chunks):
                for rid, take, start in ch:
                    self.progress[rid] = start + take
                    self.queued_tokens -= take
                    if start + take >= self.need_of(rid)[1]:
                        self._finish_prefill(rank, rid, now)
