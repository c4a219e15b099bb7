"""What every simulated instance shares: a name, a step pricer, busy time, and the wake-up event
its main loop sleeps on while it has nothing to do."""
from __future__ import annotations

import simpy

from .pricer import StepPricer


class Instance:
    def __init__(self, env: simpy.Environment, name: str, pricer: StepPricer,
                 shared: simpy.Resource | None = None):
        self.env, self.name, self.pricer = env, name, pricer
        self.shared = shared  # colocated instances take turns on the same GPUs
        self.busy_s = 0.0
        self.steps = 0
        self._wake = env.event()
        env.process(self.run())

    def run(self):  # pragma: no cover - each instance kind defines its main loop
        raise NotImplementedError

    def notify(self) -> None:
        """New work arrived: wake the main loop if it sleeps."""
        if not self._wake.triggered:
            self._wake.succeed()

    def idle(self) -> simpy.Event:
        """An event to sleep on until `notify`."""
        self._wake = self.env.event()
        return self._wake

    def busy(self, seconds: float):
        """Run one step of `seconds` (after the shared GPUs are free, when colocated)."""
        self.busy_s += seconds
        self.steps += 1
        if self.shared is None:
            yield self.env.timeout(seconds)
            return
        with self.shared.request() as turn:
            yield turn
            yield self.env.timeout(seconds)
