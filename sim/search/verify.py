"""Simulator verification of planned deployments at steady state.

A probe simulates one deployment at one rate long enough to judge steady state
(sim/simulator.simulate_steady); it passes when every pool keeps up (stable) and the window's p90
TTFT and TPOT are Z_SE standard errors under the SLOs (a p90 within its noise of the SLO runs
again twice as long to decide). `max_rate` finds the highest rate that passes by bisection on
rate, as capacity studies do: it starts at the analytic estimate (a short pilot run first), and a
probe whose pool saturates (its queue grows, or the prefill pool serves fewer prompts per busy
second than arrive) bounds the search at UTIL_MAX of what that pool served. `confirm` runs a verified rate
again twice as long, and bisects below it if that fails (from `within_tol` of it).

`run_simulation` is the single call site of the simulator, so what-if studies can hand it
modified model / hardware / profile objects (`rackplan.sim.simulator.simulate_specs`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from rackplan.specs import SLO, Arrival, Scenario, Workload

from ..request_classes import class_misses

RATE_TOL = 0.03  # a bisection ends when the passing and failing rates (or the bound) are within 3%
# no pool is planned above this share of what it serves saturated: within 3% of saturation a queue's
# p90 wanders for longer than any run a planner can afford, so only a much longer run could vouch for it
UTIL_MAX = 0.97
STEP_DOWN, STEP_UP = 0.8, 1.15  # rate factors while only failing / only passing probes are known
MIN_SHARE = 0.2  # below this share of the estimated rate a deployment fails verification
MAX_PROBES = 8
PILOT = 4  # the first probe (at the estimate) starts with this fraction of the hinted run length
CONFIRM = 2  # the chosen deployment's verified rate is run again this many times as long
# a p90 passes when it is this many standard errors under its SLO (sim/metrics.p90_standard_error: batch
# means, floored by the run's effective samples, so a bursty tail near saturation gets the margin its few
# independent looks at the tail deserve)
Z_SE = 2.0
LONGER = 1  # a probe whose p90 is within its noise of the SLO runs again this many times, 2x longer each
SETTLE_E2E = 2.0  # a first probe's arrivals span this many estimated p90 E2E (a warm-started run settles fast)
# ... and hold at most this many requests: p90s of 100k requests have standard errors near 1%, and a run
# that has not settled or not decided by then goes on (sim/simulator.Run.result), paying only for what it adds
FIRST_MAX = 100_000
# requests of a probe's run at most (576 GPUs: ~100 MB of run state, 2 minutes of arrivals, ~8 lifetimes);
# `simulate` and `whatif` runs go on to simulator.MAX_STEADY
PROBE_MOST = 200_000
# live runs kept for confirmation hold at most this many requests x GPUs together: a run's state grows with
# both (its running sequences fill the decode seats; 150k requests on 576 GPUs: ~75 MB of peak RSS); a
# bisection drops a passing run beyond it at once (sim/search/front.py would drop it after the bisection
# anyway), so it is not held while the next probe runs
LIVE_REQUEST_GPUS = 150_000 * 72


def run_simulation(sc: Scenario, num_requests: int | None = None, seed: int | None = None, first: int | None = None,
                   precision: float | None = None, most: int | None = None, run=None):
    """A steady-state simulation of `plan` on `workload` (the one call site): a SimResult.
    `num_requests`: exactly that many requests, drained; None: as many as steady state needs
    (sim/simulator.simulate_steady), from `first` up to `most`, to `precision` when given,
    continuing `run` (a stream's sim/simulator.Run of this plan and workload) when given."""
    from ..simulator import MAX_STEADY, simulate_specs, simulate_steady

    if num_requests is not None:
        return simulate_specs(sc, num_requests=num_requests, seed=seed)
    return simulate_steady(sc, seed=seed, first=first, precision=precision, most=most or MAX_STEADY, run=run)


def open_run(sc: Scenario, seed: int | None):
    """A run of `plan` on `workload` that later probes at the same rate continue (None for closed
    loops, which rerun)."""
    from ..simulator import Run

    if sc.workload.arrival.kind == "concurrency":
        return None
    return Run(sc, seed)


def at_rate(workload: Workload, rate_rps: float) -> Workload:
    """The workload with Poisson arrivals at `rate_rps` (closed-loop workloads stay as they are)."""
    if workload.arrival.kind == "concurrency":
        return workload
    return replace(workload, arrival=Arrival(kind="poisson", rate=float(rate_rps)))


def _bounds(metrics: dict, key: str) -> tuple[float, float]:
    """(low, high) confidence bounds of a p90: Z_SE standard errors (sim/metrics.p90_standard_error)
    either side."""
    value = metrics.get(key, math.inf)
    se = metrics.get(key.replace("_s", "_se_s"), math.nan)
    half = Z_SE * se if math.isfinite(se) else 0.0
    return value - half, value + half


def slo_misses(metrics: dict, slo: SLO) -> dict[str, float]:
    """Seconds by which each p90's upper confidence bound exceeds its SLO (only the ones that miss):
    a probe passes only when the simulator's p90 is below the SLO by more than its noise."""
    out = {}
    for key, limit in (("ttft_p90_s", slo.ttft_p90_s), ("tpot_p90_s", slo.tpot_p90_s)):
        high = _bounds(metrics, key)[1]
        if not high <= limit:
            out[key] = high - limit
    return out | class_misses(metrics)  # each request class's own targets (sim/request_classes.py)


def _undecided(metrics: dict, slo: SLO) -> bool:
    """Some p90's confidence interval straddles its SLO (a longer run would decide)."""
    return any(lo <= limit < hi for (lo, hi), limit in ((_bounds(metrics, "ttft_p90_s"), slo.ttft_p90_s),
                                                        (_bounds(metrics, "tpot_p90_s"), slo.tpot_p90_s)))


@dataclass
class Probe:
    """One steady-state simulation at one rate."""

    rate_rps: float
    metrics: dict
    stable: bool
    saturated: tuple[str, ...]
    misses: dict[str, float]
    requests: int  # requests the run simulated
    work: int = 0  # requests + steps of every run this probe made (its CPU cost, deterministically)
    settled: int = 0  # requests of its first steady-state run (before any longer run to decide)
    judged: bool = True  # False: a pilot too short to vouch for a rate (it can only bound one)
    run: object = field(default=None, repr=False, compare=False)  # its live run, while a longer one may follow

    def release(self) -> None:
        """Drop the live run (no longer run goes on from this probe)."""
        if self.run is not None:
            self.run.close()
            self.run = None

    @property
    def passed(self) -> bool:
        return self.judged and self.stable and not self.misses

    @property
    def over_capacity(self) -> bool:
        """Saturated: a pool's queue grows, or the prefill pool served fewer prompts per busy second
        than arrived, by more than the arrivals' own noise (Z_SE standard errors of the window's
        Poisson count: a pool that batches whatever waits is busy all the time below saturation
        too, and then serves the offered rate give or take that noise); this sees a pool just past
        saturation before its queue has grown beyond the noise."""
        cap = self.metrics.get("prefill_capacity_rps", 0.0)
        margin = Z_SE / math.sqrt(max(self.metrics.get("window_requests", 1.0), 1.0))
        return not self.stable or 0.0 < cap < self.metrics.get("offered_rps", 0.0) * (1.0 - margin)

    @property
    def capacity_rps(self) -> float:
        """What the saturated pool serves (req/s; prefill: prompts per busy second of its
        instances): no rate at or above it is stable."""
        pool = self.saturated[0] if self.saturated else ("prefill" if self.over_capacity else "")
        key = {"prefill": "prefill_capacity_rps", "decode": "decode_served_rps"}.get(pool, "decode_served_rps")
        return float(self.metrics.get(key, self.rate_rps))

    def verdict(self) -> str:
        if not self.stable:
            return f"unstable ({', '.join(self.saturated)} saturates)"
        if not self.judged:
            return f"over capacity (the prefill pool serves {self.capacity_rps:.4g} req/s)"
        return "meets SLOs" if not self.misses else "misses " + ", ".join(self.misses)


@dataclass
class Check:
    """Outcome of verifying one deployment: the highest passing probe (or the last one)."""

    rate_rps: float
    metrics: dict
    passed: bool
    misses: dict[str, float] = field(default_factory=dict)
    probes: list[Probe] = field(default_factory=list)
    stable: bool = True
    requests: int = 0  # requests the reported probe simulated (plan.yaml: sim_requests)
    ceiling_rps: float = math.inf  # lowest failing rate found (the verified rate lies below it)
    given_up: bool = False  # stopped once the ceiling could not beat another deployment

    @property
    def runs(self) -> int:
        return len(self.probes)

    def release(self) -> None:
        """Drop every probe's live run."""
        for p in self.probes:
            p.release()

    @property
    def work(self) -> int:
        """Requests + steps simulated (the verification's deterministic cost)."""
        return sum(p.work for p in self.probes)

    def worst_miss(self, slo: SLO) -> tuple[str, float]:
        """(metric, relative excess) of the worst miss, for 'closest layout' messages."""
        if not self.misses:
            return ("stable", math.inf) if not self.stable else ("", 0.0)
        limits = {"ttft_p90_s": slo.ttft_p90_s, "tpot_p90_s": slo.tpot_p90_s,
                  **{k: self.metrics[k + "_limit"] for k in self.misses if k.startswith("class.")}}
        key = max(self.misses, key=lambda k: self.misses[k] / limits[k])
        return key, self.misses[key] / limits[key]


def probe(sc: Scenario, rate_rps: float, slo: SLO,
          num_requests: int | None, seed: int | None, first: int | None = None, longer: int = LONGER,
          most: int | None = None, run=None) -> Probe:
    """Simulate at `rate_rps` until steady state can be judged, and judge it; while a p90 is within
    its noise of the SLO, go on twice as long (`longer` times at most). `most`: requests of a
    steady-state run at most (default PROBE_MOST). `run`: a live run at this rate to continue
    (default: a new one); the probe keeps it (Probe.release drops it)."""
    workload = sc.workload
    most = most or PROBE_MOST
    wl = at_rate(workload, rate_rps)
    if run is None and num_requests is None:
        run = open_run(replace(sc, workload=wl), seed)
    before = run.work if run is not None else 0
    res = run_simulation(replace(sc, workload=wl), num_requests, seed, first, most=most, run=run)
    settled = int(res.metrics["num_requests"])
    for _ in range(longer if num_requests is None else 0):
        if not (res.stable and _undecided(res.metrics, slo)) or res.metrics["num_requests"] >= most:
            break
        res = run_simulation(replace(sc, workload=wl), None, seed, 2 * int(res.metrics["num_requests"]),
                             most=most, run=run)
    work = run.work - before if run is not None else _work(res)
    m = dict(res.metrics)
    if sc.plan.prefill_hardware:  # mixed hardware: each pool's draw at its own busy share (sim/search/pairs.py)
        from rackplan.economics import pool_busy_shares
        m.update({f"busy_share.{pool}": u for pool, (_, u) in pool_busy_shares(sc.plan, res.utilisation).items()})
    return Probe(rate_rps, m, res.stable, res.stability.saturated, slo_misses(m, slo), int(m["num_requests"]),
                 work, settled, run=run)


def _work(res) -> int:
    return int(res.metrics["num_requests"]) + sum(res.steps.values())


def _next_rate(lo: Probe | None, hi: float | None, last: Probe, bound_rps: float) -> float:
    if lo is not None and hi is not None:
        return math.sqrt(lo.rate_rps * hi)
    if lo is not None:  # up to the cost model's capacity first (unless the simulator passed it)
        up = lo.rate_rps * STEP_UP
        return min(up, bound_rps) if bound_rps > lo.rate_rps * (1.0 + RATE_TOL) else up
    if last.over_capacity:
        return UTIL_MAX * min(last.capacity_rps, last.rate_rps)
    return last.rate_rps * STEP_DOWN


def max_rate(sc: Scenario, est_rps: float, slo: SLO,
             num_requests: int | None = None, seed: int | None = None, first: int | None = None,
             bound_rps: float = math.inf, give_up_rps: float = 0.0, tol: float = RATE_TOL,
             longer: int = LONGER, max_probes: int = MAX_PROBES, pilot: int = PILOT,
             ceiling_rps: float | None = None, max_work: float = math.inf,
             give_up_tps: float = 0.0, most_rps: float = math.inf) -> Check:
    """The highest rate at which the simulator holds the SLOs, by bisection from `est_rps` until the
    passing and failing rates are within `tol`; `bound_rps` (the cost model's pool capacity) caps
    the first steps up. It stops early once the failing bound is at or below `give_up_rps` (a
    caller that only needs to know the deployment cannot beat another), and fails below MIN_SHARE
    of the estimate. A closed-loop workload is one probe at its own load. `first`: requests of the
    first probe; later ones span as many seconds of arrivals as the last passing probe did;
    `ceiling_rps`: a rate already known to fail. No rate above UTIL_MAX of what a saturated pool
    served passes. `max_work`: no probe starts once the work so far and the last probe's again would
    exceed it (a coarser bisection). `most_rps`: the highest rate the caller lets the simulator pass
    (sim/search/front.py: its capacity bound); once a passing probe's output tokens/s/GPU per req/s
    times that rate is at most `give_up_tps`, no rate can reach it and the bisection stops there
    (given up: the measured tokens per request, not the workload's mean, decide it)."""
    plan, workload = sc.plan, sc.workload
    lo, hi, probes, rate, given_up, cap = None, ceiling_rps, [], est_rps, False, math.inf
    span_s = (first or 0) / max(est_rps, 1e-12)
    while len(probes) < max_probes:
        first = round(span_s * rate) if span_s else None
        if first and not probes and pilot > 1 and num_requests is None:
            p = _piloted(sc, rate, slo, seed, first, pilot, longer)
        else:
            p = probe(sc, rate, slo, num_requests, seed, first, longer)
        probes.append(p)
        if p.passed and lo is not None:
            lo.release()  # only the highest passing probe's run may go on (confirm)
        elif not p.passed:
            p.release()
        if p.passed:  # lifetimes barely change with rate: keep a passing run's length in seconds
            span_s = p.settled / p.rate_rps
        if workload.arrival.kind == "concurrency":
            lo = p if p.passed else None
            break
        if p.passed:
            lo = p
            if p.requests * plan.gpus_used > LIVE_REQUEST_GPUS:
                p.release()  # too big to keep for a confirmation (memory): that reruns it from zero
        else:
            hi = min(hi or math.inf, rate)
        if p.over_capacity:  # a saturated pool's service rate caps the plan at UTIL_MAX of it
            cap = min(cap, UTIL_MAX * p.capacity_rps)  # (and a passing rate within `tol` under it ends the search)
            hi = min(math.inf if hi is None else hi, cap)
            if lo is not None and lo.rate_rps > cap:
                lo.release()
                lo = None
        if lo is not None and hi is not None and hi <= lo.rate_rps * (1.0 + tol):
            break
        if hi is not None and hi <= give_up_rps:
            given_up = True
            break
        if lo is not None and lo.metrics["output_tps_per_gpu"] / lo.rate_rps * min(most_rps, hi or math.inf) \
                <= give_up_tps:
            given_up = True
            break
        if sum(q.work for q in probes) + p.work > max_work:
            break
        rate = _next_rate(lo, hi, p, bound_rps)
        if lo is None and rate < MIN_SHARE * est_rps:
            break
    for q in probes:
        if q is not lo:
            q.release()
    best = lo or probes[-1]
    return Check(best.rate_rps, best.metrics, lo is not None, best.misses, probes, best.stable, best.requests,
                 hi if hi is not None else math.inf, given_up)


def _piloted(sc: Scenario, rate_rps: float, slo: SLO, seed: int | None,
             first: int, pilot: int, longer: int) -> Probe:
    """Estimates run hot: one run of first / `pilot` requests finds a saturating pool cheaply. A
    pilot that settled (warm-started runs mostly do: sim/warm.py) and whose p90s are clear of the
    SLOs by more than their noise is the probe; otherwise it is no verdict, and the probe runs at
    full length from `first` (its work counted)."""
    from ..simulator import MIN_STEADY, MIN_WINDOW_STEPS

    short = max(MIN_STEADY, first // pilot)
    if short >= first:
        return probe(sc, rate_rps, slo, None, seed, first, longer)
    p0 = probe(sc, rate_rps, slo, None, seed, short, 0, most=short)
    if p0.over_capacity and p0.metrics.get("window_steps", 0.0) >= MIN_WINDOW_STEPS:
        p0.judged = False
        return p0
    if p0.stable and p0.metrics.get("converged", 0.0) and not _undecided(p0.metrics, slo) \
            and p0.metrics.get("window_steps", 0.0) >= MIN_WINDOW_STEPS:
        return p0
    p = probe(sc, rate_rps, slo, None, seed, first, longer, run=p0.run)
    p.work += p0.work  # the pilot's run goes on: the probe's first `short` requests are the pilot's
    return p


def confirm(sc: Scenario, chk: Check, slo: SLO, seed: int | None,
            factor: int = CONFIRM) -> Check:
    """Run a verified rate again `factor` times as long: a queue near saturation can pass a short
    run by luck. The longer run's figures become the reported ones; when it fails, the bisection
    goes on below that rate with runs as long. A run already as long as a steady-state run gets
    (PROBE_MOST) stands."""
    if chk.requests >= PROBE_MOST:
        return chk
    live = next((q.run for q in chk.probes if q.run is not None and q.rate_rps == chk.rate_rps
                 and q.requests == chk.requests), None)  # go on from the verified run when it is still live
    p = probe(sc, chk.rate_rps, slo, None, seed, factor * chk.requests, 0, run=live)
    chk.release()
    p.release()
    if p.passed:
        return Check(p.rate_rps, p.metrics, True, {}, chk.probes + [p], True, p.requests, chk.ceiling_rps)
    below = max_rate(sc, within_tol(p.rate_rps), slo, None, seed, p.requests, pilot=1, ceiling_rps=p.rate_rps)
    below.probes[:0] = chk.probes + [p]
    return below


def within_tol(ceiling_rps: float, tol: float = RATE_TOL) -> float:
    """The lowest rate a bisection under a failing `ceiling_rps` may end on: a pass there ends it (the
    passing and failing rates are within `tol`), so a confirmation that fails bisects below it with
    one probe when that passes (UTIL_MAX x the ceiling, a hair below, took a second probe every time)."""
    r = ceiling_rps / (1.0 + tol)
    while ceiling_rps > r * (1.0 + tol):  # (the division rounds down for some rates)
        r = math.nextafter(r, math.inf)
    return r


def check_at(sc: Scenario, rate_rps: float, slo: SLO,
             num_requests: int | None = None, seed: int | None = None, first: int | None = None) -> Check:
    """One probe at a fixed rate (min-gpus / latency objectives serve a given load)."""
    p = probe(sc, rate_rps, slo, num_requests, seed, first)
    p.release()
    return Check(p.rate_rps, p.metrics, p.passed, p.misses, [p], p.stable, p.requests)


def first_requests(rate_rps: float, e2e_p90_s: float) -> int:
    """Requests of a first probe: arrivals over SETTLE_E2E estimated p90 E2E, at most FIRST_MAX
    (a run that needs more goes on: sim/simulator.Run.result)."""
    return min(int(math.ceil(rate_rps * SETTLE_E2E * e2e_p90_s)), FIRST_MAX)
