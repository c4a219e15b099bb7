"""Steady-state verification of a Pareto front (throughput objective): which front points the
simulator checks, how hard, and in what order.

Front points go best cost-model capacity bound first; each one's highest rate that holds the SLOs
is found by bisection (verify.max_rate), and a point whose bound (BOUND_SLACK over the cost
model's pool capacity) cannot beat the best verified tokens/s/GPU so far is not simulated (branch
and bound; the report says so), nor is a bisection pursued once it cannot: once its ceiling at the
workload's mean tokens per request, or its capacity bound at the tokens per request its passing probe
measured, is at most the best (a probe's figure is what the choice compares). The best verified
point then runs again twice as long (verify.confirm); a skipped point whose bound that moved the
best below is verified after all. Up to COVER of the skipped points, spread
over the front, are verified more coarsely while their simulated work stays under COVER_WORK (and under
COVER_SHARE of what verifying the contenders simulated), so
the report shows the trade-off the simulator sees. `plan_of(candidate)` builds the plan to
simulate; `req` is the planner's Request.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rackplan.specs import Scenario, Workload

from .combine import Candidate
from .verify import LIVE_REQUEST_GPUS, UTIL_MAX, Check, confirm, first_requests, max_rate

BOUND_SLACK = 0.05  # the simulator may beat the cost model's mean-shape capacity by this much
# front points verified besides the contenders (spread over the front) while their simulated requests +
# steps stay under COVER_WORK, each to COVER_TOL in at most COVER_PROBES probes
COVER, COVER_TOL, COVER_PROBES, COVER_WORK = 4, 0.10, 4, 400_000
# ... and under this share of what verifying the contenders simulated: points that cannot change the plan
# never cost more than deciding it did (H200 32 GPUs: 3 x TP8-EP8 decode would have tripled it); a cover
# point's bisection stops before a probe that would take it past what is left
COVER_SHARE = 0.5


@dataclass
class Verified:
    """A front point and what the simulator made of it. `check` is None when the simulator is
    disabled (the estimate stands, marked as such) or when branch and bound skipped the point
    (`skipped` says why; never chosen)."""

    cand: Candidate
    check: Check | None
    skipped: str = ""

    @property
    def simulated(self) -> bool:
        return self.check is not None

    @property
    def passed(self) -> bool:
        return self.check.passed if self.check is not None else not self.skipped

    @property
    def rate_rps(self) -> float:
        return self.check.rate_rps if self.check else self.cand.rate_rps

    @property
    def tps_gpu(self) -> float:
        """Output tokens/s per GPU: measured in the simulator's window, else the estimate."""
        if self.check is not None:
            return float(self.check.metrics["output_tps_per_gpu"])
        return self.cand.tps_gpu

    @property
    def tps_user(self) -> float:
        if self.check is not None and math.isfinite(self.check.metrics.get("tps_per_user", math.nan)):
            return float(self.check.metrics["tps_per_user"])
        return self.cand.tps_user

    @property
    def gap(self) -> float:
        """Verified tokens/s/GPU against the estimate (-0.3: 30% below)."""
        return self.tps_gpu / max(self.cand.tps_gpu, 1e-12) - 1.0

    def verdict(self) -> str:
        if self.skipped:
            return "not simulated: " + self.skipped
        if self.check is None:
            return "estimate only"
        if self.check.passed:
            return "verified" if not self.check.given_up else \
                f"verified at {self.check.rate_rps:.4g} req/s, not refined higher: it cannot beat the winner"
        last = self.check.probes[-1]
        if self.check.given_up:
            return f"not refined: {last.verdict()} at {self.check.rate_rps:.4g} req/s, so it cannot beat the winner"
        if last.passed:  # the probes ran out with passing rates only above a saturated pool's bound
            return (f"unresolved: meets SLOs at {last.rate_rps:.4g} req/s, but above {UTIL_MAX:.0%} of what a "
                    f"saturated pool served, after {self.check.runs} probes")
        return "fails: " + last.verdict()


def verify_front(req, points: list[Candidate], plan_of) -> list[Verified]:
    """Verify the front points (module docstring); in front order."""
    osl_p90 = p90_output_length(req.workload)
    order = sorted(points, key=lambda c: (-c.capacity_tps_gpu, c.sort_key()))
    advance = req.progress("verify front", len(order)) if req.progress else (lambda: None)
    best, out, done = 0.0, {}, set()
    for c in order:
        if _bound(c) <= best:
            out[id(c)] = Verified(c, None, "skipped")
        else:
            out[id(c)] = Verified(c, _max_rate(req, plan_of, c, osl_p90, best))
            if out[id(c)].passed:
                best = max(best, out[id(c)].tps_gpu)
            _keep_best_run(points, out)
        advance()
    _confirm_best(req, plan_of, points, out, done)
    while redo := [c for c in order if out[id(c)].skipped and _bound(c) > _best(points, out)]:
        for c in redo:  # the confirmation moved the best below their bound: they may win after all
            out[id(c)] = Verified(c, _max_rate(req, plan_of, c, osl_p90, _best(points, out)))
            _keep_best_run(points, out)
        _confirm_best(req, plan_of, points, out, done)
    best = _best(points, out)
    for c in points:
        if out[id(c)].skipped:
            out[id(c)] = Verified(c, None, f"its capacity bound ({_bound(c):,.0f} tok/s/GPU) is below the "
                                  f"verified {best:,.0f}")
    work = 0
    budget = min(COVER_WORK, COVER_SHARE * sum(v.check.work for v in out.values() if v.check is not None))
    for c in spread([c for c in points if out[id(c)].skipped], COVER):
        if work + COVER_PROBES * _probe_work(c, first_probe(c, c.rate_rps, osl_p90)) > budget:
            continue  # too many steps for a point that cannot win (e.g. batch 1 on many instances)
        out[id(c)] = Verified(c, _max_rate(req, plan_of, c, osl_p90, tol=COVER_TOL, longer=0,
                                           max_probes=COVER_PROBES, max_work=budget - work))
        work += out[id(c)].check.work
        out[id(c)].check.release()
    for v in out.values():
        if v.check is not None:
            v.check.release()
    return [out[id(c)] for c in points]


def verify_fixed(objective: str, points: list[Candidate], run, speed_bound, workers: int = 1) -> list[Verified]:
    """Fixed-load objectives (min-gpus, latency): each point is probed once at the target load, in
    the order it could win, and only while it still can: min-gpus fewest GPUs first, stopping after
    the first GPU count with a passing point (exact); latency fastest `speed_bound(c)` first (the
    most tokens/s/user the simulator may find for c), stopping once no bound left reaches the best
    verified tokens/s/user. `run(cands)` probes a batch (up to `workers` at a time, in parallel);
    a point probed in a batch after the best already ruled it out counts as skipped, so the
    verified set does not depend on `workers`. In front order."""
    if objective == "min-gpus":
        order = sorted(points, key=lambda c: (c.gpus, c.sort_key()))
        def can_win(c, best):
            return best is None or c.gpus <= best.cand.gpus
        why = "a deployment with fewer GPUs meets the SLOs at the target load"
    else:
        order = sorted(points, key=lambda c: (-speed_bound(c), c.sort_key()))
        def can_win(c, best):
            return best is None or speed_bound(c) >= best.tps_user
        why = "its cost-model speed bound is below the verified tokens/s/user of the winner"
    out, best, i = {}, None, 0
    while i < len(order) and can_win(order[i], best):
        batch = []
        while i < len(order) and len(batch) < max(1, workers) and can_win(order[i], best):
            batch.append(order[i])
            i += 1
        for c, chk in zip(batch, run(batch), strict=True):
            if not can_win(c, best):
                continue
            out[id(c)] = v = Verified(c, chk)
            if v.passed and (best is None or _fixed_key(objective, v) > _fixed_key(objective, best)):
                best = v
    return [out.get(id(c)) or Verified(c, None, why) for c in points]


def _fixed_key(objective: str, v: Verified):
    """planner.choose's order for a fixed-load objective (larger wins)."""
    if objective == "min-gpus":
        return (-v.cand.gpus, round(v.tps_user, 6))
    return (round(v.tps_user, 6), round(v.tps_gpu, 6))


def _keep_best_run(points: list[Candidate], out: dict) -> None:
    """The best passing points keep their verified runs live (what verify.confirm goes on with;
    the runner-up is confirmed when the best falls below it), best first while their requests
    stay within LIVE_REQUEST_GPUS (memory); every other point's run is dropped (a confirmation then
    runs afresh: the same figures, sim/simulator.Run.result)."""
    ok = [c for c in points if id(c) in out and out[id(c)].check is not None and out[id(c)].passed]
    ok.sort(key=lambda c: (-round(out[id(c)].tps_gpu, 6), c.sort_key()))
    keep, held = set(), 0
    for c in ok:
        held += out[id(c)].check.requests * c.gpus
        if held > LIVE_REQUEST_GPUS:
            break
        keep.add(id(c))
    for c in points:
        if id(c) in out and out[id(c)].check is not None and id(c) not in keep:
            out[id(c)].check.release()


def _bound(c: Candidate) -> float:
    """The most tokens/s/GPU the simulator may find for `c` (BOUND_SLACK over its capacity)."""
    return c.capacity_tps_gpu * (1.0 + BOUND_SLACK)


def _best(points: list[Candidate], out: dict) -> float:
    return max((out[id(c)].tps_gpu for c in points if out[id(c)].passed), default=0.0)


def _probe_work(c: Candidate, first: int) -> float:
    """A probe's requests + decode steps, before running it: each step advances the operating
    batch of every DP rank (at least one sequence) by the acceptance length."""
    from ..simulator import MIN_STEADY

    lay = (c.decode or c.aggregated)[0]
    acc = lay.tokens_per_step
    n = max(MIN_STEADY, first)
    return n * (1.0 + c.osl / (acc * max(1.0, c.batch_per_rank * lay.dp)))


def _confirm_best(req, plan_of, points: list[Candidate], out: dict, done: set) -> None:
    """The best verified point runs again, longer (verify.confirm); if that moves it below another
    point, that one is confirmed in turn (each point once: `done`). Not with a fixed --sim-requests."""
    while req.sim_requests is None:
        ok = [c for c in points if out[id(c)].passed and id(c) not in done]
        if not ok:
            return
        c = max(ok, key=lambda c: (round(out[id(c)].tps_gpu, 6), c.sort_key()))
        if out[id(c)].tps_gpu < max((out[id(d)].tps_gpu for d in points if id(d) in done and out[id(d)].passed),
                                    default=0.0):
            return
        done.add(id(c))
        out[id(c)] = Verified(c, confirm(Scenario(plan_of(c), req.model, req.hw, req.workload, req.profile),
                                         out[id(c)].check, req.slo, req.seed))


def _max_rate(req, plan_of, c: Candidate, osl_p90: float, beat_tps: float = 0.0, **kw) -> Check:
    """verify.max_rate of `c`, given up once it cannot beat `beat_tps` (the best verified tokens/s/GPU):
    its ceiling at the workload's mean tokens per request, or its capacity bound (BOUND_SLACK over
    the cost model's, the rate branch and bound trusts) at the tokens per request it was measured at."""
    return max_rate(Scenario(plan_of(c), req.model, req.hw, req.workload, req.profile), min(c.rate_rps, c.capacity_rps),
                    req.slo, req.sim_requests, req.seed, first_probe(c, c.rate_rps, osl_p90), bound_rps=c.capacity_rps,
                    give_up_rps=beat_tps * c.gpus / c.osl, give_up_tps=beat_tps,
                    most_rps=c.capacity_rps * (1.0 + BOUND_SLACK), **kw)


def p90_output_length(workload: Workload) -> float:
    """p90 output length of the workload's requests (for run lengths): np.percentile's figure, without
    the numpy.ma import of its quantile machinery (sim/steady.py `percentiles`)."""
    from ..steady import percentiles
    from ..workload import make_requests

    return float(percentiles(make_requests(workload, min(workload.num_requests, 4000)).osl, (90,))[0])


def first_probe(c: Candidate, rate: float, osl_p90: float) -> int:
    """Requests of a first probe: a few estimated p90 E2E of arrivals."""
    return first_requests(rate, c.ttft_p90_s + osl_p90 * c.tpot_s)


def spread(items: list, k: int) -> list:
    """At most k items spread evenly over the list (ends included)."""
    if len(items) <= k:
        return items
    idx = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)})
    return [items[i] for i in idx]


