"""Decode instance: the serving policy's decode engine (rackplan/policy), one SimPy event a step.

A prompt's KV binds to a DP rank at hand-off; the rank admits it when a seat and its KV blocks are
free. Every running sequence emits `tokens_per_step` tokens a step (the speculation's acceptance
length); a rank short of blocks preempts its newest sequence, which recomputes its context as a
prefill chunk when readmitted (a mixed step, priced as one).

KV transfers that land while the instance runs a step are not SimPy events: each is kept as (time,
place in SimPy's event order, rid) and added when the step ends, those an event would have delivered
before it in that order; the rest wait for the next step's end, or become the events they stand for
when the instance goes idle. Nothing else reads what a delivery changes (a bound request moves from
incoming to waiting on its rank: the router's load and the rank scores stay as they were), so the
instance schedules exactly what the events would have made it schedule, with one event fewer a request.
"""
from __future__ import annotations

from heapq import heappop, heappush

import simpy

from rackplan.policy import EngineCore

from .instance import Instance
from .metrics import RequestLog
from .pricer import StepPricer


class DecodeInstance(Instance):
    """A decode instance: admits requests whose KV has arrived, steps until they finish."""

    def __init__(self, env: simpy.Environment, name: str, pricer: StepPricer, core: EngineCore,
                 log: RequestLog, on_done, shared=None):
        self.core, self.log, self.on_done = core, log, on_done
        self._last_end = 0.0  # end of the previous decode step: continuing sequences' last token
        self._kv: list[tuple[float, int, int]] = []  # heap of KV transfers on their way: (time, stamp, rid)
        self._due: tuple[float, int] | None = None  # (end, stamp) of the step running (None: not in a step)
        super().__init__(env, name, pricer, shared)

    @property
    def load(self) -> int:
        return self.core.load

    def deliver(self, rid: int) -> None:
        """KV of `rid` has arrived."""
        self.core.add(rid)
        self.notify()

    def receive(self, rid: int, seconds: float) -> None:
        """KV of `rid` arrives in `seconds`: kept while a step runs (module docstring), else a timeout."""
        env = self.env
        if self._due is not None:
            heappush(self._kv, (env.now + seconds, self.stamp(), rid))
        else:
            env.timeout(seconds).callbacks.append(lambda _ev: self.deliver(rid))

    def _landed(self, due: tuple[float, int]) -> None:
        """The step that ends now (`due`: its end and stamp) took the transfers ordered before it."""
        kv, add = self._kv, self.core.add
        while kv and kv[0] < due:
            add(heappop(kv)[2])

    def idle(self) -> simpy.Event:
        """Sleep until `notify`; transfers still on their way become their events first."""
        while self._kv:
            when, stamp, rid = heappop(self._kv)
            self.at(when, stamp, lambda _ev, rid=rid: self.deliver(rid))
        return super().idle()

    def run(self):
        """The instance's main loop (a SimPy process), one event a step: sleep while nothing runs or
        waits; take the shared GPUs' turn (colocated); `core.schedule()` admits requests whose KV has
        arrived when a seat and their blocks are free and forms the step; wait its price (decode only:
        `pricer.decode`; with preempted sequences' recompute chunks: `pricer.step`); then log the step
        (ITL, first tokens of the newly admitted: TTFT) and hand finished requests to `on_done`."""
        core, log, pricer = self.core, self.log, self.pricer
        # the step log's appends (its arrays are never replaced during a run)
        durations, seqs, ends, tokens = (log.step_durations.append, log.step_seqs.append, log.step_end.append,
                                         log.step_tokens.append)
        while True:
            if not core.busy:
                yield self.idle()
                continue
            if self.shared is not None:  # colocated: wait for the turn on the shared GPUs
                yield self.take_turn()
            batch = core.schedule()
            running, new = batch.decoding, batch.admitted
            if running == 0 and not batch.has_prefill:  # head of line waits for KV room
                self.end_turn()
                yield self.idle()
                continue
            if batch.has_prefill:  # recomputes of preempted sequences ride with the decodes
                dt = pricer.step(batch.chunks, core.batch, core.ctx)
            elif pricer.turnover:
                dt = pricer.decode(core.batch, core.ctx, running, len(new), batch.finishing)
            else:
                dt = pricer.decode(core.batch, core.ctx, running)
            if self.shared is None:
                self._due = (self.env.now + dt, self.stamp())  # (the step's timeout comes next in the order)
                yield self.busy(dt)
                due, self._due = self._due, None
                if self._kv:
                    self._landed(due)
            else:
                yield self.busy(dt)
            self.end_turn()
            now = self.env.now
            if running:
                # ITL: continuing sequences got their previous token at the previous step's end (colocated
                # pools: a prefill turn may sit in between); new sequences got their first token (TTFT)
                durations(now - self._last_end)
                seqs(running - len(new))
                self._last_end = now
                ends(now)
                tokens(running * core.tps)
                if new:
                    log.first_tokens(new, now)
            for rid in core.finish(batch).finished:
                self.on_done(rid)
