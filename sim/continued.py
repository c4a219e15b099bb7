"""A steady-state run that goes on instead of starting again.

A run that has not settled, or a verified rate run again longer, used to restart from empty with
twice the requests. Drawn from a RequestStream (sim/workload.py: the first n requests never depend
on how many come after them), the run of 2n requests repeats the run of n event for event, so the
simulator goes on from there instead. `result(n)` runs until the first n requests have arrived
(stopping at an unstable verdict, as a fresh run does), then on, with arrivals going on meanwhile
(no drain: the last measured requests see the same load as the rest), until all but CENSORED of
the requests in the measurement window (sim/steady.py) have finished, and measures the first n.
Waiting for every one would cost as many more arrivals as the longest output lives (the seed
scenario: 5x the run); the few left running (`window_unfinished`) have no TPOT or E2E and count
as missing the SLOs in goodput. A later `result(2n)` continues the same SimPy environment: the
same figures as a fresh run of 2n, unless the first result's tail ran past the 2n-th arrival.
Rids: the warm sequences (sim/warm.py) first, then the requests in arrival order.
"""
from __future__ import annotations

from array import array

import numpy as np
import simpy

from rackplan.specs import HardwareSpec, ModelSpec, Plan, Profile, Workload

from .metrics import RequestLog, SimResult
from .simulator import MAX_STEADY, _Deployment, _no_cyclic_gc, _settles, check_requests_fit, summary, validate_plan
from .warm import seat, warm_sequences
from .workload import Requests, RequestStream

# a result waits for all but this share of its window's requests to finish: the rest, the longest
# outputs, have no TPOT (the p90 of the others: no lower, as they sit under it), an E2E above every
# finished one (so the p90 E2E and the cool-down stay exact), count as missing the SLOs in goodput
CENSORED = 0.05
TAIL_STEP = 0.5  # the tail runs on this share of the cool-down (p90 E2E) at a time


class ContinuedRun:
    """One open-loop deployment at one rate, simulated as far as asked so far (module docstring)."""

    def __init__(self, plan: Plan, model: ModelSpec, hw: HardwareSpec, workload: Workload, profile: Profile,
                 seed: int | None = None, limit: int = MAX_STEADY):
        self.plan, self.model, self.hw, self.workload = plan, model, hw, workload
        self.stream = RequestStream(workload, seed, limit)
        seed = workload.seed if seed is None else seed
        warm = warm_sequences(plan, model, hw, profile, workload, validate_plan(plan, model, hw), seed)
        self.warm = len(warm) if warm is not None else 0
        first = self._next()
        head = _with_warm(first, warm) if warm is not None else first
        self.isl, self.osl = [head.isl], [head.osl]  # [R] per rid, in chunks
        self.arrival = array("d", first.arrival_s.tolist())  # [N] arrival seconds of the drawn requests
        self.log = RequestLog(len(head))
        self.env = simpy.Environment()
        self.dep = _Deployment(self.env, plan, model, hw, profile, workload, head, self.log, seed)
        if warm is not None:
            seat(self.dep.decoders, warm, 0, self.log)
        self.work = 0  # requests + steps simulated so far (the run's CPU cost, deterministically)
        self.env.process(self._arrivals())

    def _next(self) -> Requests | None:
        chunk = self.stream.next()
        if chunk is not None:
            check_requests_fit(self.plan, self.model, self.hw, self.workload, chunk)
        return chunk

    def _draw(self) -> bool:
        """The stream's next chunk into the deployment and the log (False: the stream is done)."""
        chunk = self._next()
        if chunk is None:
            return False
        self.dep.extend(chunk)
        self.log.grow(len(chunk))
        self.isl.append(chunk.isl)
        self.osl.append(chunk.osl)
        self.arrival.extend(chunk.arrival_s.tolist())
        return True

    def _arrivals(self):
        env, rid = self.env, 0
        while rid < len(self.arrival) or self._draw():
            t = self.arrival[rid]
            if t > env.now:
                yield env.timeout(t - env.now)
            self.dep.submit(self.warm + rid)
            rid += 1

    def result(self, n: int) -> SimResult:
        """The run of the first `n` requests (fewer when the stream ends first), continued from
        what was simulated so far: unstable when a pool's queue grows by their last arrival
        (simulator._settles), else run on until the window's requests have finished (_tail)."""
        while len(self.arrival) < n and self._draw():
            pass
        n = min(n, len(self.arrival))
        rows = self.warm + n
        with _no_cyclic_gc():  # (the log's arrays grow as chunks are drawn: a fresh view each time)
            stable = _settles(self.env, lambda: self.log.head(rows), np.asarray(self.arrival[:n]),
                              self.plan.disaggregated)
            if stable:
                self._tail(rows)
        isl, osl = (np.concatenate(x)[:rows] for x in (self.isl, self.osl))
        ran = self.dep.result()
        self.work = n + sum(ran.steps.values())
        return summary(self.plan, self.workload, self.log.head(rows), isl, osl, ran, self.warm)

    def _tail(self, rows: int) -> None:
        """After the n-th arrival, go on (arrivals going on too) until at most CENSORED of the
        window's requests are still running (the longest outputs live many windows: waiting for
        the last one would simulate that many more arrivals), TAIL_STEP of the cool-down at a time."""
        while True:
            head = self.log.head(rows)
            win, _ = head.measure(self.plan.disaggregated, False)
            inw = win.holds(head.arrival)
            if np.isnan(head.finish[inw]).sum() <= CENSORED * inw.sum():
                return
            span = win.last_arrival_s - win.start_s
            self.env.run(until=self.env.now + TAIL_STEP * max(win.last_arrival_s - win.end_s, 0.05 * span, 1e-3))

    def close(self) -> None:
        """Stop the deployment's main loops and drop the run's state (once)."""
        if self.env is None:
            return
        self.dep.close()
        self.env = self.log = None


def _with_warm(reqs: Requests, warm) -> Requests:
    """`reqs` after W rows standing for the seated sequences (their prompt and remaining output;
    they never arrive)."""
    w = len(warm)
    cat = lambda a, b: np.concatenate([np.asarray(a, dtype=b.dtype), b])  # noqa: E731
    blocks = ((),) * w + tuple(reqs.blocks) if reqs.blocks is not None else None
    return Requests(cat(np.full(w, np.nan), reqs.arrival_s), cat(warm.isl, reqs.isl), cat(warm.left, reqs.osl),
                    cat(np.zeros(w), reqs.cached), blocks, reqs.block_size)
