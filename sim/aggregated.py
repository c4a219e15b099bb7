"""Aggregated instance: the serving policy's aggregated engine (rackplan/policy): each DP rank runs
chunked prefill and decode in the same step.

Decode queries go first; what is left of the rank's token budget takes prefill chunks of the
requests bound to that rank. A request's first token comes at the end of its last prefill chunk;
it then decodes its remaining output tokens on the same rank, its KV blocks growing as it does.
"""
from __future__ import annotations

import simpy

from rackplan.policy import EngineCore

from .instance import Instance
from .metrics import RequestLog
from .pricer import StepPricer


class AggregatedInstance(Instance):
    """With `prefix` (sim/prefix_cache.InstancePrefixes) a request's cached tokens come from this
    instance's cache, decided when its prompt first runs (`core` calls its `schedule`)."""

    def __init__(self, env: simpy.Environment, name: str, pricer: StepPricer, core: EngineCore,
                 log: RequestLog, on_done, prefix=None):
        self.core, self.log, self.on_done, self.prefix = core, log, on_done, prefix
        super().__init__(env, name, pricer)

    @property
    def load(self) -> int:
        return self.core.load

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens still to prefill (queued or part-way)."""
        return self.core.queued_tokens

    def submit(self, rid: int) -> None:
        self.core.add(rid)
        self.notify()

    def run(self):
        core, log = self.core, self.log
        while True:
            if not core.busy:
                yield self.idle()
                continue
            batch = core.schedule()
            decoding = batch.decoding
            if not decoding and not batch.has_prefill:  # every head waits for KV room
                yield self.idle()
                continue
            if batch.has_prefill:
                dt = self.pricer.step(batch.chunks, core.batch, core.ctx)
            else:
                dt = self.pricer.decode(core.batch, core.ctx, decoding)
            yield self.busy(dt)
            now = self.env.now
            if decoding:
                log.step_durations.append(dt)
                log.step_seqs.append(decoding)
                log.step_end.append(now)
                log.step_tokens.append(decoding * core.tps)
            done = core.finish(batch)
            if done.first:
                log.first_tokens(done.first, now)  # the prefill step emits the first token
                if self.prefix is not None:
                    for rid in done.first:
                        self.prefix.finish(rid)
            for rid in done.finished:
                self.on_done(rid)
