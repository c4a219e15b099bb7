"""Warm start of a steady-state run: decode instances seated at t = 0 with the sequences they
would be running at steady state, so the warm-up that sim/steady.py cuts is short.

Why: near its capacity a decode pool fills slowly (a fuller batch steps slower, so its sequences
live longer and the batch fills further): from empty, the seed scenario's winners settle only
after 150-300 s of arrivals (about ten lifetimes). Seated at the fixed point the run starts
where the cold run ends up.

How many: per decode instance, the N at which Little's law closes on the instance's own step
price (the simulator's pricer, its mean period): N = rate per instance x mean decode steps of a
request x step seconds at N (bisection on N, at most WARM_FILL of its seats). Which: the
workload's own length distributions, each drawn sequence picked with probability in proportion
to its decode steps (a sequence in progress is a long one more often: length-biased) and at a
uniform point of its life (the equilibrium age of a renewal process; exact for a pool whose
step time does not change). The seated sequences are load only: they never arrive, so no
latency percentile counts them; the tokens they emit inside the window are served tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rackplan.specs import Scenario

from .cost.step import CostContext
from .expert_load import routing_load
from .pricer import StepPricer
from .steady import dot
from .workload import make_requests

WARM_SEED = 15  # salt of the seated sequences' draws (a stream apart from the workload's)
WARM_FILL = 0.95  # seat at most this share of an instance's seats (room for the head of the queue)
DRAWS = 8192  # sequences drawn to pick the seated ones from
BISECT = 40  # bisection steps on N (N is resolved far below one sequence)


@dataclass(frozen=True)
class Warm:
    """Sequences seated at t = 0: [W] each, in instance order."""

    isl: np.ndarray  # [W] prompt tokens
    done: np.ndarray  # [W] output tokens already emitted (context = isl + done)
    left: np.ndarray  # [W] output tokens still to emit
    instance: np.ndarray  # [W] decode instance index (of the plan's decoders, in order)

    def __len__(self) -> int:
        return len(self.isl)


def steady_occupancy(pricer: StepPricer, ranks: int, rate_rps: float, steps_mean: float, ctx_mean: float,
                     seats: float) -> float:
    """Running sequences N of one decode instance at the fixed point N = rate x steps x step_s(N)
    (its seats when the instance cannot keep up)."""
    def excess(n: float) -> float:
        b = n / ranks
        return rate_rps * steps_mean * pricer.decode([b] * ranks, [b * ctx_mean] * ranks, n) - n

    lo, hi = 0.0, float(seats)
    if excess(hi) >= 0.0:
        return hi
    for _ in range(BISECT):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0.0 else (lo, mid)
    return lo


def warm_sequences(sc: Scenario, caps: dict[str, float], seed: int) -> Warm | None:
    """The sequences to seat on each decode instance of a disaggregated open-loop plan (None for
    aggregated plans and closed loops). `caps`: KV tokens per rank per pool entry (validate_plan)."""
    plan, workload = sc.plan, sc.workload
    if not plan.disaggregated or workload.arrival.kind != "poisson":
        return None
    pool = make_requests(workload, DRAWS, seed)
    rng = np.random.default_rng([WARM_SEED, seed])
    instances = sum(lay.replicas for lay in plan.decode)
    parts, first = [], 0
    for i, lay in enumerate(plan.decode):
        tps = lay.tokens_per_step
        steps = np.maximum(1, np.ceil(pool.osl / tps))  # [DRAWS] decode steps of each request
        age = rng.random(DRAWS)  # [DRAWS] share of its life already behind it
        done = np.minimum(np.floor(age * steps) * tps, pool.osl - 1)
        ctx_mean = dot(steps, pool.isl + done) / float(steps.sum())  # length-biased mean context
        load = routing_load(workload, sc.model)
        pricer = StepPricer.shared(CostContext(sc.model, sc.hw, lay, sc.profile, load))  # mean periods
        kv_room = caps[f"decode[{i}]"] * lay.dp / (dot(steps, pool.isl + pool.osl) / float(steps.sum()))
        seats = WARM_FILL * min(lay.dp * lay.max_batch_per_rank, kv_room)
        n = steady_occupancy(pricer, lay.dp, workload.arrival.rate / instances, float(steps.mean()), ctx_mean, seats)
        k = int(round(n))
        for j in range(lay.replicas):
            pick = rng.choice(DRAWS, size=k, p=steps / steps.sum())
            parts.append((pool.isl[pick], done[pick], pool.osl[pick] - done[pick], np.full(k, first + j)))
        first += lay.replicas
    if not parts or not sum(len(p[0]) for p in parts):
        return None
    isl, done, left, inst = (np.concatenate(x) for x in zip(*parts))
    return Warm(isl.astype(np.int64), done.astype(np.int64), left.astype(np.int64), inst.astype(np.int64))


def seat(decoders: list, warm: Warm, first_rid: int, log) -> None:
    """Seat the warm sequences (rids from `first_rid`) on their instances at t = 0: running, first
    token at 0, never arrived. One that finds no room is dropped (its finish set: nothing runs).
    (EngineCore.seat_many per instance: a DEP64 decode pool of 51 instances seats ~1.7 million.)"""
    inst = warm.instance
    if not len(inst):
        return
    rid = np.arange(first_rid, first_rid + len(warm))  # [W]
    ctx = (warm.isl + warm.done).astype(np.float64)  # [W] context of each (isl + done: exact in int64)
    ends = np.flatnonzero(np.diff(inst)) + 1  # [instances - 1] where the next instance's sequences start
    for lo, hi in zip([0, *ends.tolist()], [*ends.tolist(), len(warm)]):
        core = decoders[int(inst[lo])].core
        refused = core.seat_many(rid[lo:hi].tolist(), ctx[lo:hi].tolist(), warm.left[lo:hi].tolist())
        if refused:
            log.finish[refused] = 0.0
        log.first_token[np.setdiff1d(rid[lo:hi], refused) if refused else rid[lo:hi]] = 0.0
