"""The discrete-event simulator of a (disaggregated or aggregated) serving deployment.

SimPy processes: the router (arrivals, open or closed loop), prefill instances, KV transfers,
decode instances, or aggregated instances. Events are per batch step, never per token.
"""
from __future__ import annotations

import dataclasses
import gc
from contextlib import contextmanager

import numpy as np
import simpy

from rackplan.specs import HardwareSpec, ModelSpec, Plan, Profile, SpecError, Workload, load_hardware, load_model

from .aggregated import AggregatedInstance
from .cost.memory import check_fits
from .cost.step import CostContext
from .cost.transfer import kv_link
from .decode import DecodeInstance, DecodeRanks
from .metrics import RequestLog, SimResult, summarise
from .prefill import PrefillInstance
from .prefix_cache import InstancePrefixes
from .pricer import StepPricer
from .workload import Requests, make_requests

# Peak RSS growth per simulated request (request table, log, per-request state in the instances):
# 1.08 kB measured for tiny-cpu, 1,000 vs 40,000 requests (/usr/bin/time, 2026-12-01, benchmarks/RESULTS.md),
# rounded up for margin.
BYTES_PER_REQUEST = 1200
MEMORY_GIB = 4.0  # default memory budget of one simulation


def check_request_budget(num_requests: int, memory_gib: float = MEMORY_GIB, flag: str = "--requests") -> None:
    """Refuse, before anything is drawn, a simulation whose requests would exceed `memory_gib`
    (SpecError saying how many fit and how to raise the budget)."""
    most = int(memory_gib * 2**30 / BYTES_PER_REQUEST)
    if num_requests > most:
        raise SpecError("simulate", flag, f"at most {most:,} requests in the {memory_gib:g} GiB memory budget (about "
                        f"{BYTES_PER_REQUEST} B per request; raise it with --memory-gib)", num_requests)


def validate_plan(plan: Plan, model: ModelSpec, hw: HardwareSpec) -> dict[str, float]:
    """Check every layout fits in HBM; returns KV capacity (tokens per rank) per pool entry."""
    caps = {}
    for pool in ("prefill", "decode", "aggregated"):
        for i, lay in enumerate(getattr(plan, pool)):
            slots = model.moe.num_experts + lay.eplb.redundant_experts
            if slots % lay.ep_size:
                raise SpecError("", f"{pool}[{i}].eplb.redundant_experts",
                                f"a count that makes experts + redundant ({model.moe.num_experts} + "
                                f"{lay.eplb.redundant_experts}) divisible by the EP size {lay.ep_size}")
            caps[f"{pool}[{i}]"] = check_fits(model, hw, lay, f"{pool}[{i}]")
    return caps


def check_requests_fit(plan: Plan, model: ModelSpec, hw: HardwareSpec, workload: Workload, reqs: Requests) -> None:
    """A request whose prompt + output KV exceeds every decode (aggregated) rank's KV capacity can
    never be admitted: refuse it before simulating (SpecError naming the workload's lengths)."""
    caps = validate_plan(plan, model, hw)
    pools = [k for k in caps if not k.startswith("prefill")]
    if not pools or not len(reqs):
        return
    room = max(caps[k] for k in pools)
    need = reqs.isl + reqs.osl
    worst = int(np.argmax(need))
    if need[worst] > room:
        raise SpecError(workload.name, "isl + osl", f"at most {int(room)} tokens, the largest KV capacity of a "
                        f"decode rank ({', '.join(pools)})", f"{int(reqs.isl[worst])} + {int(reqs.osl[worst])}")


def _tokens_per_step(layout) -> float:
    return layout.speculation.acceptance_length if layout.speculation else 1.0


class _Deployment:
    """Builds the instances of a plan inside one SimPy environment and routes requests."""

    def __init__(self, env, plan, model, hw, prof, wl, reqs: Requests, log: RequestLog):
        self.env, self.plan, self.reqs, self.log = env, plan, reqs, log
        self.model, self.hw, self.prof = model, hw, prof
        self.kv_link = kv_link(model, hw, prof, plan.gpus_used <= hw.domain_size)
        self.kv_local = kv_link(model, hw, prof, True)  # colocated hand-off between ranks of one domain
        self.caps = validate_plan(plan, model, hw)
        self.rr = 0  # least_loaded: picks so far (ties rotate)
        self.turns: dict[int, int] = {}  # round_robin, prefix_aware: picks so far per pool
        self.on_request_done = None
        isl, osl = reqs.isl.tolist(), reqs.osl.tolist()  # Python ints: read per request, per step
        # [N] prefix-cache hits: the workload's flat rate, or (block hashes) set by the caches as requests run
        self.cached = cached = reqs.cached.tolist()
        self.isl = isl
        self.need_of = lambda rid: (cached[rid], isl[rid])  # rid -> (cached, prompt tokens)
        self.front, self.decoders = [], []
        mk = lambda lay: StepPricer(CostContext(model, hw, lay, prof, wl.routing_skew))
        if plan.disaggregated:
            # colocated: the k-th prefill and the k-th decode instance take turns on the same GPUs
            n_shared = max(sum(lay.replicas for lay in pool) for pool in (plan.prefill, plan.decode))
            shared = [simpy.Resource(env, capacity=1) for _ in range(n_shared)] if plan.colocated else None
            for i, lay in enumerate(plan.prefill):
                pr = mk(lay)
                for j in range(lay.replicas):
                    k = len(self.front)
                    turn = shared[k] if shared else None
                    to_decode = (lambda rid, k=k: self._to_paired(rid, k)) if shared else self._to_transfer
                    self.front.append(PrefillInstance(env, f"prefill[{i}].{j}", pr, lay.max_tokens_per_step,
                                                      lay.max_batch_per_rank, self.need_of, to_decode,
                                                      turn, self._handoff_s if shared else None,
                                                      self._prefixes(f"prefill[{i}]", lay)))
            for i, lay in enumerate(plan.decode):
                pr = mk(lay)
                for j in range(lay.replicas):
                    ranks = DecodeRanks(lay.dp, lay.max_batch_per_rank, self.caps[f"decode[{i}]"],
                                        _tokens_per_step(lay))
                    turn = shared[len(self.decoders)] if shared else None
                    self.decoders.append(DecodeInstance(env, f"decode[{i}].{j}", pr, ranks, log,
                                                        isl.__getitem__, osl.__getitem__, self._done, turn))
        else:
            for i, lay in enumerate(plan.aggregated):
                pr = mk(lay)
                q = 1.0 + (lay.speculation.num_tokens if lay.speculation else 0)
                for j in range(lay.replicas):
                    ranks = DecodeRanks(lay.dp, lay.max_batch_per_rank, self.caps[f"aggregated[{i}]"],
                                        _tokens_per_step(lay))
                    self.front.append(AggregatedInstance(env, f"aggregated[{i}].{j}", pr, ranks,
                                                         lay.max_tokens_per_step, q, log, self.need_of,
                                                         osl.__getitem__, self._done,
                                                         self._prefixes(f"aggregated[{i}]", lay)))

    def _prefixes(self, pool: str, lay) -> InstancePrefixes | None:
        """[prefix cache] With block hashes, an instance's cache holds its KV capacity (all DP ranks)."""
        if self.reqs.blocks is None:
            return None
        return InstancePrefixes(self.caps[pool] * lay.dp, self.reqs.blocks, self.reqs.block_size, self.reqs.isl,
                                self.cached)

    def _pick(self, instances, rid: int | None = None):
        """The instance a request goes to. least_loaded: ties round-robin by a counter of routing
        decisions (a single-instance pool only counts the decision); round_robin and prefix_aware:
        each pool its own turn; prefix_aware: least prompt work queued ahead plus this request's
        uncached part (the most cached blocks win between equal queues)."""
        n = len(instances)
        if n == 1:
            self.rr += 1
            return instances[0]
        if self.plan.router != "least_loaded":
            k = self.turns[id(instances)] = self.turns.get(id(instances), 0) + 1
            if self.plan.router == "round_robin":
                return instances[(k - 1) % n]
            if rid is not None:  # [prefix cache]; decoders (no rid) fall through to least loaded
                return min(enumerate(instances), key=lambda x: (x[1].queued_tokens - self._hit(x[1], rid),
                                                                (x[0] - k) % n))[1]
        self.rr += 1  # ties go round-robin, so idle instances share the load
        rr = self.rr
        best, low, off = instances[0], instances[0].load, (-rr) % n
        for i in range(1, n):
            load = instances[i].load
            if load < low or (load == low and (i - rr) % n < off):
                best, low, off = instances[i], load, (i - rr) % n
        return best

    @staticmethod
    def _hit(inst, rid: int) -> int:
        return inst.prefix.hit_tokens(rid) if inst.prefix is not None else 0

    def submit(self, rid: int) -> None:
        self.log.arrive(rid, self.env.now)
        self._pick(self.front, rid).submit(rid)

    def _to_transfer(self, rid: int) -> None:
        """KV transfer to the least-loaded decoder: a timeout whose callback delivers."""
        self.log.prefill_done[rid] = self.env.now
        dest = self._pick(self.decoders)
        self.env.timeout(self.kv_link.seconds(self.isl[rid])).callbacks.append(lambda _ev: dest.deliver(rid))

    def _to_paired(self, rid: int, k: int) -> None:
        """Colocated: the hand-off ran inside prefill k's turn; the decoder on the same GPUs seats it
        (the k-th one, or the least loaded when the decode pool has fewer instances)."""
        self.log.prefill_done[rid] = self.env.now
        dest = self.decoders[k] if k < len(self.decoders) else self._pick(self.decoders)
        dest.deliver(rid)

    def _handoff_s(self, rids: list[int]) -> float:
        """Colocated: one KV exchange per step carries every finished prompt; the longest decides."""
        return self.kv_local.seconds(max(float(self.isl[r]) for r in rids))

    def _done(self, rid: int) -> None:
        self.log.done(rid, self.env.now)
        if self.on_request_done:
            self.on_request_done(rid)

    def utilisation(self, duration: float) -> dict[str, float]:
        return {inst.name: inst.busy_s / duration for inst in self.front + self.decoders}

    def close(self) -> None:
        """After a run: stop every main loop and drop the instances (they hold the deployment's
        bound methods), so the run's state is freed by reference counting, not by a collection
        that would rescan everything the run allocated."""
        for inst in self.front + self.decoders:
            inst.stop()
        self.front, self.decoders, self.on_request_done = [], [], None

    def steps(self) -> dict[str, int]:
        return {inst.name: inst.steps for inst in self.front + self.decoders}


def _open_loop(env, dep: _Deployment, arrivals: np.ndarray):
    for rid, t in enumerate(arrivals.tolist()):
        if t > env.now:
            yield env.timeout(t - env.now)
        dep.submit(rid)


@contextmanager
def _no_cyclic_gc():
    """A run allocates millions of short-lived objects and makes almost no reference cycles: the
    cyclic collector would only rescan them (~10% of the run); it is back on afterwards."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def simulate_specs(plan: Plan, model: ModelSpec, hw: HardwareSpec, workload: Workload, profile: Profile,
                   num_requests: int | None = None, seed: int | None = None) -> SimResult:
    """Simulate `plan` serving `workload` with explicit spec objects (what-if studies pass edited ones)."""
    reqs = make_requests(workload, num_requests, seed)
    check_requests_fit(plan, model, hw, workload, reqs)
    log = RequestLog(len(reqs))
    with _no_cyclic_gc():
        util, steps, cached = _run(plan, model, hw, workload, profile, reqs, log)
    return summarise(log, reqs.isl, reqs.osl, cached, plan.gpus_used, plan.slo, util, steps,
                     closed_loop=workload.arrival.kind == "concurrency")


def _run(plan, model, hw, workload, profile, reqs: Requests, log: RequestLog):
    """The SimPy run; returns (utilisation, steps) per instance and the cached tokens per request,
    the deployment closed."""
    env = simpy.Environment()
    dep = _Deployment(env, plan, model, hw, profile, workload, reqs, log)
    if workload.arrival.kind == "concurrency":
        nxt = iter(range(len(reqs)))
        dep.on_request_done = lambda _rid: [dep.submit(r) for r in [next(nxt, None)] if r is not None]
        for _ in range(min(workload.arrival.concurrency, len(reqs))):
            dep.submit(next(nxt))
    else:
        env.process(_open_loop(env, dep, reqs.arrival_s))
    env.run()
    unfinished = int(np.isnan(log.finish).sum())
    if unfinished:
        dep.close()
        raise RuntimeError(f"simulation ended with {unfinished} unfinished requests (a request larger "
                           "than any rank's KV capacity?)")
    t0, t1 = float(np.nanmin(log.arrival)), float(np.nanmax(log.finish))
    util, steps, cached = dep.utilisation(max(t1 - t0, 1e-12)), dep.steps(), np.asarray(dep.cached)
    dep.close()
    return util, steps, cached


def simulate(plan: Plan, workload: Workload, profile: Profile, num_requests: int | None = None,
             seed: int | None = None) -> SimResult:
    """Simulate `plan` (its model and hardware loaded by name) serving `workload`."""
    return simulate_specs(plan, load_model(plan.model), load_hardware(plan.hardware), workload, profile,
                          num_requests, seed)


def with_rate(workload: Workload, rate: float) -> Workload:
    """The same workload at another Poisson rate (req/s)."""
    arrival = dataclasses.replace(workload.arrival, kind="poisson", rate=rate, concurrency=None)
    return dataclasses.replace(workload, arrival=arrival)
