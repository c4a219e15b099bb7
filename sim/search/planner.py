"""The planning pipeline: enumerate -> memory filter -> analytic estimate -> Pareto front ->
steady-state verification in the simulator -> choice by objective among what passed.

Verification: the throughput objective bisects each front point's rate in the simulator, with
branch and bound over the front (sim/search/front.py); fixed-load objectives (min-gpus,
latency) probe every point once at the target load. The figures reported are the simulator's;
the estimate is shown beside them.

Pricing and fixed-load probes run over a process pool (`workers`); the bisections run in a
fixed order; every list is sorted by a deterministic key before use, so the plan does not depend
on the number of workers.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Literal

from rackplan.interrupts import process_map
from rackplan.specs import SLO, HardwareSpec, Layout, ModelSpec, Plan, Profile, Scenario, Workload

from . import combine, economy, front, pairs
from . import space as sp
from .combine import Candidate, Setting
from .estimate import Pricer, price_aggregated, price_decode, price_prefill, traffic_of
from .front import Verified
from .pareto import Decimated, StreamingFront, thin
from .verify import check_at

Objective = Literal["throughput", "min-gpus", "latency", "cost", "power", "goodput"]
OBJECTIVES = ("throughput", "min-gpus", "latency", "cost", "power", "goodput")
AT_CAPACITY = ("throughput", "cost", "power")  # objectives that plan at the highest rate holding the SLOs
FRONT_THIN = 0.03  # front points within 3% of a neighbour on both axes are not simulated separately
SAMPLE = 2000  # estimated deployments kept for the report besides the front (a deterministic sample)


class NoFeasiblePlan(Exception):
    """No layout meets the SLOs (exit code 3, distinct from bad input's 2)."""

    exit_code = 3


@dataclass
class Request:
    """Everything one planning run needs. `*_ref` are the names or paths written into plan.yaml."""

    model: ModelSpec
    hw: HardwareSpec
    profile: Profile
    workload: Workload
    num_gpus: int
    slo: SLO
    model_ref: str
    hw_ref: str
    workload_ref: str
    profile_ref: str | None = None
    objective: Objective = "throughput"
    target_rps: float | None = None  # min-gpus / latency: the load to serve (default: workload's)
    space: sp.SearchSpace = field(default_factory=sp.SearchSpace)
    workers: int = 1
    sim_requests: int | None = None  # requests per simulator check (None: sized per point)
    seed: int | None = None
    simulate: bool = True
    max_checks: int = 48  # cap on simulated front points (spread evenly over the front)
    progress: Callable | None = None  # progress(stage, total) -> advance() callable, or None
    prices: object = None  # rackplan.economics.Prices (None: the hardware's list price; sim/search/economy.py)
    power_mw: float | None = None  # cost / power objectives: facility power budget (sim/search/economy.py)
    prefill_side: object = None  # a mixed-hardware pair's prefill kind (sim/search/pairs.PrefillSide), else None


@dataclass
class Search:
    """What the estimate stage keeps of the streamed candidates: the objective's Pareto front, a
    deterministic sample of the others (for the report) and how many there were."""

    front: list[Candidate]
    sample: list[Candidate]
    count: int


@dataclass
class Result:
    request: Request
    num_layouts: int
    candidates: list[Candidate]  # the front and a sample of the other estimated deployments
    num_candidates: int  # estimated deployments meeting the SLOs
    front: list[Candidate]
    verified: list[Verified]
    winner: Verified
    plan: Plan
    timings: dict[str, float]
    simulated: bool
    space_notes: list[str] = field(default_factory=list)  # shapes the search space skipped, and why


# -- process-pool workers: specs are set once per process --------------------------------------
_W: dict = {}


def _init(model, hw, prof, traffic, grid):
    _W.update(pricer=Pricer(model, hw, prof, traffic.skew, ops=False), traffic=traffic, grid=grid)


def _price(task: tuple[str, Layout]):
    kind, lay = task
    pr, tr, grid = _W["pricer"], _W["traffic"], _W["grid"]
    if kind == "prefill":
        return price_prefill(pr, lay, tr)
    if kind == "decode":
        return price_decode(pr, lay, tr, grid)
    return price_aggregated(pr, lay, tr, grid)


def _probe(task):
    plan, model, hw, workload, prof, rate, slo, n, seed, first = task
    return check_at(Scenario(plan, model, hw, workload, prof), rate, slo, n, seed, first)


def _pmap(fn, tasks: list, req: Request, init_args: tuple, stage: str, advance=None) -> list:
    """Ordered map over a process pool (inline for one worker), with an optional progress bar (a
    new one for `stage`, or the `advance` of one already shown)."""
    if advance is None:
        advance = req.progress(stage, len(tasks)) if req.progress else (lambda: None)
    if req.workers <= 1 or len(tasks) < 2:
        _init(*init_args)
        out = []
        for t in tasks:
            out.append(fn(t))
            advance()
        _W.clear()  # (the pricing stage's step models and memos: nothing later reads them)
        return out
    out = []
    for r in process_map(fn, tasks, req.workers, _init, init_args, chunksize=max(1, len(tasks) // (8 * req.workers))):
        out.append(r)
        advance()
    return out


# -- pipeline ------------------------------------------------------------------------------------
def _tasks(req: Request) -> list[tuple[str, Layout]]:
    m, hw, n, s = req.model, req.hw, req.num_gpus, req.space
    need = sp.longest(req.workload)
    tasks = []
    if s.disaggregated and n >= 2:
        tasks += [("prefill", lay) for lay in sp.prefill_layouts(m, hw, n, s, need)]
        tasks += [("decode", lay) for lay in sp.decode_layouts(m, hw, n, s, need)]
    if s.aggregated:
        tasks += [("agg", lay) for lay in sp.aggregated_layouts(m, hw, n, s, need)]
    return tasks


def target_rate(req: Request) -> float | None:
    """The fixed load of min-gpus / latency objectives (None: throughput plans at capacity)."""
    if req.objective in AT_CAPACITY:
        return None
    if req.target_rps is not None:
        return req.target_rps
    arr = req.workload.arrival
    if arr.kind == "poisson":
        return arr.rate
    return None


def candidates(req: Request, priced: list) -> Iterator[Candidate]:
    """Every estimated deployment that meets the SLOs (with margin), as a stream."""
    for part in _parts(req, priced):
        yield from part if isinstance(part, combine.Family) else (part,)


def _parts(req: Request, priced: list) -> Iterator[Candidate | combine.Family]:
    """`candidates` in order, a decode shape's at their own capacity as one combine.Family."""
    tr = traffic_of(req.workload, req.model)
    st = Setting(req.num_gpus, req.slo, tr, target_rate(req))
    pr = Pricer(req.model, req.hw, req.profile, tr.skew, link=pairs.kv_link(req))
    budget = combine.SLO_MARGIN * req.slo.ttft_p90_s - req.slo.tpot_p90_s
    prefills = combine.best_prefill_per_size([u for k, u in priced if k == "prefill"], budget)
    for kind, unit in priced:
        if unit is None:
            continue
        if kind == "decode" and prefills:
            if st.target_rps is None:
                fam = combine.family(pr, prefills, unit, st)
                if fam is not None:
                    yield fam
            else:
                yield from combine.disaggregated(pr, prefills, unit, st)
        elif kind == "agg":
            yield from combine.aggregated(unit, st)


def _axes(req: Request):
    """(x, y) the objective's front maximises: tokens/s/user and /GPU; for min-gpus, fewer GPUs and
    tokens/s/user."""
    if req.objective == "min-gpus":
        return (lambda c: -c.gpus), (lambda c: c.tps_user)
    return (lambda c: c.tps_user), (lambda c: c.tps_gpu)


def estimate(req: Request, priced: list) -> Search:
    """Stream the estimated deployments into the objective's Pareto front (flat memory). A decode shape's
    candidates that the front already beats (StreamingFront.beaten) are only counted, or built for the sample."""
    x, y = _axes(req)
    fr, sample = StreamingFront(x, y, Candidate.sort_key), Decimated(SAMPLE)
    for part in _parts(req, priced):
        if not isinstance(part, combine.Family):
            fr.add(part)
            sample.add(part)
            continue
        beaten = fr.beaten(part.tps_user, part.tps_gpu).tolist() if req.objective != "min-gpus" else \
            [False] * len(part)  # (min-gpus: the front's axes are GPUs and tokens/s/user)
        for i, out in enumerate(beaten):
            if out and not sample.takes_next():
                sample.skip()
                continue
            c = part.candidate(i)
            if not out:
                fr.add(c)
            sample.add(c)
    keep = {id(c): c for c in fr.items() + sample.items()}
    return Search(fr.items(), sorted(keep.values(), key=Candidate.sort_key), sample.count)


def pareto(req: Request, search: Search) -> list[Candidate]:
    """The front the objective cares about (tokens/s/GPU vs /user, thinned; fewer GPUs vs /user)."""
    if req.objective == "min-gpus":
        return search.front
    x, y = _axes(req)
    return thin(search.front, x, y, FRONT_THIN)


def to_plan(req: Request, cand: Candidate, name: str, predicted: dict) -> Plan:
    return Plan(name=name, model=req.model_ref, hardware=req.hw_ref, num_gpus=req.num_gpus,
                prefill=cand.prefill, decode=cand.decode, aggregated=cand.aggregated,
                slo=req.slo, workload=req.workload_ref, profile=req.profile_ref,
                prefill_hardware=req.prefill_side.hw_ref if req.prefill_side else None,
                prefill_profile=req.prefill_side.profile_ref if req.prefill_side else None,
                predicted={k: float(v) for k, v in predicted.items()},
                description=f"rackplan plan ({req.objective}): {cand.summary}")


def verify(req: Request, points: list[Candidate]) -> list[Verified]:
    """Steady-state verification of the front points (module docstring); in front order."""
    if not req.simulate:
        return [Verified(c, None) for c in points]
    osl_p90 = front.p90_output_length(req.workload)
    rate = target_rate(req)
    if rate is not None or req.workload.arrival.kind == "concurrency":
        advance = req.progress("simulate front", len(points)) if req.progress else (lambda: None)

        def run(cands: list[Candidate]) -> list:
            tasks = [(to_plan(req, c, "check", {}), req.model, req.hw, req.workload, req.profile, rate or c.rate_rps,
                      req.slo, req.sim_requests, req.seed, front.first_probe(c, rate or c.rate_rps, osl_p90))
                     for c in cands]
            return _pmap(_probe, tasks, req, _init_args(req), "simulate front", advance)
        if req.objective in ("throughput", "goodput"):  # every point (goodput: each at the target load)
            return [Verified(c, k) for c, k in zip(points, run(points), strict=True)]
        return front.verify_fixed(req.objective, points, run, speed_bound(req), req.workers)
    from ..pricer import persisted

    with persisted():  # the runs' step prices kept across processes (the same figures, fewer steps priced)
        return front.verify_front(req, points, lambda c: to_plan(req, c, "check", {}))


USER_SLACK = 0.05  # the simulator's tokens/s/user may beat the cost model's lone-sequence speed by this much


def speed_bound(req: Request) -> Callable[[Candidate], float]:
    """The most tokens/s/user the simulator may find for a candidate: its decode (or aggregated)
    instance stepping one sequence at the mean context on one DP rank, the others idle (the
    fastest step the cost model prices), USER_SLACK over it (a request's contexts around the mean)."""
    from rackplan.sim.cost.batch import RankWork, Step

    tr = traffic_of(req.workload, req.model)
    pr, memo = Pricer(req.model, req.hw, req.profile, tr.skew), {}

    def bound(c: Candidate) -> float:
        if id(c) not in memo:
            lay = (c.decode or c.aggregated)[0]
            lone = RankWork(1.0, float(tr.ctx_mean))
            step = Step((lone, RankWork()), (1, lay.dp - 1)) if lay.dp > 1 else Step((lone,), (1,))
            memo[id(c)] = (1.0 + USER_SLACK) * lay.tokens_per_step / pr.pricer(lay).price(step).period_s
        return memo[id(c)]
    return bound


def choose(req: Request, verified: list[Verified]) -> Verified:
    """Pick by objective among the deployments whose simulated tails meet the SLOs (never one that
    failed verification or was not simulated)."""
    ok = [v for v in verified if v.passed]
    if not ok:
        raise NoFeasiblePlan(_closest_message(req, verified))
    if req.objective == "min-gpus":
        return min(ok, key=lambda v: (v.cand.gpus, -v.tps_user, v.cand.summary))
    if req.objective == "latency":
        return max(ok, key=lambda v: (round(v.tps_user, 6), round(v.tps_gpu, 6), v.cand.summary))
    if req.objective in ("cost", "power"):
        return economy.choose(req, ok)
    if req.objective == "goodput":
        return max(ok, key=lambda v: (round(goodput_per_gpu(v), 9), round(v.tps_gpu, 6), v.cand.summary))
    return max(ok, key=lambda v: (round(v.tps_gpu, 6), round(v.tps_user, 6), -v.cand.gpus, v.cand.summary))


def goodput_per_gpu(v: Verified) -> float:
    """Requests per second within their SLOs (each request class's own limits) per GPU, simulated."""
    return float(v.check.metrics.get("goodput_rps", 0.0)) / v.cand.gpus if v.check is not None else 0.0


def _closest_message(req: Request, verified: list[Verified]) -> str:
    if not verified:
        return (f"no layout meets the SLOs (TTFT p90 <= {req.slo.ttft_p90_s:g} s, TPOT p90 <= "
                f"{req.slo.tpot_p90_s * 1e3:g} ms) on {req.num_gpus} x {req.hw.name} even in the analytic "
                f"estimate; {closest_estimate(req)}")
    best = min((v for v in verified if v.check is not None), key=lambda v: v.check.worst_miss(req.slo)[1])
    key, _ = best.check.worst_miss(req.slo)
    if key == "stable":
        pools = " and ".join(best.check.probes[-1].saturated)
        return (f"no layout meets the SLOs; closest: {best.cand.summary} is unstable down to {best.rate_rps:.3g} "
                f"req/s (its {pools} pool saturates)")
    value = best.check.metrics[key]
    limit = req.slo.ttft_p90_s if key == "ttft_p90_s" else req.slo.tpot_p90_s
    what = "TTFT p90" if key == "ttft_p90_s" else "TPOT p90"
    return (f"no layout meets the SLOs; closest: {best.cand.summary} at {best.rate_rps:.3g} req/s misses "
            f"{what} by {_fmt_s(value - limit)} ({_fmt_s(value)} > {_fmt_s(limit)})")


def _fmt_s(sec: float) -> str:
    return f"{sec * 1e3:.1f} ms" if abs(sec) < 1 else f"{sec:.2f} s"


def closest_estimate(req: Request) -> str:
    """The estimated deployment nearest the SLOs when none meets them (SLOs relaxed x1000)."""
    loose = SLO(req.slo.ttft_p90_s * 1e3, req.slo.tpot_p90_s * 1e3)
    relaxed = Request(**{**req.__dict__, "slo": loose, "simulate": False, "progress": None})

    def excess(c: Candidate) -> float:
        return max(c.ttft_p90_s / req.slo.ttft_p90_s, c.tpot_s / req.slo.tpot_p90_s)
    c, best = None, None
    for cand in candidates(relaxed, price_all(relaxed)):
        e = excess(cand)
        if best is None or e <= best[0]:  # the summary (for ties) only when it can matter
            k = (e, cand.sort_key())
            if best is None or k < best:
                c, best = cand, k
    if c is None:
        return "no deployment sustains any load"
    misses = sorted(((value / limit, what, value, limit) for what, value, limit in
                     (("TTFT p90", c.ttft_p90_s, req.slo.ttft_p90_s), ("TPOT p90", c.tpot_s, req.slo.tpot_p90_s))
                     if value > limit), reverse=True)  # the worse first; an SLO it meets is not named
    return f"closest: {c.summary} misses " + " and ".join(
        f"{what} by {_fmt_s(value - limit)} ({_fmt_s(value)} > {_fmt_s(limit)})" for _, what, value, limit in misses)


def price_all(req: Request) -> list[tuple[str, object]]:
    """(kind, priced unit or None) for every instance shape that fits in memory (a mixed-hardware pair's
    prefill shapes on its prefill kind, sim/search/pairs.py). A pure function of the pricer's inputs, the
    shapes and the code, so kept in the disk cache (rackplan/diskcache.py, `priced/`): a later run on the
    same inputs reads it (~1-2 ms) instead of pricing again (0.8 CPU-s for DeepSeek-V3 on 32 H200)."""
    out: list[tuple[str, object]] = []
    for side, kinds in pairs.sides(req):
        tasks = [t for t in _tasks(side) if t[0] in kinds]
        out += zip([k for k, _ in tasks], _priced(side, tasks), strict=False)
    return out


def _priced(req: Request, tasks: list[tuple[str, Layout]]) -> list:
    """_price of each task, from the disk cache when these inputs were priced before (price_all)."""
    from rackplan.diskcache import code_version, remembered

    init = _init_args(req)
    cores = req.hw.rank_cores if req.hw.kind == "cpu" else None  # a CPU rig's detected cores (core_share)
    return remembered("priced", lambda: repr((init, cores, tasks, code_version())),
                      lambda: _pmap(_price, tasks, req, init, "price layouts"))


def _init_args(req: Request) -> tuple:
    return (req.model, req.hw, req.profile, traffic_of(req.workload, req.model), req.space.batches)


def plan(req: Request, name: str = "plan") -> Result:
    """Run the whole pipeline; raises SpecError (bad input) or NoFeasiblePlan."""
    t0 = time.perf_counter()
    if req.num_gpus > req.hw.rank_capacity:  # a CPU rig: no plan keeps more ranks busy than it has cores for
        print(f"plan: {req.hw.name} runs {req.hw.rank_capacity} busy ranks at once ({req.hw.rank_cores} cores / "
              f"{req.hw.threads_per_rank} threads per rank): budget {req.num_gpus} -> {req.hw.rank_capacity}",
              file=sys.stderr)
        req = replace(req, num_gpus=req.hw.rank_capacity)
    economy.check_objective(req)
    if req.prefill_side is not None:
        pairs.check_budget(req)
    else:
        sp.check_budget(req.model, req.hw, req.num_gpus, not req.space.aggregated)
    priced = price_all(req)
    t1 = time.perf_counter()
    search = estimate(req, priced)
    points = front.spread(pareto(req, search), req.max_checks)
    t2 = time.perf_counter()
    if not points:
        short = [x for x in sp.left_out(req.model, req.hw, req.num_gpus, req.space, sp.longest(req.workload))
                 if x.startswith("KV per rank")]
        raise NoFeasiblePlan(_closest_message(req, []) + "".join(f"; skipped: {x}" for x in short))
    verified = verify(req, points)
    t3 = time.perf_counter()
    win = choose(req, verified)
    predicted = predicted_metrics(win)
    result_plan = to_plan(req, win.cand, name, predicted)
    timings = {"price_s": t1 - t0, "estimate_s": t2 - t1, "simulate_s": t3 - t2, "total_s": t3 - t0}
    return Result(req, len(priced), search.sample, search.count, points, verified, win, result_plan, timings,
                  any(v.check is not None for v in verified), sp.left_out(req.model, req.hw, req.num_gpus, req.space,
                                                                      sp.longest(req.workload)))


def predicted_metrics(v: Verified) -> dict[str, float]:
    """What plan.yaml records: the verified rate and the simulator's steady-state figures at it (what
    `rackplan simulate --plan` reproduces: same rate, same run length), and the analytic estimate
    beside them."""
    c = v.cand
    out = {"request_rate": v.rate_rps, "output_tps_per_gpu": v.tps_gpu, "tps_per_user": v.tps_user,
           "est_request_rate": c.rate_rps, "est_output_tps_per_gpu": c.tps_gpu, "est_tps_per_user": c.tps_user,
           "est_ttft_p90_s": c.ttft_p90_s, "est_tpot_s": c.tpot_s, "est_batch_per_rank": c.batch_per_rank,
           "est_capacity_rps": c.capacity_rps}
    if v.check is not None:
        m = v.check.metrics
        out["sim_requests"] = float(v.check.requests)
        for key in ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "output_tps_per_gpu", "goodput_rps",
                    "served_rps", "window_start_s", "window_end_s", "stable"):
            if key in m:
                out["sim_" + key] = m[key]
    return out
