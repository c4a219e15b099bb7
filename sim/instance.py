"""What every simulated instance shares: a name, a step pricer, busy time, the wake-up event its
main loop sleeps on while it has nothing to do, and (colocated pools) the turn on shared GPUs.

Colocated prefill and decode instances alternate like one engine loop: a prefill step (with the
KV hand-off of the prompts it finished), then a decode step that already seats those prompts."""
from __future__ import annotations

from array import array
from heapq import heappush

import simpy
from simpy.events import NORMAL

from .pricer import StepPricer


class Instance:
    def __init__(self, env: simpy.Environment, name: str, pricer: StepPricer,
                 shared: simpy.Resource | None = None):
        self.env, self.name, self.pricer = env, name, pricer
        self.shared = shared  # colocated instances take turns on the same GPUs
        self.busy_s = 0.0
        self.steps = 0
        self.step_ends = array("d")  # end of each step (s) and busy seconds up to it: utilisation
        self.busy_upto = array("d")  # over any window after the run
        self._wake = env.event()
        self._sleeping = False  # the main loop waits on _wake (a flag: no event property read per notify)
        self._loop = self.run()
        env.process(self._loop)

    def run(self):  # pragma: no cover - each instance kind defines its main loop
        raise NotImplementedError

    def stop(self) -> None:
        """End the main loop (after a run): its frame no longer holds the instance, so the instance
        and what it holds are freed when the deployment goes, without the cyclic collector."""
        self._loop.close()

    def notify(self) -> None:
        """New work arrived: wake the main loop if it sleeps."""
        if self._sleeping:
            self._sleeping = False
            self._wake.succeed()

    def idle(self) -> simpy.Event:
        """An event to sleep on until `notify`."""
        self._wake = self.env.event()
        self._sleeping = True
        return self._wake

    def take_turn(self) -> simpy.Event:
        """Colocated (`shared` set): the request for the shared GPUs to wait on (`yield`)."""
        self._turn = self.shared.request()
        return self._turn

    def end_turn(self) -> None:
        if self.shared is not None:
            self.shared.release(self._turn)

    def stamp(self) -> int:
        """The next place in SimPy's event order (the counter that orders events of the same time and
        priority): an event made now would come after every event made before it, before every later one."""
        return next(self.env._eid)

    def at(self, when: float, stamp: int, callback) -> None:
        """Schedule `callback(event)` as a timeout of this time and `stamp` would run: the entry SimPy's
        Environment.schedule pushes, (time, priority, order, event), with the order `stamp` taken when
        the timeout was due to be made (an event put off, then made, keeps its place among the others)."""
        ev = simpy.Event(self.env)
        ev._ok, ev._value = True, None  # (triggered, as a Timeout is when made)
        ev.callbacks.append(callback)
        heappush(self.env._queue, (when, NORMAL, stamp, ev))

    def busy(self, seconds: float) -> simpy.Event:
        """Run one step of `seconds`."""
        self.busy_s += seconds
        self.steps += 1
        self.step_ends.append(self.env.now + seconds)
        self.busy_upto.append(self.busy_s)
        return self.env.timeout(seconds)
