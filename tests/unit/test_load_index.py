"""The least-loaded index (rackplan/policy/route.py LoadIndex) picks exactly what the scan over every
instance's load picks (least_loaded, ties included), and EngineCore's O(1) load and its touches keep
it current; a simulated deployment routes every request as the scan would."""
from __future__ import annotations

import dataclasses
import random

import pytest

from rackplan.policy import EngineCore, LoadIndex, Router, least_loaded
from rackplan.sim.simulator import simulate_specs
from rackplan.specs import Scenario, load_hardware, load_model, load_plan, load_profile, load_workload

pytestmark = pytest.mark.unit


@dataclasses.dataclass
class _Member:
    load: int


@pytest.mark.parametrize("n, spread", [(2, 2), (7, 3), (51, 4), (300, 1000)])
def test_index_picks_what_the_scan_picks_on_a_seeded_load_sequence(n, spread):
    """Loads drawn from `spread` values (few values: many ties, rotated by the decision count); a few
    instances move between picks, some touched without moving; every decision count is compared."""
    rng = random.Random(n * 1000 + spread)
    members = [_Member(rng.randrange(spread)) for _ in range(n)]
    index = LoadIndex(members)
    ties = 0
    for decision in range(1, 3001):
        for _ in range(rng.randrange(4)):
            i = rng.randrange(n)
            if rng.random() < 0.8:
                members[i].load = rng.randrange(spread)
            index.touch(i)
        expected = least_loaded([m.load for m in members], decision)
        assert index.least(decision) == expected, decision
        ties += sum(m.load == members[expected].load for m in members) > 1
    assert ties > 500 or spread > 10  # (few values: the tie break decided most picks)
    assert len(index.heap) <= 2 * len(index.groups) + 64  # gone loads do not pile up


def test_router_with_an_index_counts_and_picks_as_with_loads():
    members = [_Member(v) for v in (0, 0, 3, 0)]
    a, b = Router("least_loaded"), Router("least_loaded")
    index = LoadIndex(members)
    for k in range(10):
        assert a.pick("p", index) == b.pick("p", [m.load for m in members])
        members[k % 4].load += 1
        index.touch(k % 4)
    assert (a.decisions, a.turns) == (b.decisions, b.turns)


def _old_load(core: EngineCore) -> int:
    """The load as it was summed: waiting + arrived + incoming + running over every rank."""
    return core.num_waiting + len(core._arrived) + sum(core.incoming) + sum(len(r) for r in core.running)


@pytest.mark.parametrize("role", ["prefill", "decode", "both"])
def test_core_load_is_the_old_sum_and_every_move_is_touched(role):
    """A seeded run with a tight KV pool (decoders preempt and recompute): after every call the O(1) load
    equals the old per-rank sum, and whenever it or queued_tokens moved, `on_load` was called."""
    rng = random.Random(7)
    n = 400
    isl = [rng.randrange(4, 45) for _ in range(n)]
    osl = [rng.randrange(1, 30) for _ in range(n)]
    core = EngineCore(role, 3, 32, 4, 20, 4, isl, osl, [0] * n)
    touched = []
    core.on_load = lambda: touched.append(1)
    seen = (0, 0)
    nxt, preempted = 0, 0

    def check(what):
        nonlocal seen
        now = (core.load, core.queued_tokens)
        assert core.load == _old_load(core), what
        assert now == seen or touched, (what, seen, now)
        seen = now
        touched.clear()

    for _ in range(3000):
        for _ in range(rng.randrange(3)):
            if nxt < n:
                if role == "decode" and rng.random() < 0.5:
                    core.bind(nxt)
                    check("bind")
                core.add(nxt)
                check("add")
                nxt += 1
        batch = core.schedule()
        preempted += len(batch.preempted)
        check("schedule")
        core.finish(batch)
        check("finish")
    assert nxt == n and core.load == 0 and (preempted > 100 or role == "prefill")  # (decoders preempted)


def test_a_simulated_deployment_routes_as_the_scan(monkeypatch):
    """tiny-disagg with 5 prefill and 3 decode instances: each pick the index answers is the scan's
    over the same instances' loads (every decision checked)."""
    plan = load_plan("tiny-disagg")
    plan = dataclasses.replace(plan, num_gpus=8, prefill=(dataclasses.replace(plan.prefill[0], replicas=5),),
                               decode=(dataclasses.replace(plan.decode[0], replicas=3),))
    checked = []
    indexed = LoadIndex.least

    def least(self, turn):
        got = indexed(self, turn)
        assert got == least_loaded([m.load for m in self.members], turn)
        checked.append(len(self.members))
        return got

    monkeypatch.setattr(LoadIndex, "least", least)
    wl = dataclasses.replace(load_workload("tiny-chat"), num_requests=300)
    sc = Scenario(plan, load_model(plan.model), load_hardware(plan.hardware), wl, load_profile("cpu-local"))
    simulate_specs(sc, num_requests=300, seed=3)
    assert checked.count(5) == 300 and checked.count(3) == 300  # every request's prefill and decode pick


def test_seat_many_seats_as_seat_does_one_by_one():
    """Warm seating in bulk (EngineCore.seat_many, a heap of rank scores) leaves the core as `seat`
    called per sequence does: the same ranks, refusals (full seats, short blocks), sums and endings."""
    rng = random.Random(11)
    n = 300
    ctx = [float(rng.randrange(1, 90)) for _ in range(n)]
    left = [rng.randrange(1, 40) for _ in range(n)]
    cores = [EngineCore("decode", 5, 64, 24, 200, 4, [0] * n, [0] * n, [0] * n) for _ in range(2)]
    for core in cores:  # a core already running a few sequences (uneven scores)
        for rid in range(3):
            core.seat(n + rid, 10.0, 5)
    one = [rid for rid in range(n) if not cores[0].seat(rid, ctx[rid], left[rid])]
    assert cores[1].seat_many(range(n), ctx, left) == one and 0 < len(one) < n - 50  # (some refused: short of blocks)
    a, b = cores
    assert a.rank_of == b.rank_of and a.running == b.running and a.seqs == b.seqs and a._ending == b._ending
    assert a._score == b._score and a.batch.tolist() == b.batch.tolist() and a.ctx.tolist() == b.ctx.tolist()
    assert a._most_blocks == b._most_blocks and a.load == b.load == n + 3 - len(one)
