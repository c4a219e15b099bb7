"""Prefill instance: FIFO queue, chunked batches up to a token budget per DP rank, one event a step.

Each step fills the DP ranks greedily (a request goes to the rank with the most budget left; a
prompt longer than what is left is chunked and continues next step). A step takes requests from
the head of the queue, so those whose last chunk ran leave it from the front (the chunked ones,
at most one per rank, stay at the head in their order) and go to KV transfer.
"""
from __future__ import annotations

from array import array
from collections import deque

import simpy

from .instance import Instance
from .pricer import StepPricer


def form_batch(queue: deque, done_tokens: dict, cached, isl, ranks: int, budget: int, max_seqs: int,
               on_first=None):
    """Chunks for one step: per rank a list of (rid, new tokens, prefix tokens already computed),
    and the rids whose last chunk this is (rank by rank, in chunk order). They are the first
    requests of the queue, in order. `cached`, `isl`: per rid its prefix-cache hit and prompt
    tokens. `on_first(rid)` runs when a request is first scheduled (the prefix cache decides its
    hit then)."""
    left = [budget] * ranks
    seqs = [0] * ranks
    chunks: list[list[tuple[int, int, int]]] = [[] for _ in range(ranks)]
    last: list[list[int]] = [[] for _ in range(ranks)]
    for rid in queue:
        r, most = -1, 0
        for i in range(ranks):  # the open rank with the most budget left (lowest index on ties)
            if left[i] > most and seqs[i] < max_seqs:
                r, most = i, left[i]
        if r < 0:
            break
        if on_first is not None and rid not in done_tokens:  # [prefix cache]
            on_first(rid)
        total = isl[rid]
        start = cached[rid] + done_tokens.get(rid, 0)
        take = min(total - start, most)
        chunks[r].append((rid, take, start))
        if start + take >= total:
            last[r].append(rid)
        left[r] -= take
        seqs[r] += 1
    return chunks, [rid for rids in last for rid in rids]


class PrefillInstance(Instance):
    """A prefill instance; `on_prefilled(rid)` hands finished prompts to KV transfer. With `prefix`
    (sim/prefix_cache.InstancePrefixes) a request's cached tokens come from this instance's cache.
    `cached`, `isl`: the deployment's per-request tables of prefix-cache hits (the caches write them)
    and prompt tokens."""

    def __init__(self, env: simpy.Environment, name: str, pricer: StepPricer, budget: int, max_seqs: int,
                 cached, isl, on_prefilled, shared=None, handoff_s=None, prefix=None):
        self.budget, self.max_seqs, self.on_prefilled = budget, max_seqs, on_prefilled
        self.cached, self.isl = cached, isl
        self.prefix = prefix
        self.queue: deque[int] = deque()
        self.done_tokens: dict[int, int] = {}
        self.load = 0  # prompt tokens queued, not yet prefilled: the router's least-loaded measure
        self.handoff_s = handoff_s  # colocated: KV hand-off inside the turn, seconds for a list of rids
        self.prompts_done = array("q")  # prompts each step finished (service rate while busy, after the run)
        super().__init__(env, name, pricer, shared)

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens queued (the prefix-aware router's name for `load`)."""
        return self.load

    def submit(self, rid: int) -> None:
        self.queue.append(rid)
        self.load += self.isl[rid] - self.cached[rid]
        self.notify()

    def _first_scheduled(self, rid: int) -> None:  # [prefix cache] the hit is known once scheduled
        self.load -= self.prefix.schedule(rid)

    def run(self):
        ranks = self.pricer.ranks
        while True:
            if not self.queue:
                yield self.idle()
                continue
            if self.shared is not None:  # colocated: wait for the turn on the shared GPUs
                yield self.take_turn()
            chunks, finished = form_batch(self.queue, self.done_tokens, self.cached, self.isl, ranks, self.budget,
                                          self.max_seqs, self._first_scheduled if self.prefix is not None else None)
            dt = self.pricer.step(chunks)
            if self.handoff_s is not None and finished:
                dt += self.handoff_s(finished)
            self.prompts_done.append(len(finished))
            yield self.busy(dt)
            self.end_turn()
            self._leave(chunks, finished)

    def _leave(self, chunks, finished: list[int]) -> None:
        """Account the step's chunks; finished prompts leave the head of the queue for KV transfer."""
        for ch in chunks:
            for rid, take, _ in ch:
                self.load -= take
                self.done_tokens[rid] = self.done_tokens.get(rid, 0) + take
        done = set(finished)
        head = [self.queue.popleft() for _ in range(sum(len(ch) for ch in chunks))]
        self.queue.extendleft(reversed([rid for rid in head if rid not in done]))
        for rid in finished:
            if self.prefix is not None:  # [prefix cache]
                self.prefix.finish(rid)
            self.done_tokens.pop(rid, None)
            self.on_prefilled(rid)
