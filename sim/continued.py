"""A steady-state run that goes on instead of starting again.

A run that has not settled, or a verified rate run again longer, used to restart from empty with
twice the requests. Drawn from a RequestStream (sim/workload.py: the first n requests never depend
on how many come after them), the run of 2n requests repeats the run of n event for event, so the
simulator goes on from there instead. `result(n)` runs until the first n requests have arrived
(stopping at an unstable verdict, as a fresh run does), then on, with arrivals going on meanwhile
(no drain: the last measured requests see the same load as the rest), until every request of the
measurement window (sim/steady.py) has its first token, and measures the first n: a request still
decoding has its TPOT so far (seconds per token since its first, from the steps it has left), an
E2E longer than any finished one (+inf in percentiles), and counts in `window_unfinished`. A later
`result(2n)` continues the same SimPy environment: the same figures as a fresh run of 2n, unless
the first result's tail ran past the 2n-th arrival. Rids: the warm sequences (sim/warm.py) first,
then the requests in arrival order.
"""
from __future__ import annotations

from array import array

import numpy as np
import simpy

from rackplan.specs import Scenario

from .metrics import RequestLog, SimResult
from .simulator import MAX_STEADY, _Deployment, _no_cyclic_gc, _settles, check_requests_fit, summary, validate_plan
from .warm import seat, warm_sequences
from .workload import Requests, RequestStream

TAIL_STEP = 0.5  # the tail runs on this share of the cool-down (p90 E2E) at a time


class ContinuedRun:
    """One open-loop deployment at one rate, simulated as far as asked so far (module docstring)."""

    def __init__(self, sc: Scenario, seed: int | None = None, limit: int = MAX_STEADY):
        plan, model, hw, workload = sc.plan, sc.model, sc.hw, sc.workload
        self.plan, self.model, self.hw, self.workload = plan, model, hw, workload
        self.stream = RequestStream(workload, seed, limit)
        seed = workload.seed if seed is None else seed
        warm = warm_sequences(sc, validate_plan(plan, model, hw), seed)
        self.warm = len(warm) if warm is not None else 0
        first = self._next()
        head = _with_warm(first, warm) if warm is not None else first
        self.isl, self.osl = [head.isl], [head.osl]  # [R] per rid, in chunks
        self.arrival = array("d", first.arrival_s.tolist())  # [N] arrival seconds of the drawn requests
        self.log = RequestLog(len(head))
        self.env = simpy.Environment()
        self.dep = _Deployment(self.env, sc, head, self.log, seed)
        if warm is not None:
            seat(self.dep.decoders, warm, 0, self.log)
        self.work = 0  # requests + steps simulated so far (the run's CPU cost, deterministically)
        self._arriving = self._arrivals()  # (kept to close: its frame holds the run)
        self.env.process(self._arriving)

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
        head = self.log.head(rows)
        return summary(self.plan, self.workload, head, isl, osl, ran, self.warm, self._tpot_so_far(head, osl))

    def _tpot_so_far(self, head: RequestLog, osl: np.ndarray) -> np.ndarray:
        """[R] Of each request still decoding: seconds per output token since its first, so far
        (tokens emitted: its output less the steps it has left; NaN for every other request)."""
        out = np.full(len(osl), np.nan)
        now = self.env.now
        for inst in self.dep.decoders + self.dep.front:
            core = inst.core
            for rid, left in core.steps_left().items():
                if rid < len(osl) and rid >= self.warm:
                    emitted = osl[rid] - left * core.tps
                    if emitted > 1 and not np.isnan(head.first_token[rid]):
                        out[rid] = (now - head.first_token[rid]) / (emitted - 1)
        return out

    def _tail(self, rows: int) -> None:
        """After the n-th arrival, go on (arrivals going on too) until every request of the window
        has its first token, TAIL_STEP of the cool-down at a time. Requests still decoding then
        are measured so far (_tpot_so_far): waiting for the longest outputs to finish would
        simulate as many more arrivals as they live."""
        while True:
            head = self.log.head(rows)
            win, _ = head.measure(self.plan.disaggregated, False)
            inw = win.holds(head.arrival)
            if not np.isnan(head.first_token[inw]).any():
                return
            span = win.last_arrival_s - win.start_s
            self.env.run(until=self.env.now + TAIL_STEP * max(win.last_arrival_s - win.end_s, 0.05 * span, 1e-3))

    def close(self) -> None:
        """Stop the deployment's main loops and the arrivals, and drop the run's state (once): the
        arrivals' suspended frame holds this run, and its SimPy process and pending timeout hold
        each other, so without closing it the whole run (deployment, request arrays) would wait
        for a full cyclic collection, rare after a run (simulator._no_cyclic_gc); closed, it is
        freed by reference counting (576-GPU plan: peak RSS 240 -> 186 MB, benchmarks/RESULTS.md)."""
        if self.env is None:
            return
        self.dep.close()
        self._arriving.close()
        self.env = self.log = self.dep = self.stream = self._arriving = None
        self.isl = self.osl = self.arrival = None


def _with_warm(reqs: Requests, warm) -> Requests:
    """`reqs` after W rows standing for the seated sequences (their prompt and remaining output;
    they never arrive)."""
    w = len(warm)
    cat = lambda a, b: np.concatenate([np.asarray(a, dtype=b.dtype), b])  # noqa: E731
    blocks = ((),) * w + tuple(reqs.blocks) if reqs.blocks is not None else None
    priority = cat(np.zeros(w), reqs.priority) if reqs.priority is not None else None
    return Requests(cat(np.full(w, np.nan), reqs.arrival_s), cat(warm.isl, reqs.isl), cat(warm.left, reqs.osl),
                    cat(np.zeros(w), reqs.cached), blocks, reqs.block_size, priority=priority)
