"""A plan for a day: the pools' instance counts per interval of a trace, each verified in the simulator.

The instance shapes come from a base plan (its layouts, router and SLOs); what changes over the day
is how many instances of each pool run. For every interval of `interval_s` the trace's request rate
(times `trace_scale`: a published trace is a sample of the service's traffic) is served by the
fewest instances the simulator shows meeting the SLOs (p90 TTFT and p90 TPOT below their SLOs by more
than their standard error, as the planner's verification requires: sim/search/verify.py; pools stable):
the busiest interval first, from the base plan's counts, then every other interval from the
peak's counts scaled by its rate, growing the pool that misses (TTFT or a saturated prefill pool:
prefill; TPOT or a saturated decode pool: decode) and then shrinking each pool while the SLOs still
hold. Each probe simulates `sim_requests` requests arriving Poisson at the interval's rate, their
lengths drawn from the interval's own trace rows (seeded): the interval at its steady state; a verdict
in doubt (a queue growing slightly, as a short run from empty pools shows, or a run that never
settled) is taken again on twice the requests, up to LONGEST times.

Transitions: an instance added at an interval boundary is started `start_s` earlier, so it serves
from the boundary on; those start-up GPU-seconds are counted. An instance removed at a boundary
stops taking requests there (its running requests finish on it; not counted). The static plan is the
largest count of each pool over the day, run all day: the plan sized for the peak.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np

from rackplan.specs import Plan, Scenario, SpecError, Workload
from rackplan.specs.fields import check, non_negative, positive

from ..workload import Requests

# Start-up of a Wide-EP instance, from scheduling to serving: a full cold start of vLLM serving the MoE
# Qwen3-235B-A22B (weights load, torch.compile, CUDA-graph capture) "can take close to ten minutes"
# (Baidu Intelligent Cloud Tech Hub, "How to Reduce Large-Model Inference Cold-Start to Seconds with
# vLLM Optimizations", 2025); for DeepSeek-V3 with DP attention + EP, SGLang warns that its DeepGEMM JIT
# pre-compile alone "may take a long time (typically 10-20 mins)" unless the kernels were compiled
# beforehand (sglang.compile_deep_gemm; its log line, e.g. sgl-project/sglang PR #15891). Ten minutes
# is taken: an instance whose kernels are cached (--start-s sets another).
WIDE_EP_START_S = 600.0
SCHEDULE_SALT = 23  # salt of the interval probes' draws (a stream apart from the workload's)
LONGEST = 8  # a probe in doubt runs again on 2x, 4x, 8x its requests at most
# a queue growing by this share of the arrivals is saturation beyond doubt; below it a 2,000-request run
# from empty pools can show growth that a longer one does not (6.3% measured on one DEP8 prefill pool at
# 37 req/s per instance that 4,000 requests showed stable: benchmarks/RESULTS.md, session 15 sessions)
CLEAR_GROWTH = 0.25
MAX_GROWTH = 8  # a pool grows to at most this many times its base count before an interval is called infeasible
POOLS = ("prefill", "decode", "aggregated")


@dataclass(frozen=True)
class Interval:
    """One interval of the day: its load, the instances serving it and what the simulator measured."""

    start_s: float  # seconds since the trace's first request
    end_s: float
    requests: int  # trace rows arriving in it
    rate_rps: float  # served rate: rows / length x trace_scale
    prefill: int = 0  # instances of each pool (0: the plan has no such pool)
    decode: int = 0
    aggregated: int = 0
    gpus: int = 0
    ttft_p90_s: Optional[float] = None  # simulated (its probe run); None: the run was unstable
    tpot_p90_s: Optional[float] = None
    meets_slo: bool = False

    def counts(self) -> dict[str, int]:
        return {p: getattr(self, p) for p in POOLS}


@dataclass(frozen=True)
class Schedule:
    """Instance counts per interval of a trace, for the base plan's shapes, and what they assume."""

    name: str
    base: Plan  # shapes, router and SLOs
    trace: str
    interval_s: float
    trace_scale: float = 1.0  # the trace is a 1 / trace_scale sample of the traffic planned for
    start_s: float = WIDE_EP_START_S  # instance start-up before the interval it is added for
    sim_requests: int = 2000  # requests per interval probe
    seed: int = 0
    intervals: tuple[Interval, ...] = ()

    def __post_init__(self):
        positive(self.interval_s, "interval_s")
        positive(self.trace_scale, "trace_scale")
        non_negative(self.start_s, "start_s")
        positive(self.sim_requests, "sim_requests")
        check(len(self.base.prefill) + len(self.base.aggregated) == 1 and len(self.base.decode) <= 1, "base",
              "a plan with one prefill and one decode layout, or one aggregated layout (a schedule counts one "
              "shape per pool)", self.base.summary)
        check(not self.base.colocated, "base.colocated", "false (colocated pools share GPUs: their counts are tied)")


def parse_interval(text: str) -> float:
    """'1h', '30m', '900s', '900' -> seconds (a positive finite duration)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(h|m|min|s)?\s*", str(text))
    value = float(m.group(1)) * {"h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0, None: 1.0}[m.group(2)] if m else 0.0
    if not math.isfinite(value) or value <= 0:
        raise SpecError("plan", "--schedule", "an interval like 1h, 30m or 900s", text)
    return value


def gpus_per_instance(base: Plan) -> dict[str, int]:
    return {p: (getattr(base, p)[0].gpus if getattr(base, p) else 0) for p in POOLS}


def with_counts(base: Plan, counts: dict[str, int]) -> Plan:
    """The base plan with `counts` instances of each pool (its GPU budget: what they use)."""
    pools = {p: tuple(replace(lay, replicas=counts[p]) for lay in getattr(base, p)) for p in POOLS}
    used = sum(lay.total_gpus for pool in pools.values() for lay in pool)  # (not colocated: Schedule checks)
    return replace(base, **pools, num_gpus=used, predicted={})


def trace_rows(trace, interval_s: float) -> list[np.ndarray]:
    """Indices of the trace's rows per interval (the last one ends at the last arrival)."""
    if trace.arrival_s is None:
        raise SpecError("plan", "--trace", "a trace with arrival times (azure, burstgpt, mooncake, jsonl)")
    arr = np.asarray(trace.arrival_s, dtype=float)
    k = np.floor(arr / interval_s).astype(np.int64)
    return [np.nonzero(k == i)[0] for i in range(int(k.max()) + 1)]


def interval_requests(trace, rows: np.ndarray, rate_rps: float, n: int, seed: int, index: int) -> Requests:
    """`n` requests Poisson at `rate_rps`, lengths drawn (with replacement) from the interval's trace rows."""
    rng = np.random.default_rng([SCHEDULE_SALT, seed, index])
    pick = rows[rng.integers(0, len(rows), size=n)]
    isl, osl = np.asarray(trace.isl)[pick], np.asarray(trace.osl)[pick]
    arrival = np.cumsum(rng.exponential(1.0 / rate_rps, size=n))
    return Requests(arrival, isl.astype(np.int64), osl.astype(np.int64), np.zeros(n, dtype=np.int64))


@dataclass(frozen=True)
class Probe:
    ok: bool
    ttft_p90_s: Optional[float]  # None: unstable
    tpot_p90_s: Optional[float]
    grow: tuple[str, ...]  # pools that would fix a miss


def probe(plan: Plan, specs, draw: Callable[[int], Requests], n: int, seed: int) -> Probe:
    """Simulate `draw(n)`, the interval's requests, on `plan`: does it meet its SLOs, and which pool
    misses. A verdict in doubt (a queue growing by less than CLEAR_GROWTH of the arrivals, which a
    short run from empty pools can show, or a run that never settled) is taken again on twice the
    requests, up to LONGEST x `n`."""
    from ..simulator import simulate_requests
    from .verify import slo_misses

    model, hw, profile, wl = specs
    for k in range(LONGEST.bit_length()):
        res = simulate_requests(Scenario(plan, model, hw, wl, profile), draw(n << k), seed)
        growth = max(res.stability.growth.values(), default=0.0)
        if (res.stable and res.stability.converged) or (not res.stable and growth >= CLEAR_GROWTH):
            break
    m = res.metrics
    ttft, tpot = m["ttft_p90_s"], m["tpot_p90_s"]
    pool_of = {"ttft_p90_s": "prefill" if plan.disaggregated else "aggregated",
               "tpot_p90_s": "decode" if plan.disaggregated else "aggregated"}
    # a p90 passes only below its SLO by more than its noise (the planner's verification rule)
    grow = set(res.stability.saturated) if not res.stable else {pool_of[k] for k in slo_misses(m, plan.slo)}
    ok = res.stable and not grow
    return Probe(ok, ttft if res.stable else None, tpot if res.stable else None, tuple(p for p in POOLS if p in grow))


def size_interval(base: Plan, start: dict[str, int], run: Callable[[dict], Probe]) -> tuple[dict, Probe]:
    """The fewest instances from `start` (grow the missing pools, then shrink each while it holds)."""
    seen: dict[tuple, Probe] = {}
    limit = {p: MAX_GROWTH * max(lay.replicas for lay in getattr(base, p)) if getattr(base, p) else 0 for p in POOLS}

    def test(c):
        key = tuple(c[p] for p in POOLS)
        if key not in seen:
            seen[key] = run(c)
        return seen[key]

    counts = dict(start)
    res = test(counts)
    while not res.ok:
        grow = [p for p in (res.grow or ()) if counts[p] < limit[p]]
        if not grow:
            return counts, res  # infeasible within MAX_GROWTH: reported as missing its SLOs
        counts = {p: counts[p] + (p in grow) for p in POOLS}
        res = test(counts)
    for pool in POOLS:
        while counts[pool] > 1:
            fewer = {**counts, pool: counts[pool] - 1}
            r = test(fewer)
            if not r.ok:
                break
            counts, res = fewer, r
    return counts, res


def plan_schedule(base: Plan, specs, trace, trace_path: str, interval_s: float, trace_scale: float = 1.0,
                  start_s: float = WIDE_EP_START_S, sim_requests: int = 2000, seed: int = 0, name: str = "schedule",
                  progress: Optional[Callable[[], None]] = None) -> Schedule:
    """The schedule of `base`'s shapes over `trace` (a sim/traces.Trace read from `trace_path`); `specs`:
    (model, hardware, profile, workload naming the trace)."""
    rows = trace_rows(trace, interval_s)
    rates = [len(r) / interval_s * trace_scale for r in rows]
    gpus = gpus_per_instance(base)
    base_counts = {p: (getattr(base, p)[0].replicas if getattr(base, p) else 0) for p in POOLS}

    def sized(i: int, start: dict[str, int]) -> Interval:
        t0 = i * interval_s
        t1 = min((i + 1) * interval_s, float(np.nextafter(trace.arrival_s[-1], np.inf)))
        if not len(rows[i]):  # no request: one instance of each pool stays up
            c = {p: min(1, base_counts[p]) for p in POOLS}
            return Interval(t0, t1, 0, 0.0, **c, gpus=sum(c[p] * gpus[p] for p in POOLS), ttft_p90_s=0.0,
                            tpot_p90_s=0.0, meets_slo=True)
        draw = lambda n: interval_requests(trace, rows[i], rates[i], n, seed, i)  # noqa: E731
        c, pr = size_interval(base, start, lambda cc: probe(with_counts(base, cc), specs, draw, sim_requests, seed))
        if progress:
            progress()
        return Interval(t0, t1, len(rows[i]), rates[i], **c, gpus=sum(c[p] * gpus[p] for p in POOLS),
                        ttft_p90_s=pr.ttft_p90_s, tpot_p90_s=pr.tpot_p90_s, meets_slo=pr.ok)

    peak = int(np.argmax(rates))
    out = {peak: sized(peak, base_counts)}
    peak_counts = out[peak].counts()
    for i in range(len(rows)):
        if i not in out:
            share = rates[i] / rates[peak]
            start = {p: max(1, math.ceil(peak_counts[p] * share)) if base_counts[p] else 0 for p in POOLS}
            out[i] = sized(i, start)
    return Schedule(name, base, trace_path, interval_s, trace_scale, start_s, sim_requests, seed,
                    tuple(out[i] for i in range(len(rows))))


def gpu_hours(s: Schedule) -> dict[str, float]:
    """GPU-hours of the schedule (instances x GPUs x interval, plus start-ups of added instances) and of
    the static plan (each pool's largest count, all day), and the share saved."""
    gpus = gpus_per_instance(s.base)
    run = sum(iv.gpus * (iv.end_s - iv.start_s) for iv in s.intervals) / 3600.0
    starts = sum(max(0, b.counts()[p] - a.counts()[p]) * gpus[p]
                 for a, b in zip(s.intervals, s.intervals[1:]) for p in POOLS) * s.start_s / 3600.0
    peak = {p: max(iv.counts()[p] for iv in s.intervals) for p in POOLS}
    span = (s.intervals[-1].end_s - s.intervals[0].start_s) / 3600.0
    static = sum(peak[p] * gpus[p] for p in POOLS) * span
    total = run + starts
    return {"schedule": total, "running": run, "startups": starts, "static": static,
            "static_gpus": float(sum(peak[p] * gpus[p] for p in POOLS)), "saved": static - total,
            "saved_share": (static - total) / static if static else 0.0}


def transitions(s: Schedule) -> list[str]:
    """One line per boundary where a pool's count changes: what starts (when) or stops."""
    out, gpus = [], gpus_per_instance(s.base)
    for a, b in zip(s.intervals, s.intervals[1:]):
        at = f"t = {b.start_s / 3600:.2f} h"
        for p in POOLS:
            d = b.counts()[p] - a.counts()[p]
            if d > 0:
                out.append(f"{at}: start {d} {p} instance(s) at {(b.start_s - s.start_s) / 3600:.2f} h "
                           f"({s.start_s:.0f} s start-up, {d * gpus[p]} GPUs)")
            elif d < 0:
                out.append(f"{at}: stop {-d} {p} instance(s) (they finish their running requests)")
    return out


def verify(s: Schedule, specs, trace, progress: Optional[Callable[[], None]] = None) -> list[Interval]:
    """Simulate every interval of the schedule again (the same seeded draws): what each one measures."""
    rows = trace_rows(trace, s.interval_s)
    if len(rows) != len(s.intervals):
        raise SpecError(s.name, "intervals", f"{len(rows)} intervals of {s.interval_s:g} s over {s.trace}",
                        len(s.intervals))
    out = []
    for i, iv in enumerate(s.intervals):
        if iv.requests:
            draw = lambda n, i=i, iv=iv: interval_requests(trace, rows[i], iv.rate_rps, n, s.seed, i)  # noqa: E731
            pr = probe(with_counts(s.base, iv.counts()), specs, draw, s.sim_requests, s.seed)
            iv = replace(iv, ttft_p90_s=pr.ttft_p90_s, tpot_p90_s=pr.tpot_p90_s, meets_slo=pr.ok)
        out.append(iv)
        if progress:
            progress()
    return out


def trace_workload(path: str) -> Workload:
    """The trace as a workload (its name in the simulator's results)."""
    from rackplan.specs import Arrival, LengthDist

    return Workload(name=f"trace:{path}", arrival=Arrival(kind="trace"), isl=LengthDist(kind="trace"),
                    osl=LengthDist(kind="trace"), trace=path)

