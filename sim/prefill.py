"""Prefill instance: the serving policy's prefill engine (rackplan/policy), one SimPy event a step.

A request binds to a DP rank when it arrives and waits in that rank's FIFO queue; each step every
rank takes chunks up to its token budget (a prompt longer than what is left continues next step on
the same rank), its KV blocks allocated as the chunks run. Prompts whose last chunk ran go to KV
transfer (their blocks freed).
"""
from __future__ import annotations

from array import array

import simpy

from rackplan.policy import EngineCore

from .cost.host import intake_seconds
from .instance import Instance
from .pricer import StepPricer


class PrefillInstance(Instance):
    """A prefill instance; `on_prefilled(rid)` hands finished prompts to KV transfer (their decode
    instance and rank chosen by `on_completing(rid)` when the last chunk is scheduled). With `prefix`
    (sim/prefix_cache.InstancePrefixes) a request's cached tokens come from this instance's cache
    (`core` calls its `schedule` when a prompt first runs)."""

    def __init__(self, env: simpy.Environment, name: str, pricer: StepPricer, core: EngineCore, on_prefilled,
                 shared=None, handoff_s=None, prefix=None, on_completing=None):
        self.core, self.on_prefilled, self.prefix = core, on_prefilled, prefix
        self.on_completing = on_completing  # rid -> None: its last chunk is scheduled (the decode side binds it)
        self.handoff_s = handoff_s  # colocated: KV hand-off inside the turn, seconds for a list of rids
        self.prompts_done = array("q")  # prompts each step finished (service rate while busy, after the run)
        self.arrivals = 0  # requests taken in since the last step (their intake: host.intake_seconds)
        self.intake = pricer.cx.prof.host if pricer.cx.prof.host.schedule_per_arrival_s > 0 else None
        super().__init__(env, name, pricer, shared)

    @property
    def load(self) -> int:
        """Prompt tokens queued, not yet prefilled: the router's least-loaded measure."""
        return self.core.queued_tokens

    queued_tokens = load  # the prefix-aware router's name for it

    def submit(self, rid: int) -> None:
        self.core.add(rid)
        self.arrivals += 1
        self.notify()

    def run(self):
        """The instance's main loop (a SimPy process), one event a step: sleep while no prompt waits;
        take the shared GPUs' turn (colocated); `core.schedule()` forms each DP rank's chunks up to its
        token budget; the decode side binds prompts whose last chunk is scheduled (`on_completing`);
        wait the step's price (+ the KV hand-off inside the turn, colocated); then `core.finish` frees
        the finished prompts' blocks and `on_prefilled` sends each to KV transfer."""
        core = self.core
        while True:
            if not core.busy:
                yield self.idle()
                continue
            if self.shared is not None:  # colocated: wait for the turn on the shared GPUs
                yield self.take_turn()
            batch = core.schedule()
            if not batch.has_prefill:  # every rank's head waits for KV blocks
                self.end_turn()
                yield self.idle()
                continue
            dt = self.pricer.step(batch.chunks)
            if self.intake is not None:  # the intake of the requests that arrived since the last step
                dt += intake_seconds(self.intake, self.arrivals) * self.pricer.cx.hw.cpu_speed
            self.arrivals = 0
            if self.on_completing is not None:
                for rid in batch.completing:
                    self.on_completing(rid)
            if self.handoff_s is not None and batch.completing:
                dt += self.handoff_s(batch.completing)
            self.prompts_done.append(len(batch.completing))
            yield self.busy(dt)
            self.end_turn()
            for _, rid in core.finish(batch).prefilled:
                if self.prefix is not None:  # [prefix cache]
                    self.prefix.finish(rid)
                self.on_prefilled(rid)
            if self.shared is not None:  # colocated: a decoder these prompts woke takes the next turn, as
                yield self.env.timeout(0)  # the executor's tick runs its decode step after the prefill step
