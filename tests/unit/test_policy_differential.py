"""Differential test of the serving policy (rackplan/policy): the same seeded arrivals through the
simulator's drivers (sim/prefill.py, sim/decode.py, sim/aggregated.py in real SimPy) and the
executor's (executor/serving.py: the colocated / aggregated Scheduler in the executor's tick loop,
calibration/serve_replay.replay; the disaggregated PrefillLeader / DecodeLeader on a real c10d
store control plane, executor/control.py) give the same batches, step by step: per instance, which
requests each DP rank prefills (and how many tokens) and which decode (at what context).

Both sides run on a fixed step clock (prefill steps P_S, decode or mixed steps D_S; KV hand-off
instant), so what is compared is the scheduling alone; cases cover chunking (prompts beyond the
token budget), speculation (MTP, every draft accepted: the executor's drawn acceptance at rate 1)
and a KV cache small enough that sequences are preempted and recomputed.
"""
from __future__ import annotations

import heapq
from array import array

import numpy as np
import pytest
import simpy

from rackplan.policy import EngineCore
from rackplan.specs import Plan, Scenario, Workload, from_dict, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit

P_S, D_S = 1.0, 0.2718281828459045  # fixed step clock (s): incommensurate, so no two step ends tie by chance

WORKLOAD = {"name": "diff", "arrival": {"kind": "poisson", "rate": 1.6},
            "isl": {"kind": "lognormal", "mean": 40, "sigma": 0.8}, "osl": {"kind": "lognormal", "mean": 12,
                                                                           "sigma": 0.7},
            "num_requests": 120, "seed": 7}


def _layout(role, dp=2, budget=32, seqs=4, **kw):
    return {"role": role, "dp": dp, "max_tokens_per_step": budget, "max_batch_per_rank": seqs,
            "cuda_graphs": False, "async_scheduling": False, **kw}


MTP = {"speculation": {"num_tokens": 1, "acceptance_length": 2.0}}
PLANS = {
    "disaggregated": {"prefill": [_layout("prefill")], "decode": [_layout("decode", budget=64)]},
    "disaggregated-mtp": {"prefill": [_layout("prefill")], "decode": [_layout("decode", budget=64, **MTP)]},
    "colocated": {"prefill": [_layout("prefill")], "decode": [_layout("decode", budget=64)], "colocated": True},
    "aggregated": {"aggregated": [_layout("both", budget=48, seqs=6)]},
}
# blocks per rank in the full-KV cases (tiny-moe is MLA: 64-token blocks): room for the longest request
# of WORKLOAD alone (188 tokens + a step's queries), so sequences that grow get preempted
FULL_KV = 3


def _plan(kind: str) -> Plan:
    return from_dict(Plan, {"name": f"diff-{kind}", "model": "tiny-moe", "hardware": "cpu-local", "num_gpus": 8,
                            **PLANS[kind]})


class FixedSteps:
    """A step pricer of fixed prices (the simulator's pricer interface): the fixed step clock."""

    turnover = False

    def __init__(self, seconds: float):
        self.seconds = seconds

    def step(self, chunks, batch=None, ctx=None) -> float:
        return self.seconds

    def decode(self, batch, ctx, total=None, admitted=0, finished=0) -> float:
        return self.seconds


def _record(core: EngineCore, name: str, log: dict, kv_blocks: int | None) -> None:
    """Log every non-empty batch `core` schedules: per rank its chunks and its decodes (rid, context)."""
    if kv_blocks is not None:
        core.kv_blocks = kv_blocks
    schedule = core.schedule

    def logged():
        b = schedule()
        decodes = tuple(tuple((rid, core.context(rid)[0]) for rid in core.decoding_on(r)) for r in range(core.ranks))
        if b.has_prefill or any(decodes):
            log.setdefault(name, []).append((tuple(tuple(per) for per in b.chunks), decodes))
        return b
    core.schedule = logged


def _simulated(plan: Plan, wl: Workload, kv_blocks: int | None) -> dict:
    from rackplan.sim.deployment import Deployment
    from rackplan.sim.metrics import RequestLog
    from rackplan.sim.workload import make_requests

    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    reqs = make_requests(wl)
    env, log = simpy.Environment(), {}
    dep = Deployment(env, Scenario(plan, model, hw, wl, load_profile("cpu-local")), reqs, RequestLog(len(reqs)))
    dep.kv_s = array("d", [0.0] * len(reqs))  # the hand-off is instant on the fixed clock
    for inst in dep.front + dep.decoders:
        inst.pricer = FixedSteps(P_S if inst.name.startswith("prefill") else D_S)
        if getattr(inst, "handoff_s", None) is not None:
            inst.handoff_s = lambda rids: 0.0
        _record(inst.core, inst.name.split(".")[0], log, kv_blocks)
    for rid, t in enumerate(reqs.arrival_s.tolist()):
        env.timeout(t).callbacks.append(lambda _e, rid=rid: dep.submit(rid))
    env.run()
    assert np.isfinite(dep.log.finish).all()
    return log


def _lockstep(plan: Plan, wl: Workload, kv_blocks: int | None) -> dict:
    """The executor's time-shared engine: serve.py's Scheduler in its tick loop, on the fixed clock."""
    from rackplan.calibration.serve_replay import replay
    from rackplan.executor.serve import scheduler
    from rackplan.sim.workload import make_requests

    reqs, log = make_requests(wl), {}
    sched = scheduler(plan, load_model(plan.model), load_hardware(plan.hardware), reqs, 0)
    if sched.prefill is not None:
        _record(sched.prefill.core, "prefill[0]", log, kv_blocks)
    _record(sched.decode.core, "decode[0]" if plan.disaggregated else "aggregated[0]", log, kv_blocks)
    replay(sched, lambda tick: P_S, lambda tick: 0.0, lambda tick: D_S)
    assert sched.finished
    return log


def _disaggregated(plan: Plan, wl: Workload, kv_blocks: int | None) -> dict:
    """The executor's disaggregated leaders (disagg.py's PrefillLoop / DecodeLoop scheduling) on a
    real c10d store, their steps on the fixed clock: a step is planned when its instance is free and
    has work, booked when it ends (a prefill step's hand-offs are posted then)."""
    from torch.distributed import HashStore

    from rackplan.executor.control import Control
    from rackplan.executor.serving import DecodeLeader, DecodeSeats, PrefillLeader, PrefillQueue
    from rackplan.sim.deployment import validate_plan
    from rackplan.sim.workload import make_requests

    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    reqs, log = make_requests(wl), {}
    isl, osl, cached = reqs.isl.tolist(), reqs.osl.tolist(), reqs.cached.tolist()
    caps = validate_plan(plan, model, hw)
    ctl = Control(HashStore(), reqs.arrival_s, 0)
    pcore = EngineCore.for_layout(plan.prefill[0], caps["prefill[0]"], model.attention.kind, isl, osl, cached)
    dcore = EngineCore.for_layout(plan.decode[0], caps["decode[0]"], model.attention.kind, isl, osl, cached)
    _record(pcore, "prefill[0]", log, kv_blocks)
    _record(dcore, "decode[0]", log, kv_blocks)
    need = [i - c for i, c in zip(isl, cached, strict=True)]
    pre = PrefillLeader("prefill[0].0", PrefillQueue(pcore), ctl, plan.router, ["prefill[0].0"],
                        [("decode[0].0", plan.decode[0].dp)], need)
    dec = DecodeLeader("decode[0].0", DecodeSeats(dcore), ctl)
    spec = plan.decode[0].speculation
    events = [(float(t), 0, rid) for rid, t in enumerate(reqs.arrival_s.tolist())]  # (time, kind, what)
    heapq.heapify(events)
    busy = {"p": None, "d": None}  # the step in flight: its work
    done = 0
    while done < len(isl):
        now, kind, what = heapq.heappop(events)
        if kind == 1:  # a prefill step ends: book it, post its hand-offs
            chunks, targets = busy["p"]
            busy["p"] = None
            for _, ch in pre.book(chunks):
                name, dp = targets[ch.rid]
                ctl.post(name, {"rid": ch.rid, "dp": dp, "length": isl[ch.rid]})
        elif kind == 2:  # a decode step ends
            seats = busy["d"]
            busy["d"] = None
            emitted = {s.rid: 1 + spec.num_tokens for per in seats for s in per} if spec else None
            done += len(dec.book(seats, emitted))
        if busy["p"] is None:
            pre.take(now)
            if pre.queue.pending:
                chunks = pre.form()
                if any(chunks):
                    busy["p"] = (chunks, {c.rid: pre.target() for per in chunks for c in per if c.last})
                    heapq.heappush(events, (now + P_S, 1, None))
        if busy["d"] is None:
            dec.take()
            if dec.seats.busy:
                seats = dec.seat()
                if any(seats) or any(dec.seats.chunks):
                    busy["d"] = seats
                    heapq.heappush(events, (now + D_S, 2, None))
    return log


CASES = [("disaggregated", None), ("disaggregated", FULL_KV), ("disaggregated-mtp", None),
         ("disaggregated-mtp", FULL_KV), ("colocated", None), ("colocated", FULL_KV), ("aggregated", None),
         ("aggregated", FULL_KV)]


@pytest.mark.parametrize("kind,kv_blocks", CASES)
def test_simulator_and_executor_form_the_same_batches(kind, kv_blocks):
    plan, wl = _plan(kind), from_dict(Workload, WORKLOAD)
    sim = _simulated(plan, wl, kv_blocks)
    drive = _disaggregated if kind.startswith("disaggregated") else _lockstep
    executor = drive(plan, wl, kv_blocks)
    assert sim.keys() == executor.keys()
    for pool in sim:
        assert len(sim[pool]) == len(executor[pool]), pool
        for step, (a, b) in enumerate(zip(sim[pool], executor[pool], strict=True)):
            assert a == b, f"{pool} step {step}"
    chunks = [c for pool in sim.values() for chunks, _ in pool for per in chunks for c in per]
    budget = max(layout["max_tokens_per_step"] for lays in PLANS[kind].values() if isinstance(lays, list)
                 for layout in lays)
    assert any(start > 0 for _, _, start in chunks)  # chunking happened (prompts beyond the budget)
    assert max(take for _, take, _ in chunks) <= budget


def _preempted(log: dict) -> set[int]:
    """Requests that decoded and later ran prefill chunks again (recomputed after a preemption)."""
    out = set()
    for steps in log.values():
        decoded: set[int] = set()
        for chunks, decodes in steps:
            out |= {rid for per in chunks for rid, _, _ in per if rid in decoded}
            decoded |= {rid for per in decodes for rid, _ in per}
    return out


@pytest.mark.parametrize("kind", ["disaggregated", "colocated", "aggregated"])
def test_a_full_kv_cache_preempts_and_recomputes(kind):
    """With FULL_KV blocks per rank sequences are preempted: a sequence decodes, its context comes
    back as prefill chunks from its first token (a recompute), then it decodes on at that context."""
    log = _simulated(_plan(kind), from_dict(Workload, WORKLOAD), FULL_KV)
    pool = [k for k in log if not k.startswith("prefill")][0]
    rid = min(_preempted(log))
    chunks = [c for ch, _ in log[pool] for per in ch for c in per if c[0] == rid]
    ctx = [c for _, dec in log[pool] for per in dec for r, c in per if r == rid]
    redo = max(i for i, c in enumerate(chunks) if c[2] == 0)  # the (last) recompute's first chunk: from token 0
    assert sum(take for _, take, _ in chunks[redo:]) in ctx  # it decodes on at the context it recomputed
    assert not _preempted(_simulated(_plan(kind), from_dict(Workload, WORKLOAD), None))
