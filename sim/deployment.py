"""The simulated deployment of a plan: its prefill, decode or aggregated instances in one SimPy
environment (their step pricers and serving policies), the router that sends each request to one, and
the KV transfers between them; and the checks a plan and its requests pass first (every layout fits
in HBM, every request in a rank's KV). The run driver (sim/simulator.Run) builds one per run, feeds
it arrivals and measures it.
"""
from __future__ import annotations

from array import array
from functools import partial

import numpy as np
import simpy

from rackplan.policy import EngineCore, LoadIndex, Router, block_tokens
from rackplan.policy.kv import longest_admitted, window_tokens
from rackplan.specs import HardwareSpec, ModelSpec, Plan, Scenario, SpecError, Workload, pool_hardware
from rackplan.specs.layout import Layout

from .aggregated import AggregatedInstance
from .cost import efficiency
from .cost.cores import core_share
from .cost.host import front_end_servers
from .cost.memory import check_fits
from .cost.step import CostContext
from .cost.transfer import kv_link
from .decode import DecodeInstance
from .expert_load import routing_load
from .metrics import RequestLog
from .mixed import plan_kv_link, prefill_side
from .prefill import PrefillInstance
from .prefix_cache import InstancePrefixes
from .pricer import StepPricer
from .workload import Requests

ROUTING_SEED = 14  # salt of the per-step routing draws (a stream apart from the workload's)


def validate_plan(plan: Plan, model: ModelSpec, hw: HardwareSpec) -> dict[str, float]:
    """Check every layout fits in HBM; returns KV capacity (tokens per rank) per pool entry."""
    return {f"{pool}[{i}]": validate_layout(lay, model, pool_hardware(plan, hw, pool), f"{pool}[{i}]")
            for pool in ("prefill", "decode", "aggregated") for i, lay in enumerate(getattr(plan, pool))}


def validate_layout(lay: Layout, model: ModelSpec, hw: HardwareSpec, where: str) -> float:
    """One layout's checks (EPLB slots split evenly over its EP ranks, fits in HBM); its KV capacity."""
    slots = model.moe.num_experts + lay.eplb.redundant_experts
    if slots % lay.ep_size:
        raise SpecError("", f"{where}.eplb.redundant_experts",
                        f"a count that makes experts + redundant ({model.moe.num_experts} + "
                        f"{lay.eplb.redundant_experts}) divisible by the EP size {lay.ep_size}")
    if lay.moe_backend is not None:
        efficiency.check_backend(lay, model, f"{where}.moe_backend")
    return check_fits(model, hw, lay, where)


def check_requests_fit(plan: Plan, model: ModelSpec, hw: HardwareSpec, workload: Workload, reqs: Requests) -> None:
    """A request whose prompt + output KV (in whole blocks, with a step's queries) exceeds every
    decode (aggregated) rank's KV blocks could never finish: refuse it before simulating
    (SpecError naming the workload's lengths)."""
    caps = validate_plan(plan, model, hw)
    if not len(reqs):
        return
    block = block_tokens(model.attention.kind)
    lays = {f"{pool}[{i}]": lay for pool in ("prefill", "decode", "aggregated")
            for i, lay in enumerate(getattr(plan, pool))}
    # a prefill rank holds the prompt's KV blocks while it runs (rackplan/policy/engine.py), a decode or
    # aggregated rank the prompt's and the output's
    for pools, need, field, what in (([k for k in caps if not k.startswith("prefill")], reqs.isl + reqs.osl,
                                      "isl + osl", "decode"),
                                     ([k for k in caps if k.startswith("prefill")], reqs.isl, "isl", "prefill")):
        if not pools:
            continue
        room = max(longest_admitted(caps[k], block, lays[k].queries_per_step, window_tokens(model, block))
                   for k in pools)
        worst = int(np.argmax(need))
        if need[worst] > room:
            raise SpecError(workload.name, field, f"at most {int(room)} tokens, the largest KV capacity of a "
                            f"{what} rank in {block}-token blocks ({', '.join(pools)})",
                            f"{int(reqs.isl[worst])} + {int(reqs.osl[worst])}" if field != "isl"
                            else int(reqs.isl[worst]))


class Deployment:
    """Builds the instances of a plan inside one SimPy environment and routes requests."""

    def __init__(self, env, sc: Scenario, reqs: Requests, log: RequestLog, seed: int = 0):
        plan, model, hw, prof, wl = sc.plan, sc.model, sc.hw, sc.profile, sc.workload
        self.env, self.plan, self.reqs, self.log = env, plan, reqs, log
        self.model, self.hw, self.prof = model, hw, prof
        self.kv_link = plan_kv_link(plan, model, hw, prof)  # (mixed hardware: sim/mixed.py)
        self.kv_local = kv_link(model, hw, prof, True)  # colocated hand-off between ranks of one domain
        self.caps = validate_plan(plan, model, hw)
        self.router = Router(plan.router)
        self.homes: dict[int, int] = {}  # session -> the front instance its last turn went to (session_affine)
        self.dest: dict[int, object] = {}  # rid -> the decoder its KV goes to (bound when its last chunk is scheduled)
        self.on_request_done = None
        # [N] ints read per request, per step: arrays of machine ints (8 bytes a request, not a list's 36)
        isl, osl = _ints(reqs.isl), _ints(reqs.osl)
        # [N] prefix-cache hits: the workload's flat rate, or (block hashes) set by the caches as requests run
        self.cached = _ints(reqs.cached)
        self.isl, self.osl = isl, osl
        self.priority = _ints(reqs.priority) if reqs.priority is not None else None  # [N] class priority
        self.kv_s = self._transfer_seconds(reqs)  # [N] KV transfer seconds (KVLink's formula over the array)
        self.front, self.decoders = [], []
        # each pool's steps draw their routing imbalance from its own seeded stream (sim/pricer.py)
        pools = iter(range(1 << 20))
        share = core_share(hw, plan)  # CPU rigs: more busy ranks than cores run each slower (sim/cost/cores.py)
        pre_hw, pre_prof = prefill_side(plan, hw, prof)  # the prefill pool's own (mixed hardware), else hw, prof
        load = routing_load(wl, model)  # a power law or expert load from data (sim/expert_load.py)
        mk = lambda lay, hw=hw, prof=prof: StepPricer.shared(CostContext(model, hw, lay, prof, load, share),
                                                             np.random.default_rng([ROUTING_SEED, seed, next(pools)]))
        # colocated: the k-th prefill and the k-th decode instance take turns on the same GPUs
        n_shared = max(sum(lay.replicas for lay in pool) for pool in (plan.prefill, plan.decode))
        shared = [simpy.Resource(env, capacity=1) for _ in range(n_shared)] if plan.colocated else None
        pricers = {}  # one pricer (and routing stream) per layout, made in plan order
        # the API-server processes in front of the entry pool, and the host block that prices them
        self.front_end_servers, self.front_end_host = 0, (pre_prof if plan.disaggregated else prof).host_for(
            "prefill" if plan.disaggregated else "both")
        for inst in plan.instances():
            lay, entry = inst.layout, inst.entry
            if inst.pool != "decode":
                node = (pre_hw if inst.pool == "prefill" else hw).gpus_per_node
                self.front_end_servers += front_end_servers(lay, node)
            if entry not in pricers:
                pricers[entry] = mk(lay, pre_hw, pre_prof) if inst.pool == "prefill" else mk(lay)
            pr = pricers[entry]
            if inst.pool == "decode":
                turn = shared[len(self.decoders)] if shared else None
                self.decoders.append(DecodeInstance(env, inst.name, pr, self._core(entry, lay), log, self._done, turn))
                continue
            prefix = self._prefixes(entry, lay)
            if inst.pool == "aggregated":
                self.front.append(AggregatedInstance(env, inst.name, pr, self._core(entry, lay, prefix), log,
                                                     self._done, prefix))
                continue
            k = len(self.front)
            turn = shared[k] if shared else None
            to_decode = (lambda rid, k=k: self._to_paired(rid, k)) if shared else self._to_transfer
            self.front.append(PrefillInstance(env, inst.name, pr, self._core(entry, lay, prefix), to_decode, turn,
                                              self._handoff_s if shared else None, prefix,
                                              None if shared else self._bind_decode))
        # each pool's least-loaded index, touched by its instances' serving policies as their loads move
        self.index = {id(pool): self._index(pool) for pool in (self.front, self.decoders)}

    @staticmethod
    def _index(pool: list) -> LoadIndex:
        index = LoadIndex(pool)
        for i, inst in enumerate(pool):
            inst.core.on_load = partial(index.touch, i)
        return index

    def _core(self, pool: str, lay: Layout, prefix: InstancePrefixes | None = None) -> EngineCore:
        """The serving policy of one instance of `pool` (rackplan/policy): its ranks, budget, seats,
        KV blocks per rank, and the prefix cache that decides a prompt's hit when it first runs."""
        m = self.model
        return EngineCore.for_layout(lay, self.caps[pool], m.attention.kind, self.isl, self.osl, self.cached,
                                     prefix.schedule if prefix is not None else None, self.priority,
                                     window_tokens(m, block_tokens(m.attention.kind)))

    def extend(self, reqs: Requests) -> None:
        """Requests of a continued run (Run.result) take the next rids."""
        self.isl.extend(_ints(reqs.isl))
        self.osl.extend(_ints(reqs.osl))
        self.cached.extend(_ints(reqs.cached))
        if self.priority is not None:
            self.priority.extend(_ints(reqs.priority))
        self.kv_s.extend(self._transfer_seconds(reqs))

    def _transfer_seconds(self, reqs: Requests) -> array:
        """Each request's KV transfer seconds, prefill to decode (the same floats as one at a time)."""
        return array("d", self.kv_link.seconds(np.asarray(reqs.isl, dtype=np.float64)).tolist())

    def _prefixes(self, pool: str, lay) -> InstancePrefixes | None:
        """[prefix cache] With block hashes, an instance's cache holds its KV capacity (all DP ranks)."""
        if self.reqs.blocks is None:
            return None
        return InstancePrefixes(self.caps[pool] * lay.dp, self.reqs.blocks, self.reqs.block_size, self.reqs.isl,
                                self.cached)

    def _pick(self, instances, rid: int | None = None):
        """The instance a request goes to (the plan's router, rackplan/policy/route.py); prefix_aware
        weighs each instance's queued prompt tokens less this request's prefix-cache hit there."""
        if len(instances) == 1:  # (a one-instance pool's turn is never read: only the router's count moves)
            self.router.decisions += 1
            return instances[0]
        uncached = [inst.queued_tokens - self._hit(inst, rid) for inst in instances] \
            if rid is not None and self.plan.router == "prefix_aware" else None
        loads = self.index[id(instances)]  # (least_loaded in O(log instances): rackplan/policy/route.py LoadIndex)
        if rid is None or self.reqs.sessions is None:
            return instances[self.router.pick(id(instances), loads, uncached)]
        session = int(self.reqs.sessions.session[rid])  # [sessions] where the session's last turn ran
        k = self.homes[session] = self.router.pick(id(instances), loads, uncached, self.homes.get(session))
        return instances[k]

    @staticmethod
    def _hit(inst, rid: int) -> int:
        return inst.prefix.hit_tokens(rid) if inst.prefix is not None else 0

    def submit(self, rid: int) -> None:
        """Request `rid` arrives now and goes straight to an entry instance."""
        self.log.arrive(rid, self.env.now)
        self.enter(rid)

    def enter(self, rid: int) -> None:
        """Request `rid` (its arrival logged) reaches an entry instance's engine now."""
        self._pick(self.front, rid).submit(rid)

    def _bind_decode(self, rid: int) -> None:
        """A prompt's last chunk is scheduled: its decoder (the router) and DP rank there, as the
        executor's prefill leader picks them when it forms the step (its KV is pushed to that rank)."""
        dest = self.dest[rid] = self._pick(self.decoders)
        dest.core.bind(rid)

    def _to_transfer(self, rid: int) -> None:
        """KV transfer to the decoder bound at scheduling (sim/decode.py DecodeInstance.receive)."""
        self.log.prefilled(rid, self.env.now)
        self.dest.pop(rid).receive(rid, self.kv_s[rid])

    def _to_paired(self, rid: int, k: int) -> None:
        """Colocated: the hand-off ran inside prefill k's turn; the decoder on the same GPUs seats it
        (the k-th one, or the least loaded when the decode pool has fewer instances)."""
        self.log.prefilled(rid, self.env.now)
        dest = self.decoders[k] if k < len(self.decoders) else self._pick(self.decoders)
        dest.deliver(rid)

    def _handoff_s(self, rids: list[int]) -> float:
        """Colocated: one KV exchange per step carries every finished prompt; the longest decides."""
        return self.kv_local.seconds(max(float(self.isl[r]) for r in rids))

    def _done(self, rid: int) -> None:
        self.log.done(rid, self.env.now)
        if self.on_request_done:
            self.on_request_done(rid)

    def usage(self) -> dict[str, tuple]:
        """Per instance: its step end times, busy seconds up to each (utilisation over a window) and,
        for prefill instances, the prompts each step finished."""
        return {inst.name: (inst.step_ends, inst.busy_upto, getattr(inst, "prompts_done", None))
                for inst in self.front + self.decoders}

    def close(self) -> None:
        """After a run: stop every main loop and drop the instances (they hold the deployment's
        bound methods), so the run's state is freed by reference counting, not by a collection
        that would rescan everything the run allocated."""
        for inst in self.front + self.decoders:
            inst.stop()
        self.front, self.decoders, self.on_request_done, self.dest, self.index = [], [], None, {}, {}

    def steps(self) -> dict[str, int]:
        return {inst.name: inst.steps for inst in self.front + self.decoders}


def _ints(a: np.ndarray) -> array:
    """[N] machine ints (8 bytes each) of an integer array."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return out
