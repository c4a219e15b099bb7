"""The discrete-event simulator of a (disaggregated or aggregated) serving deployment: its one run
driver.

SimPy processes: prefill instances, decode instances, or aggregated instances (sim/deployment.py
builds them, routes requests and moves KV); the router's arrivals (open loop: a chain of timeouts;
closed loop: a submit per finished request; sessions: a later turn when the turn before it ends)
and KV transfers are timeouts with callbacks. Events are per batch step, never per token.

`Run` is the one driver: it builds the pools (a `Deployment`), feeds the arrivals (`OpenLoop`, the
one arrivals generator, or the closed loop / sessions), runs SimPy to the end condition and
measures (`summary`). Every simulation goes through it: `simulate*` here, the planner's verify
probes, what-if, sweep, schedules and the accuracy harness (through `simulate_specs` and
`simulate_steady`). A run of given requests drains them (`Run.drain`).

Continued runs. A steady-state run that has not settled, or a verified rate run again longer,
does not restart from empty with twice the requests. Drawn from a RequestStream (sim/workload.py:
the first n requests never depend on how many come after them), the run of 2n requests repeats
the run of n event for event, so the driver goes on from there instead. `Run.result(n)` runs until
the first n requests have arrived (stopping at an unstable verdict), then on, with arrivals going
on meanwhile (no drain: the last measured requests see the same load as the rest), until every
request of the measurement window (sim/steady.py) has its first token, and measures the first n: a
request still decoding has its TPOT so far (seconds per token since its first, from the steps it
has left), an E2E longer than any finished one (+inf in percentiles), and counts in
`window_unfinished`. A later `result(2n)` continues the same SimPy environment: the same figures as
a fresh run of 2n, unless the first result's tail ran past the 2n-th arrival. Rids: the warm
sequences (sim/warm.py) first, then the requests in arrival order.
"""
from __future__ import annotations

import dataclasses
import gc
import heapq
import math
from array import array
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import simpy

from rackplan.economics import busy_share
from rackplan.policy import block_tokens
from rackplan.specs import (
    Plan,
    Profile,
    Scenario,
    SpecError,
    Workload,
    load_hardware,
    load_model,
)

from .cost.host import prompt_seconds
from .deployment import Deployment, check_requests_fit, validate_plan
from .metrics import Pools, RequestLog, SimResult, summarise
from .request_classes import class_metrics
from .sessions import NextTurns, session_figures, with_blocks
from .steady import GROWTH_TOL, Window, median
from .warm import Warm, seat, warm_sequences
from .workload import Requests, RequestStream, make_requests

# Peak RSS growth per simulated request (request table, log, per-request state in the instances):
# 1.08 kB measured for tiny-cpu, 1,000 vs 40,000 requests (/usr/bin/time, 2026-12-01, benchmarks/RESULTS.md),
# rounded up for margin.
BYTES_PER_REQUEST = 1200
MEMORY_GIB = 4.0  # default memory budget of one simulation


def max_requests(memory_gib: float = MEMORY_GIB) -> int:
    """Requests one simulation may hold within `memory_gib`."""
    return int(memory_gib * 2**30 / BYTES_PER_REQUEST)


def check_request_budget(num_requests: int, memory_gib: float = MEMORY_GIB, flag: str = "--requests") -> None:
    """Refuse, before anything is drawn, a simulation whose requests would exceed `memory_gib`
    (SpecError saying how many fit and how to raise the budget)."""
    most = max_requests(memory_gib)
    if num_requests > most:
        raise SpecError("simulate", flag, f"at most {most:,} requests in the {memory_gib:g} GiB memory budget (about "
                        f"{BYTES_PER_REQUEST} B per request; raise it with --memory-gib)", num_requests)


class OpenLoop:
    """The router's open loop, the one arrivals generator: request `first_rid + i` submitted at
    `arrivals[i]` (times read a chunk at a time: no list of N floats; NaN: a session's later turn,
    issued when the turn before it ends, sim/sessions.py). `more()`, when given, draws further
    arrivals into `arrivals` (an array that grows: a continued run's stream) once those drawn are
    submitted, and says whether it drew any. One timeout per arrival, whose callback submits the
    request and sets the next: the events a generator process would make, in the same order,
    without a process resumed per request."""

    def __init__(self, env, submit, arrivals, first_rid: int = 0, more=None, chunk: int = 4096):
        self.env, self.submit = env, submit
        self._times = _pairs(arrivals, first_rid, more, chunk)  # (rid, arrival s)
        self._due = -1  # the request the pending timeout submits
        self._next()

    def _next(self, _event=None) -> None:
        env = self.env
        if _event is not None:
            self.submit(self._due)
        for rid, t in self._times:
            if t != t:  # NaN: issued by the sessions' loop
                continue
            if t > env.now:
                self._due = rid
                env.timeout(t - env.now).callbacks.append(self._next)
                return
            self.submit(rid)

    def close(self) -> None:
        """Stop the arrivals (a continued run's close): the pending timeout, held by the environment,
        then holds no run state (the stream's frame, the deployment's submit) and submits nothing."""
        self._times.close()
        self._times, self.submit = iter(()), lambda _rid: None


def _pairs(arrivals, first_rid: int, more, chunk: int):
    """(rid, arrival s) of every arrival, in order, `chunk` at a time, drawing more when all are read."""
    lo = 0
    while lo < len(arrivals) or (more is not None and more()):
        hi = min(lo + chunk, len(arrivals))
        yield from enumerate(arrivals[lo:hi].tolist(), first_rid + lo)
        lo = hi


@contextmanager
def _no_cyclic_gc():
    """A run allocates millions of short-lived objects and makes almost no reference cycles: the
    cyclic collector would only rescan them (~10% of the run); it is back on afterwards. What the
    run leaves tracked (the pricers' memos kept for the next run: ~170k objects in case (a)) goes
    to the oldest generation then, as survivors do, without the young collection that would scan
    them all at the first allocation (~60 ms of case (a)); a full collection still sees them."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # every tracked object to the permanent generation (the young count starts at 0) ...
        gc.unfreeze()  # ... and back, into the oldest
        if collecting:
            gc.enable()


class FrontEnd:
    """The API-server processes a closed-loop client's requests pass before the engine sees them
    (`vllm bench serve --max-concurrency`: the next request is sent when one finishes). Each process
    takes in one request at a time (sim/cost/host.py prompt_seconds: it tokenises the prompt), a request
    goes to the process that frees first, and its arrival is logged when the client sends it. So the
    replacements of requests that finish in the same step reach an idle engine one after another, and
    the engine starts a step with the first (vLLM's engine core steps as soon as a request is queued:
    vllm-project/vllm issue #16373)."""

    def __init__(self, env, dep: Deployment, isl):
        self.env, self.dep, self.isl = env, dep, isl  # isl: [N] prompt tokens per request
        self.free = [0.0] * dep.front_end_servers  # a heap: when each process is next free (s)

    def send(self, rid: int) -> None:
        """The client sends request `rid` now."""
        env, dep = self.env, self.dep
        dep.log.arrive(rid, env.now)
        work = prompt_seconds(dep.front_end_host, float(self.isl[rid]))
        if work <= 0 or not self.free:
            dep.enter(rid)
            return
        done = max(env.now, heapq.heappop(self.free)) + work
        heapq.heappush(self.free, done)
        env.timeout(done - env.now).callbacks.append(lambda _ev: dep.enter(rid))


TAIL_STEP = 0.5  # a continued run's tail runs on this share of the cool-down (p90 E2E) at a time


class Run:
    """One deployment of a scenario in one SimPy environment, fed its requests and simulated as far
    as asked: the one run driver (module docstring). Fed either
    - `reqs`, requests drawn elsewhere (a workload's, a schedule's interval, a trace, sessions), from
      empty pools: open loop (each at its arrival time), closed loop (`arrival.kind: concurrency`, a
      submit per finished request) or sessions (a later turn when the turn before it ends); `drain()`
      runs every one to the end; or
    - (`reqs` None) the open-loop RequestStream of a steady-state run (at most `limit` requests), the
      decode pools seated with warm sequences (sim/warm.py); `result(n)` measures the first n,
      going on from what was simulated so far (continued runs, module docstring).
    `seed` (default: the workload's) seeds the requests and the pools' routing-imbalance draws
    (sim/pricer.py). `close()` frees the run (a continued run's caller closes it)."""

    def __init__(self, sc: Scenario, seed: int | None = None, reqs: Requests | None = None,
                 limit: int | None = None):
        self.sc, self.plan, self.workload = sc, sc.plan, sc.workload
        seed = sc.workload.seed if seed is None else seed
        self.stream = RequestStream(sc.workload, seed, limit or MAX_STEADY) if reqs is None else None
        warm = warm_sequences(sc, validate_plan(sc.plan, sc.model, sc.hw), seed) if reqs is None else None
        self.warm = len(warm) if warm is not None else 0
        self.reqs = reqs = self._next() if reqs is None else self._check(reqs)
        head = _with_warm(reqs, warm) if warm is not None else reqs
        self.isl, self.osl = [head.isl], [head.osl]  # [R] per rid, in chunks
        self.log = RequestLog(len(head))
        self.env = simpy.Environment()
        if reqs.sessions is not None:  # [sessions] the prompts' blocks at the engine's block size
            head = with_blocks(head, block_tokens(sc.model.attention.kind))
        self.dep = Deployment(self.env, sc, head, self.log, seed)
        self.work = 0  # requests + steps simulated so far (the run's CPU cost, deterministically)
        if warm is not None:
            with _no_cyclic_gc():  # (a wide pool seats millions of sequences: objects that live as long as the run)
                seat(self.dep.decoders, warm, 0, self.log)
        self.arrival = array("d", reqs.arrival_s.tolist()) if self.stream is not None else reqs.arrival_s  # [N] s
        self._arrivals = self._feed(head)

    def _check(self, reqs: Requests) -> Requests:
        """`reqs`, refused (SpecError) when one could never finish (check_requests_fit)."""
        check_requests_fit(self.plan, self.sc.model, self.sc.hw, self.workload, reqs)
        return reqs

    def _next(self) -> Requests | None:
        chunk = self.stream.next()
        return self._check(chunk) if chunk is not None else None

    def _feed(self, reqs: Requests) -> OpenLoop | None:
        """Start the arrivals: the closed loop's first `concurrency` requests (the rest one per finished
        request), or the open loop's arrivals (sessions: the first turns; the later ones follow)."""
        dep = self.dep
        if reqs.sessions is not None:
            dep.on_request_done = NextTurns(self.env, dep.submit, reqs.sessions)
        if self.workload.arrival.kind == "concurrency":
            nxt = iter(range(len(reqs)))
            front = FrontEnd(self.env, dep, reqs.isl)
            dep.on_request_done = lambda _rid: [front.send(r) for r in [next(nxt, None)] if r is not None]
            for _ in range(min(self.workload.arrival.concurrency, len(reqs))):
                front.send(next(nxt))
            return None
        more = self._draw if self.stream is not None else None
        return OpenLoop(self.env, dep.submit, self.arrival, self.warm, more)

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

    def drain(self) -> SimResult:
        """Every given request run to its end, measured over the steady-state window (sim/steady.py);
        the run is closed afterwards."""
        with _no_cyclic_gc():
            self.env.run()
            unfinished = int(np.isnan(self.log.finish).sum())
            if unfinished:
                self.close()
                raise RuntimeError(f"simulation ended with {unfinished} unfinished requests (a request larger "
                                   "than any rank's KV capacity?)")
            ran = _record(self.dep)
            reqs, log = self.reqs, self.log
            self.close()
        res = summary(self.plan, self.workload, log, reqs.isl, reqs.osl, ran, 0)
        if reqs.sessions is not None:
            figures = session_figures(reqs, ran.cached, log.first_token - log.arrival, log.finish - log.arrival)
            res = dataclasses.replace(res, sessions=figures)
        return res

    def result(self, n: int) -> SimResult:
        """The run of the stream's first `n` requests (fewer when the stream ends first), continued
        from what was simulated so far: unstable when a pool's queue grows by their last arrival
        (_settles), else run on until the window's requests have their first token (_tail)."""
        if self.stream is None:
            raise ValueError("result(n) measures a stream's run; a run of given requests drains (drain())")
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
        ran = _record(self.dep)
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
        """Stop the deployment's main loops and the arrivals, and drop the run's state (once): a
        continued run's pending arrival is held by the environment, which is cyclic (its bound event
        classes refer to it), so without closing them the whole run (deployment, request arrays)
        would wait for a full cyclic collection, rare after a run (_no_cyclic_gc); closed, it is
        freed by reference counting (576-GPU plan: peak RSS 240 -> 186 MB, benchmarks/RESULTS.md)."""
        if self.env is None:
            return
        self.dep.close()
        if self._arrivals is not None:
            self._arrivals.close()
        self.env = self.log = self.dep = self.stream = self._arrivals = self.reqs = None
        self.isl = self.osl = self.arrival = None


def _with_warm(reqs: Requests, warm: Warm) -> Requests:
    """`reqs` after W rows standing for the seated sequences (their prompt and remaining output;
    they never arrive)."""
    w = len(warm)
    cat = lambda a, b: np.concatenate([np.asarray(a, dtype=b.dtype), b])  # noqa: E731
    blocks = ((),) * w + tuple(reqs.blocks) if reqs.blocks is not None else None
    priority = cat(np.zeros(w), reqs.priority) if reqs.priority is not None else None
    return Requests(cat(np.full(w, np.nan), reqs.arrival_s), cat(warm.isl, reqs.isl), cat(warm.left, reqs.osl),
                    cat(np.zeros(w), reqs.cached), blocks, reqs.block_size, priority=priority)


def simulate_requests(sc: Scenario, reqs: Requests, seed: int | None = None) -> SimResult:
    """Simulate `sc.plan` serving the given requests (drawn elsewhere: a schedule's interval, sim/search/schedule.py),
    every one run to the end; `sc.workload` names them and says whether the loop is closed."""
    with _no_cyclic_gc():  # (the deployment built without the cyclic collector, as it runs: drain)
        run = Run(sc, seed, reqs)
    return run.drain()


def simulate_specs(sc: Scenario, num_requests: int | None = None, seed: int | None = None) -> SimResult:
    """Simulate `plan` serving `num_requests` requests of `workload` (default: the workload's count)
    with explicit spec objects (what-if studies pass edited ones); every request runs to the end,
    and the summary is measured over the steady-state window (sim/steady.py)."""
    return simulate_requests(sc, make_requests(sc.workload, num_requests, seed), seed)


MIN_STEADY = 1000  # requests of a steady-state run at least (closed loop: MIN_CLOSED, 10 per concurrent)
MIN_CLOSED = 200
MIN_WINDOW_STEPS = 20  # ... and steps of every pool (its instances together) in its window
MAX_STEADY = 600_000  # requests of a steady-state run at most (~90 MB of request state)
SETTLE_E2E = 4.0  # a rerun spans this many p90 E2E of arrivals (warm-up about 2, the window the rest)


# figures `precision` applies to, x a scale: a p90 near a saturating pool wanders for long (the seed
# scenario's TTFT p90 needs ~600k requests for a 1.3% standard error), its throughput does not
PRECISE = {"output_tps_per_gpu": 1.0, "ttft_p90_s": 4.0, "tpot_p90_s": 4.0}
PRECISION = 0.01  # `simulate` and `whatif`: standard errors at most 1% of the throughput, 4% of the p90s


def simulate_steady(sc: Scenario, seed: int | None = None, first: int | None = None, most: int = MAX_STEADY,
                    precision: float | None = None, run=None) -> SimResult:
    """Simulate long enough to judge steady state: start with `first` requests (default: the
    workload's count), and while the run never settled (sim/steady.py: warm-up not over in its
    first half) go on to at least twice the requests, or enough arrivals to span SETTLE_E2E p90
    E2E, and while a pool ran fewer than MIN_WINDOW_STEPS steps in the window, to twice the
    requests. With `precision`, also until the standard error of each PRECISE figure is at most
    `precision` x its scale of it (sim/metrics.py: batch means, floored by independent samples).
    An unstable run stops there: its growing queue is the verdict. Open-loop runs are continued,
    not restarted (Run.result; `run`: a stream's Run to go on with, which the caller closes);
    closed loops rerun from empty. Every run is seeded alike, so a run of the same
    `first` and `most` repeats exactly."""
    workload = sc.workload
    if workload.sessions is not None:  # later turns arrive as earlier ones end: one run, drained
        n = min(first or workload.num_requests, most)
        return simulate_requests(sc, make_requests(workload, n, seed), seed)
    closed = workload.arrival.kind == "concurrency"  # no arrival noise: fewer requests show its steady state
    n = max(max(MIN_CLOSED, 10 * workload.arrival.concurrency) if closed else MIN_STEADY,
            first or workload.num_requests)
    own = run is None and not closed
    if own:
        run = Run(sc, seed)
    try:
        while True:
            if closed:
                res = simulate_requests(sc, make_requests(workload, min(n, most), seed), seed)
            else:
                res = run.result(min(n, most))
            if res.metrics["num_requests"] < min(n, most) or n >= most:
                return res
            if res.metrics["window_steps"] < MIN_WINDOW_STEPS:  # a few big steps: rates are step-quantised
                n = min(most, 2 * n)
            elif not res.stable:
                return res
            elif not res.stability.converged:
                n = min(most, max(2 * n, _settling_requests(res)))
            elif precision and (worst := _relative_error(res)) > precision:
                n = min(most, max(2 * n, math.ceil(n * (worst / precision) ** 2)))  # errors fall as 1/sqrt(n)
            else:
                return res
    finally:
        if own:
            run.close()


def _relative_error(res: SimResult) -> float:
    """The largest standard error of the PRECISE figures as a share of the figure, over its scale."""
    m, worst = res.metrics, 0.0
    for key, scale in PRECISE.items():
        se = m.get(key.replace("_s", "_se_s") if key.endswith("_s") else key + "_se", math.nan)
        if math.isfinite(se) and m[key] > 0:
            worst = max(worst, se / m[key] / scale)
    return worst


def _settling_requests(res: SimResult) -> int:
    """Requests whose arrivals span SETTLE_E2E p90 E2E at the run's offered rate (none when the
    p90 is not known: a continued run's requests still decoding reach it)."""
    m = res.metrics
    if not np.isfinite(m["e2e_p90_s"]):
        return 0
    e2e = m["e2e_p90_s"]
    return int(math.ceil(m["offered_rps"] * SETTLE_E2E * e2e))


TIMELINE_BINS = 100  # intervals of the run over which each pool's busy share is kept (SimResult.busy_over_time)


@dataclass(frozen=True)
class _Record:
    """What a run leaves besides the request log."""

    steps: dict[str, int]
    usage: dict[str, tuple]  # instance -> (step ends, busy seconds up to each, prompts each step finished)
    cached: np.ndarray  # [N] prompt tokens served from prefix caches

    def fewest_steps(self, win: Window) -> int:
        """Steps in the window of the pool (prefill, decode, aggregated: all its instances) that ran
        the fewest."""
        pools: dict[str, int] = {}
        for name, (e, _, _) in self.usage.items():
            pool = name.split("[")[0]
            pools[pool] = pools.get(pool, 0) + int(np.count_nonzero((np.asarray(e) > win.start_s)
                                                                    & (np.asarray(e) <= win.end_s)))
        return min(pools.values(), default=0)

    def prefill_capacity_rps(self, win: Window) -> float:
        """Prompts per busy second of each prefill instance over its steps that ended in the window,
        summed: the pool's service rate, free of the quantisation of counting big steps' prompts."""
        total = 0.0
        for ends, busy, done in self.usage.values():
            if done is None or not len(ends):
                continue
            e, b = np.asarray(ends), np.asarray(busy)
            dur = np.diff(b, prepend=0.0)  # [steps] seconds of each step
            inw = (e > win.start_s) & (e <= win.end_s)
            if dur[inw].sum() > 0:
                total += float(np.asarray(done)[inw].sum()) / float(dur[inw].sum())
        return total

    def pool_busy(self, edges: np.ndarray) -> dict[str, np.ndarray]:
        """Busy share of each pool (mean over its instances) in each interval between `edges` [B + 1]:
        [B] per pool, the utilisation over the run that report.html draws."""
        out: dict[str, list] = {}
        for name, (ends, busy, _) in self.usage.items():
            b = np.interp(edges, np.asarray(ends), np.asarray(busy), left=0.0) if len(ends) else np.zeros(len(edges))
            out.setdefault(name.split("[")[0], []).append(np.diff(b) / np.diff(edges))
        return {pool: np.clip(np.mean(shares, axis=0), 0.0, 1.0) for pool, shares in out.items()}

    def utilisation(self, win: Window) -> dict[str, float]:
        """Busy share of each instance over the window (busy time interpolated between step ends)."""
        out = {}
        for name, (ends, busy, _) in self.usage.items():
            b0, b1 = np.interp([win.start_s, win.end_s], np.asarray(ends), np.asarray(busy), left=0.0) \
                if len(ends) else (0.0, 0.0)
            out[name] = float(b1 - b0) / win.length_s
        return out


def _record(dep: Deployment) -> _Record:
    """What the deployment's run left so far besides the request log."""
    return _Record(dep.steps(), dep.usage(), np.frombuffer(dep.cached, dtype=np.int64).copy())


def pools_of(plan: Plan) -> Pools:
    """GPUs of the whole plan and of each pool (aggregated: one pool of every GPU)."""
    if not plan.disaggregated:
        return Pools(plan.gpus_used, plan.gpus_used, plan.gpus_used)
    return Pools(plan.gpus_used, sum(lay.total_gpus for lay in plan.prefill),
                 sum(lay.total_gpus for lay in plan.decode))


def summary(plan: Plan, workload: Workload, log: RequestLog, isl: np.ndarray, osl: np.ndarray, run: _Record,
            warm: int, tpot_running: np.ndarray | None = None) -> SimResult:
    """The steady-state result of a run's log: [R] `isl`, `osl` in rid order, the first `warm` rids
    sequences seated at t = 0 (sim/warm.py: they never arrive, so only the running series and the
    served tokens see them; the per-request arrays and counts leave them out)."""
    closed = workload.arrival.kind == "concurrency"
    win, stab = log.measure(plan.disaggregated, closed)
    template = workload.template_tokens
    res = summarise(log, win, stab, isl, osl, run.cached[:len(isl)], pools_of(plan), plan.slo,
                    run.utilisation(win), run.steps, plan.disaggregated, closed, tpot_running, template)
    if warm:
        res = dataclasses.replace(res, ttft_s=res.ttft_s[warm:], tpot_s=res.tpot_s[warm:], e2e_s=res.e2e_s[warm:])
        res.metrics.update(num_requests=float(len(isl) - warm), input_tokens=float((isl[warm:] - template).sum()))
    res.metrics["warm_sequences"] = float(warm)
    if workload.classes:  # per-class attainment, in request-index order (the warm seats left out)
        running = tpot_running[warm:] if tpot_running is not None else None
        res.metrics.update(class_metrics(workload, osl[warm:], res.ttft_s, res.tpot_s, res.e2e_s,
                                         win.holds(log.arrival)[warm:], win.length_s, res.metrics, running))
    edges = np.linspace(0.0, res.metrics["first_arrival_s"] + res.metrics["duration_s"], TIMELINE_BINS + 1)
    res = dataclasses.replace(res, busy_over_time=(edges, run.pool_busy(edges)))
    res.metrics["window_steps"] = float(run.fewest_steps(win))
    res.metrics["prefill_capacity_rps"] = run.prefill_capacity_rps(win)
    res.metrics["gpu_busy_share"] = busy_share(plan, res.utilisation)  # power at the operating point
    return res


EARLY_CHECKS = (16, 8, 4, 2)  # settling runs: look at the queues after 1/16 ... 1/2 of the arrivals
EARLY_GROWTH = 3 * GROWTH_TOL  # ... and stop before the end only on clear growth at two checks in a row
EARLY_LIFETIMES = 1.0  # ... once the run has lasted this many median E2E (queues filling from empty are no growth)


def _settles(env, head, arrivals: np.ndarray, disaggregated: bool) -> bool:
    """Run an open-loop simulation to its last arrival; False (and stop there) as soon as a pool's
    queue clearly grows at two checks in a row (an unstable run need not go on, nor drain; a
    queue that grows once may be the start-up filling batches), a check only once the run has
    lasted EARLY_LIFETIMES median E2E of the requests finished so far (before that, queues are
    still filling from empty). `head()`: the request log of the run so far (checks already
    behind `env.now`, in a continued run, are not looked at again)."""
    n, growing = len(arrivals), set()
    for k in EARLY_CHECKS:
        until = float(arrivals[n // k - 1]) + 1e-9 if n // k else 0.0
        if n // k >= MIN_STEADY // 2 and until > env.now:
            env.run(until=until)
            log = head()
            done = np.isfinite(log.finish) & np.isfinite(log.arrival)
            if not done.any() or env.now < EARLY_LIFETIMES * median(log.finish[done] - log.arrival[done]):
                continue
            now = {p for p, g in log.measure(disaggregated, False)[1].growth.items() if g > EARLY_GROWTH}
            if now & growing:
                return False
            growing = now
    end = float(np.nextafter(arrivals[-1], np.inf))
    if end > env.now:
        env.run(until=end)
    return head().measure(disaggregated, False)[1].stable


def simulate(plan: Plan, workload: Workload, profile: Profile, num_requests: int | None = None,
             seed: int | None = None) -> SimResult:
    """Simulate `plan` (its model and hardware loaded by name) serving `workload`."""
    return simulate_specs(Scenario(plan, load_model(plan.model), load_hardware(plan.hardware), workload, profile),
                          num_requests, seed)


def with_rate(workload: Workload, rate: float) -> Workload:
    """The same workload at another Poisson rate (req/s)."""
    arrival = dataclasses.replace(workload.arrival, kind="poisson", rate=rate, concurrency=None)
    return dataclasses.replace(workload, arrival=arrival)
