"""Steady state of one simulated run: the measurement window and the stability verdict.

As load generators do, the figures of a run come from a window that leaves out the warm-up (pools
filling from empty) and the cool-down (requests still running when arrivals stop). Everything
here is computed after the run from per-request timestamps, so the main loops keep no extra
bookkeeping:
- Warm-up: MSER-5 (White 1997; Hoad, Robinson & Davies 2010) on the number of running sequences
  over time: the truncation point that minimises the standard error of the mean of what is left.
  A truncation point in the second half of the run means the run never settled: not converged.
- Cool-down: requests that arrive in the last C seconds before the last arrival are not measured,
  C the p90 of E2E after the warm-up (capped at half of what is left), so measured requests run
  while new requests keep arriving.
- Stability: per pool, its queue (requests that reached the pool and have not been served by it:
  prefill: arrived, prompt not done; decode: KV delivered, no first token yet; aggregated: arrived,
  no first token) sampled from the window's start to the last arrival. Its least-squares slope as a
  share of the offered rate is the share of arrivals the pool leaves behind; above GROWTH_TOL, and
  with the queue's rise across the window beyond GROWTH_Z times its scatter around the trend (a
  short window of a busy queue wanders), the pool saturates. Closed-loop runs cannot grow a queue;
  they are judged on convergence alone.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

GRID = 500  # samples of the series over the run (MSER batches of 5: 100 batch means)
MSER_BATCH = 5
GROWTH_TOL = 0.02  # a queue growing by more than 2% of the offered rate: the pool does not keep up
GROWTH_Z = 3.0  # ... and by more, across the window, than 3 standard deviations of its wandering
COOLDOWN_Q = 90.0  # cool-down: this percentile of E2E after the warm-up
MIN_WINDOW = 20  # fewer requests in the window: measure the whole run (and call it not converged)


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) [N] x [N] by numpy's pairwise summation, the same bits on every machine: np.dot hands
    vectors over 10,000 long to BLAS, which splits the sum over its threads, so its last bits depend on
    OPENBLAS_NUM_THREADS (a what-if's ITL mean moved by 1 ulp between 1 and 2 threads, benchmarks/RESULTS.md
    2026-12-02 "same inputs, same report")."""
    return float(np.sum(np.asarray(a, float) * np.asarray(b, float)))


def percentiles(arr: np.ndarray, qs) -> list[float]:
    """np.percentile(arr, qs) of a 1-D array (its default, linear method), float for float: the
    same order statistics (a partition at the indices it reads) and numpy's interpolation formula
    (_lerp: from the upper neighbour when the fraction is >= 1/2); NaN anywhere gives NaN. Without
    numpy's quantile machinery, which imports numpy.ma (~7 ms of a process's start) and costs
    ~20 us a call (the p90 standard error calls it per batch)."""
    n = len(arr)
    if n == 0:
        raise ValueError("percentiles of an empty array")
    at = []  # (lower index, upper index, fraction) per q, as numpy's _get_indexes and _get_gamma
    for q in qs:
        v = (n - 1) * (q / 100)
        lo = -1 if v >= n - 1 else math.floor(v)
        at.append((lo, lo + 1 if lo >= 0 else -1, v - lo))
    part = np.partition(arr, sorted({0, n - 1} | {i % n for lo, hi, _ in at for i in (lo, hi)}))
    if math.isnan(part.item(n - 1)):  # NaN sorts last
        return [math.nan] * len(at)
    out = []
    for lo, hi, t in at:
        a, b = part.item(lo % n), part.item(hi % n)
        d = b - a
        out.append(b - d * (1 - t) if t >= 0.5 else a + d * t)
    return out


def median(arr: np.ndarray) -> float:
    """np.median of a 1-D array without NaN, float for float (the middle value, or the mean of the
    two middle values, (a + b) / 2 as np.mean adds them); without what np.median imports (numpy.ma)."""
    n = len(arr)
    if n == 0:
        raise ValueError("median of an empty array")
    mid = n // 2
    if n % 2:
        return np.partition(arr, mid).item(mid)
    part = np.partition(arr, (mid - 1, mid))
    return (part.item(mid - 1) + part.item(mid)) / 2


@dataclass(frozen=True)
class Window:
    """The measured part of a run (simulated seconds): requests that arrive in [start_s, end_s)
    and tokens emitted in (start_s, end_s]; `last_arrival_s` ends the run's arrivals."""

    start_s: float
    end_s: float
    last_arrival_s: float
    requests: int  # requests arriving in the window

    @property
    def length_s(self) -> float:
        return max(self.end_s - self.start_s, 1e-12)

    def holds(self, t: np.ndarray) -> np.ndarray:
        """Mask of arrival times inside the window."""
        return (t >= self.start_s) & (t < self.end_s)


@dataclass(frozen=True)
class Stability:
    """Whether every pool keeps up with its arrivals across the window."""

    stable: bool
    saturated: tuple[str, ...] = ()  # pools whose queue grows, fastest first
    growth: dict[str, float] = field(default_factory=dict)  # queue slope / offered rate per pool
    converged: bool = True  # the warm-up ended in the first half of the run

    def describe(self) -> str:
        """One line for people: which pool saturates and how fast its queue grows."""
        if self.stable:
            return "stable" if self.converged else "stable so far, but the run never settled (run longer)"
        parts = [f"{p} queue grows by {self.growth[p]:.0%} of the arrival rate" for p in self.saturated]
        return "UNSTABLE: " + "; ".join(parts)


def _counts(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Requests in [start, end) at each time t (NaN start: never entered; NaN end: still there)."""
    s = np.sort(starts[np.isfinite(starts)])
    e = np.sort(ends[np.isfinite(starts) & np.isfinite(ends)])
    return np.searchsorted(s, t, side="right") - np.searchsorted(e, t, side="right")


def mser_truncation(x: np.ndarray, batch: int = MSER_BATCH) -> tuple[int, bool]:
    """MSER-b: (samples to drop, converged). Batch means of `batch` samples; the drop d minimises
    sum((y - mean(y[d:]))^2) / (n - d)^2 over d < n / 2 (batch units); converged when the minimum
    lies in the first half."""
    n = len(x) // batch
    if n < 4:
        return 0, False
    y = x[: n * batch].reshape(n, batch).mean(axis=1)
    # suffix sums give every truncated variance in O(n)
    s1, s2 = np.cumsum(y[::-1])[::-1], np.cumsum((y * y)[::-1])[::-1]
    k = np.arange(n, 0, -1, dtype=float)  # items left after dropping d
    mser = (s2 - s1 * s1 / k) / (k * k)
    half = n // 2
    d = int(np.argmin(mser[:half + 1]))
    return d * batch, d < half


def _trend(t: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(least-squares slope of q over t, std of q around that line)."""
    if len(t) < 3:
        return 0.0, 0.0
    tc, qc = t - t.mean(), q - q.mean()
    slope = dot(tc, qc) / max(dot(tc, tc), 1e-300)
    return slope, float(np.std(qc - slope * tc))


def queues(arrival, prefill_done, first_token, disaggregated: bool) -> dict[str, tuple]:
    """(entered, served) timestamps of each pool's queue."""
    if disaggregated:
        return {"prefill": (arrival, prefill_done), "decode": (prefill_done, first_token)}
    return {"aggregated": (arrival, first_token)}


def measure(arrival, prefill_done, first_token, finish, disaggregated: bool,
            closed_loop: bool) -> tuple[Window, Stability]:
    """The window and the stability verdict of a run from its per-request timestamps. An unstable
    run's window runs to the last arrival (its throughput is what the pools serve while arrivals
    keep coming; its latencies mean nothing)."""
    t_end = float(np.nanmax(arrival))
    t = np.linspace(0.0, t_end, GRID)
    running = _counts(first_token, finish, t).astype(float)
    drop, converged = mser_truncation(running)
    start = float(t[drop])
    if np.isfinite(arrival).sum() - (arrival < start).sum() < MIN_WINDOW:  # too short to leave anything out
        drop, converged, start = 0, False, float(np.nanmin(arrival))
    stab = Stability(True, (), {}, converged) if closed_loop else \
        _stability(t[drop:], arrival, prefill_done, first_token, disaggregated, converged)
    after = arrival >= start
    cool = _cooldown(arrival, finish, after, (start + t_end) / 2) if stab.stable else 0.0
    end = max(t_end - cool, start + (t_end - start) / 2) if stab.stable else float(np.nextafter(t_end, np.inf))
    win = Window(start, end, t_end, int((after & (arrival < end)).sum()))
    if win.requests < MIN_WINDOW:  # the whole run, to its last finish
        last = float(np.nanmax(np.where(np.isfinite(finish), finish, arrival)))
        win = Window(start, float(np.nextafter(last, np.inf)), t_end, int(after.sum()))
        stab = dataclasses.replace(stab, converged=False)
    return win, stab


def _cooldown(arrival, finish, after: np.ndarray, mid_s: float) -> float:
    """COOLDOWN_Q percentile of E2E of the requests after the warm-up. In a run measured while
    arrivals go on (sim/simulator.Run.result) the latest ones are still running: then of those that
    arrived before `mid_s` (half-way), the ones still running counting as longer than any
    finished one (+inf when they reach the percentile: no cool-down leaves them out)."""
    e2e = finish - arrival
    if np.isnan(e2e[after]).any():
        early = after & (arrival < mid_s)
        e2e = np.where(np.isnan(finish), np.inf, e2e)[early]
    else:
        e2e = e2e[after]
    if not len(e2e):
        return 0.0
    with np.errstate(invalid="ignore"):  # between two +inf: NaN
        cool = percentiles(e2e, (COOLDOWN_Q,))[0]
    return cool if not np.isnan(cool) else np.inf


def _stability(ts: np.ndarray, arrival, prefill_done, first_token, disaggregated: bool, converged: bool) -> Stability:
    """Queue growth of each pool over the sample times `ts` as a share of the offered rate."""
    span = max(float(ts[-1] - ts[0]), 1e-12)
    offered = max(float(((arrival >= ts[0]) & (arrival <= ts[-1])).sum()) / span, 1e-12)
    growth, sat = {}, []
    for pool, (a, b) in queues(arrival, prefill_done, first_token, disaggregated).items():
        slope, noise = _trend(ts, _counts(a, b, ts).astype(float))
        growth[pool] = slope / offered
        if growth[pool] > GROWTH_TOL and slope * span > GROWTH_Z * noise:  # grows, by more than it wanders
            sat.append(pool)
    sat.sort(key=lambda p: -growth[p])
    return Stability(not sat, tuple(sat), growth, converged)
