"""Planner pieces: search space, analytic estimate, Pareto front, what-if keys."""
from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackplan.sim.search import combine, pareto, planner, space, whatif
from rackplan.sim.search.estimate import Pricer, price_decode, price_prefill, traffic_of
from rackplan.specs import SLO, Layout, Scenario, SpecError, load_hardware, load_model, load_profile, load_workload

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def tiny():
    return (load_model("tiny-moe"), load_hardware("cpu-local"), load_profile("datasheet"),
            load_workload("tiny-chat"))


TINY_SLO = SLO(1.0, 0.2)


def _request(tiny, gpus=4, slo=TINY_SLO, **kw):
    m, hw, prof, wl = tiny
    return planner.Request(m, hw, prof, wl, gpus, slo, "tiny-moe", "cpu-local", "tiny-chat",
                           simulate=False, **kw)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=40))
def test_pareto_front_is_non_dominated_and_covers_all(points):
    x, y = (lambda p: p[0]), (lambda p: p[1])
    fr = pareto.front(points, x, y)
    for a in fr:
        assert not any(pareto.dominated(a, b, x, y) for b in points)
    for p in points:  # every point is on the front or dominated by (or equal to) a front point
        assert p in fr or any(pareto.dominated(p, f, x, y) or f == p for f in fr)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 5)), min_size=1, max_size=60))
def test_streaming_front_equals_the_front_of_the_sorted_list(points):
    """Streamed in any order, ties on both axes going to the smaller key, as `front` of the
    key-sorted list keeps the first (coarse integers make ties common)."""
    x, y, key = (lambda p: p[0]), (lambda p: p[1]), (lambda p: p[2])
    fr = pareto.StreamingFront(x, y, key)
    for p in points:
        fr.add(p)
    assert fr.items() == pareto.front(sorted(points, key=key), x, y)


def test_search_keeps_the_front_and_a_bounded_sample(tiny):
    req = _request(tiny, gpus=8)
    priced = planner.price_all(req)
    every = sorted(planner.candidates(req, priced), key=combine.Candidate.sort_key)
    search = planner.estimate(req, priced)
    x, y = (lambda c: c.tps_user), (lambda c: c.tps_gpu)
    assert [c.summary for c in search.front] == [c.summary for c in pareto.front(every, x, y)]
    assert search.count == len(every) and len(search.sample) <= planner.SAMPLE + len(search.front)
    d = pareto.Decimated(10)
    for i in range(1000):
        d.add(i)
    assert len(d.items()) <= 10 and d.items() == list(range(0, 1000, d.stride))


@pytest.mark.parametrize("depth,rate,expected", [(0, 0.8, 1.0), (1, 0.8, 1.8), (2, 0.5, 1.75)])
def test_acceptance_length(depth, rate, expected):
    assert space.acceptance_length(depth, rate) == pytest.approx(expected)


def test_enumerated_layouts_fit_in_memory():
    m, hw = load_model("deepseek-v3"), load_hardware("h200-sxm")
    s = space.SearchSpace()
    lays = space.prefill_layouts(m, hw, 32, s) + space.decode_layouts(m, hw, 32, s)
    assert lays and all(space.fits(m, hw, lay) for lay in lays)
    assert min(lay.gpus for lay in lays) == 8  # DeepSeek-V3 FP8 needs 8 x 141 GB
    assert any(lay.dp == 16 for lay in lays)  # EP beyond the 8-GPU NVLink domain is searched


def test_budget_too_small_for_weights_is_a_spec_error():
    m, hw = load_model("deepseek-v3"), load_hardware("h200-sxm")
    with pytest.raises(SpecError, match="at least 8 GPUs"):
        space.check_budget(m, hw, 4, disaggregated_only=False)


def test_decode_table_is_monotone_and_rates_grow_with_batch(tiny):
    m, hw, prof, wl = tiny
    pr, tr = Pricer(m, hw, prof), traffic_of(wl)
    unit = price_decode(pr, Layout("decode", dp=2, max_batch_per_rank=64), tr, (1, 2, 4, 8, 16, 32, 64))
    assert list(unit.step_s) == sorted(unit.step_s)
    rates = [unit.rate(i) for i in range(len(unit.batches))]
    assert rates == sorted(rates)
    pre = price_prefill(pr, Layout("prefill", dp=2), tr)
    assert pre.max_rate(10.0) > pre.max_rate(pre.light_s * 1.5) > 0


def test_estimated_candidates_all_meet_the_slos(tiny):
    req = _request(tiny)
    cands = list(planner.candidates(req, planner.price_all(req)))
    assert cands
    for c in cands:
        assert c.ttft_p90_s <= combine.SLO_MARGIN * req.slo.ttft_p90_s + 1e-12
        assert c.tpot_s <= combine.SLO_MARGIN * req.slo.tpot_p90_s + 1e-12
        assert c.gpus <= req.num_gpus


def test_plan_is_independent_of_worker_count(tiny):
    a = planner.plan(_request(tiny, workers=1))
    b = planner.plan(_request(tiny, workers=2))
    assert a.plan == b.plan
    assert [c.summary for c in a.front] == [c.summary for c in b.front]


def test_whatif_keys(tiny):
    m, hw, prof, wl = tiny
    base = Scenario(None, m, hw, wl, prof)
    assert whatif.apply(base, "cpu.overhead_scale", 1) == base
    assert whatif.apply(base, "hardware.nvlink_gbps", 2).hw.scaleup_bw == 2e9
    assert whatif.apply(base, "model.moe.top_k", 2).model.moe.top_k == 2
    assert whatif.apply(base, "profile.mem_eff", 0.5).profile.mem_eff == 0.5
    for bad in ("hardware.warp_drive", "cpu.speed", "nothing.at_all", "model.moe.top_k.x"):
        with pytest.raises(SpecError):
            whatif.apply(base, bad, 1)
    with pytest.raises(SpecError):
        whatif.apply(base, "model.moe.top_k", 0)  # out of range: the spec's own check
    assert whatif.parse_set("model.moe.top_k=4,6,8") == ("model.moe.top_k", [4, 6, 8])
    assert len(whatif.combinations([("a", [1, 2]), ("b", [3, 4, 5])])) == 6


@pytest.mark.parametrize("key,values", [("hardware.nvlink_gbps", (450, 900, 1800)),
                                        ("cpu.overhead_scale", (2.0, 1.0, 0.5))])
def test_faster_hardware_never_slows_a_step(key, values):
    m, hw, prof = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_profile("datasheet")
    base = Scenario(None, m, hw, load_workload("isl4k-osl1k"), prof)
    lays = [Layout("decode", dp=16, dbo=True), Layout("decode", dp=8, async_scheduling=False, cuda_graphs=False)]
    for lay in lays:
        times = []
        for v in values:
            s = whatif.apply(base, key, v)
            pr = Pricer(s.model, s.hw, s.profile)
            times.append((pr.decode(lay, 64.0, 4500.0).seconds,
                          pr.prefill(dataclasses.replace(lay, role="prefill"), (4000.0,), 0.0).seconds))
        for slower, faster in zip(times, times[1:], strict=False):
            assert faster[0] <= slower[0] + 1e-12 and faster[1] <= slower[1] + 1e-12


@pytest.mark.parametrize("model", ["deepseek-v4.1-flash", "deepseek-v3"])
@pytest.mark.parametrize("hw_name,gpus", [("gb300-nvl72", n) for n in (72, 144, 288, 576)]
                         + [("h200-sxm", n) for n in (16, 32, 64)])
def test_search_space_only_proposes_layouts_validation_accepts(model, hw_name, gpus):
    """At any GPU count every proposed layout splits experts + redundant slots evenly over its EP
    ranks (what validate_plan demands) and fits; an EP size that does not split the experts gets
    the fewest EPLB slots that do (V4.1-Flash DEP72: 384 + 48; V3: 256 + 32), and the report says so."""
    m, hw, s = load_model(model), load_hardware(hw_name), space.SearchSpace()
    lays = space.prefill_layouts(m, hw, gpus, s) + space.decode_layouts(m, hw, gpus, s) + \
        space.aggregated_layouts(m, hw, gpus, s)
    assert lays
    for lay in lays:
        assert (m.moe.num_experts + lay.eplb.redundant_experts) % lay.ep_size == 0, lay.tag
        assert space.fits(m, hw, lay)
    uneven = [lay for lay in lays if m.moe.num_experts % lay.ep_size]
    assert all(lay.eplb.redundant_experts == space.required_redundant(m, lay.ep_size) for lay in uneven)
    if hw.domain_size == 72:
        assert {lay.eplb.redundant_experts for lay in uneven if lay.ep_size == 72} == {(-m.moe.num_experts) % 72}
        assert any("EP72" in note and "redundant EPLB slots" in note for note in space.left_out(m, hw, gpus, s))


def test_an_ep_size_that_needs_more_slots_than_experts_is_skipped_with_its_reason():
    m, hw, s = load_model("qwen3-235b-a22b"), load_hardware("gb300-nvl72"), space.SearchSpace()
    assert space.required_redundant(m, 512) == 384 > m.moe.num_experts
    assert not [lay for lay in space.decode_layouts(m, hw, 576, s) if lay.ep_size == 512]
    assert any("EP512" in note and "redundant slots" in note for note in space.left_out(m, hw, 576, s))


def test_whatif_pool_keys_change_every_instance_of_one_pool():
    """--set decode.<Layout field> / decode.mtp: EPLB, DBO and speculation are what-if knobs of the
    plan's pools (they were refused as unknown keys); a value validate_plan refuses is a SpecError."""
    from rackplan.specs import EPLBConfig, load_plan

    plan = load_plan("v3-replay-dep8")
    m, hw = load_model(plan.model), load_hardware(plan.hardware)
    base = Scenario(plan, m, hw, load_workload("isl4k-osl1k"), load_profile("datasheet"))
    pool = "decode" if plan.decode else "aggregated"
    lay = getattr(plan, pool)[0]
    assert lay.eplb.policy == "none"
    with pytest.raises(SpecError, match="field .policy."):  # a plan.yaml with slots policy 'none' leaves unused
        EPLBConfig(8, "none")
    with pytest.raises(SpecError, match="hierarchical or global"):
        whatif.apply(base, f"{pool}.eplb.redundant_experts", lay.ep_size)
    s = whatif.changed_specs(base, ((f"{pool}.eplb.redundant_experts", lay.ep_size),
                                    (f"{pool}.eplb.policy", "hierarchical")))  # either --set order
    assert {(x.eplb.redundant_experts, x.eplb.policy) for x in getattr(s.plan, pool)} == {(lay.ep_size,
                                                                                         "hierarchical")}
    assert all(x.dbo is (not lay.dbo) for x in getattr(whatif.apply(base, f"{pool}.dbo", not lay.dbo).plan, pool))
    one = getattr(whatif.apply(base, f"{pool}.mtp", 1).plan, pool)[0].speculation  # V3: one MTP module
    assert one.num_tokens == 1 and one.acceptance_length == space.acceptance_length(1, 0.8)
    assert getattr(whatif.apply(base, f"{pool}.mtp", 0).plan, pool)[0].speculation is None
    base = whatif.apply(base, f"{pool}.eplb.policy", "global")
    for key, bad in ((f"{pool}.eplb.redundant_experts", 1), (f"{pool}.mtp", 3), (f"{pool}.warp", 1),
                     (f"{pool}.eplb.policy", "random")):
        with pytest.raises(SpecError) as exc:
            whatif.apply(base, key, bad)
        assert exc.value.where == "--set"
    with pytest.raises(SpecError):
        whatif.apply(Scenario(None, m, hw, base.workload, base.profile), f"{pool}.dbo", True)  # no plan


def test_report_step_split_says_estimate_and_tokens_per_step():
    """The report's op-by-op split is the cost model's (labelled so), and a speculative decode step
    says how many tokens it emits per sequence (its time is not the TPOT)."""
    from types import SimpleNamespace

    from rackplan.sim.search import report
    from rackplan.specs import Speculation

    m, hw, wl = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_workload("isl4k-osl1k")
    lay = Layout("decode", dp=16, speculation=Speculation(1, 1.8))
    cand = SimpleNamespace(decode=(lay,), aggregated=(), prefill=(), batch_per_rank=55.0)
    res = SimpleNamespace(request=SimpleNamespace(model=m, hw=hw, profile=load_profile("datasheet"), workload=wl),
                          winner=SimpleNamespace(cand=cand))
    text = "\n".join(report._winner_steps(res))
    assert "DEP16 decode step at 55 sequences per rank" in text and "1.8 tokens per sequence per step" in text


def test_whatif_pool_key_that_adds_gpus_grows_the_budget():
    """--set decode.replicas=2 on a plan whose num_gpus its instances fill was refused ('num_gpus: expected at
    least the GPUs the instances use', a field --set cannot reach): the what-if is the bigger deployment."""
    from rackplan.specs import load_plan

    plan = load_plan("tiny-disagg")
    plan = dataclasses.replace(plan, num_gpus=plan.gpus_used)
    m, hw = load_model(plan.model), load_hardware(plan.hardware)
    base = Scenario(plan, m, hw, load_workload("tiny-chat"), load_profile("datasheet"))
    more = whatif.apply(base, "decode.replicas", 2).plan
    assert [lay.replicas for lay in more.decode] == [2] * len(plan.decode)
    assert more.num_gpus == more.gpus_used == plan.gpus_used + sum(lay.total_gpus for lay in plan.decode)
    assert whatif.apply(base, "decode.max_batch_per_rank", 4).plan.num_gpus == plan.num_gpus  # no GPUs: as was


def test_fit_rate_bisects_to_the_highest_dyadic_rate_within_the_limit_evaluating_each_rate_once():
    calls = []

    def ttft_at(rate: float) -> float:  # TTFT equal to the rate: the limit is the answer
        calls.append(rate)
        return rate

    rate, ttft = combine.fit_rate(ttft_at, 1.0, 0.3)
    assert rate == 314572 / 2**20  # floor(0.3 * 2^20) / 2^20: 20 halvings of [0, 1]
    assert ttft == rate  # the TTFT evaluated there, not evaluated again
    assert len(calls) == len(set(calls)) < 21  # rate_hi, then fewer than one per halving
    assert combine.fit_rate(ttft_at, 0.2, 0.3) == (0.2, 0.2)  # rate_hi within the limit: one call
    assert combine.fit_rate(lambda r: 1.0 + r, 1.0, 0.3) == (0.0, float("inf"))  # none within it


def _plain_bisection(ttft_at, rate_hi: float, limit_s: float) -> float:
    """fit_rate's specification: 20 halvings of [0, rate_hi], every one evaluated."""
    lo, hi = 0.0, rate_hi
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ttft_at(mid) <= limit_s else (lo, mid)
    return lo


def test_fit_rate_gives_the_plain_bisections_rate_bit_for_bit_on_queue_shaped_ttfts_with_fewer_evaluations():
    """A queue's TTFT (a service time plus a wait that blows up at capacity, inf past it): fit_rate
    skips the halvings a rate already seen decides and narrows by regula falsi first, so the rate is
    the plain bisection's to the bit over many limits and capacities, from far fewer evaluations."""
    import random

    rnd = random.Random(7)
    plain_calls = fit_calls = 0
    for _ in range(300):
        cap, service, limit = rnd.uniform(0.01, 5000.0), rnd.uniform(0.05, 1.0), rnd.uniform(0.1, 3.0)
        power = rnd.choice((1.0, 2.0, 3.5))

        def ttft_at(rate: float, cap=cap, service=service, power=power) -> float:
            rho = rate / cap
            return math.inf if rho >= 1.0 else service + service * rho ** power / (1.0 - rho)

        rate_hi = cap * rnd.uniform(0.5, 1.5)
        counted: list[float] = []
        plain: list[float] = []
        rate, ttft = combine.fit_rate(lambda r, seen=counted, f=ttft_at: seen.append(r) or f(r), rate_hi, limit)
        want = _plain_bisection(lambda r, seen=plain, f=ttft_at: seen.append(r) or f(r), rate_hi, limit)
        if ttft_at(rate_hi) <= limit:
            assert (rate, ttft) == (rate_hi, ttft_at(rate_hi))
            continue
        assert rate == want and (ttft == ttft_at(rate) if rate > 0 else ttft == math.inf)
        assert len(counted) == len(set(counted))
        fit_calls, plain_calls = fit_calls + len(counted), plain_calls + len(plain) + 1
    assert fit_calls < 0.7 * plain_calls


def _scalar_family(pr, prefills, dec, st):
    """disaggregated's candidates one by one (`_disagg_candidate`, the scalar estimate)."""
    for top in range(len(dec.batches)):
        if dec.tpot(top) > combine.SLO_MARGIN * st.slo.tpot_p90_s:
            break
        for pu, p_rate in prefills:
            for n_p, n_d in combine._pool_sizes(pu.gpus, dec.gpus, p_rate, dec.rate(top), st):
                c = combine._disagg_candidate(pr, pu, n_p, dec, n_d, top, p_rate, dec.rate(top), st)
                if c is not None:
                    yield c


def _figures(c):
    return (c.summary, c.gpus, c.rate_rps, c.ttft_p90_s, c.tpot_s, c.batch_per_rank, c.osl, c.capacity_rps,
            c.prefill, c.decode)


def test_vectorised_estimate_equals_the_scalar_one_bit_for_bit_on_seeded_families():
    """`combine.family` (numpy over a decode shape's candidates) gives `_disagg_candidate`'s candidates, in its
    order, every figure equal to the bit, on seeded synthetic step tables and prefill shapes over budgets from
    16 to 5,000 GPUs (both pool-size regimes of sim/search/pools.py), where every branch of the fit occurs:
    TTFT within the limit at the rate cap, a bisected rate, no rate at all, TPOT over the SLO."""
    import random

    from rackplan.sim.search.estimate import DecodeUnit, PrefillUnit, Traffic

    rnd = random.Random(19)
    pr = Pricer(load_model("deepseek-v3"), load_hardware("gb300-nvl72"), load_profile("datasheet"))
    seen = {"at cap": 0, "bisected": 0, "dropped": 0}
    total = 0
    for trial in range(24):
        tr = Traffic(rnd.uniform(500, 8000), rnd.uniform(100, 2000), 0.0)
        slo = SLO(rnd.uniform(0.3, 4.0), rnd.uniform(0.01, 0.08))
        st = combine.Setting(rnd.choice((16, 72, 300, 576, 1200, 5000)), slo, tr)
        batches = (1, 2, 4, 8, 16, 32, 64, 128, 256)[:rnd.randint(2, 9)]
        acc = (1.0, 2.5)[trial % 2]  # 2.5: a step of the smallest batch over the TPOT SLO, which TTFT's budget assumes
        step, steps = slo.tpot_p90_s * acc * rnd.uniform(0.45, 0.9), []
        for _b in batches:
            steps.append(step)
            step *= rnd.uniform(1.0, 2.4)  # (above 2: a rate table that falls somewhere)
        dp = rnd.choice((1, 2, 4, 8, 16))
        dec = DecodeUnit(Layout("decode", dp=dp, max_batch_per_rank=max(batches)), acc, batches, tuple(steps),
                         osl=tr.osl)
        budget, units = combine.SLO_MARGIN * slo.ttft_p90_s - slo.tpot_p90_s, []
        for p_dp in (1, 2, 4, 8, 16)[rnd.randint(0, 3):]:  # with acc 2.5, a 16-GPU one fills the budget alone: no
            light = budget * (1 - 1e-4) if p_dp == 16 and acc > 1 else rnd.uniform(0.05, budget)  # rate passes
            units.append(PrefillUnit(Layout("prefill", dp=p_dp), rnd.uniform(0.5, 60.0), light,
                                     light * rnd.uniform(1.0, 4.0)))
        prefills = combine.best_prefill_per_size(units, budget)
        want = list(_scalar_family(pr, prefills, dec, st))
        got = list(combine.disaggregated(pr, prefills, dec, st))
        assert [_figures(c) for c in got] == [_figures(c) for c in want]
        total += len(got)
        p_rate = {pu.gpus: r for pu, r in prefills}
        for c in want:
            (pre,), (dec_lay,) = c.prefill, c.decode
            cap = min(pre.replicas * p_rate[pre.gpus],
                      dec_lay.replicas * dec.rate(dec.batches.index(dec_lay.max_batch_per_rank)))
            seen["at cap" if c.rate_rps == cap else "bisected"] += 1
        rows = sum(1 for top in range(len(batches)) if dec.tpot(top) <= combine.SLO_MARGIN * slo.tpot_p90_s
                   for pu, p in prefills for _ in combine._pool_sizes(pu.gpus, dec.gpus, p, dec.rate(top), st))
        seen["dropped"] += rows - len(want)
    assert total > 1000 and all(seen.values()), seen


def test_p90_output_length_is_numpys_percentile(tiny):
    import numpy as np

    from rackplan.sim.search import front
    from rackplan.sim.workload import make_requests

    wl = tiny[3]
    osl = make_requests(wl, min(wl.num_requests, 4000)).osl
    assert front.p90_output_length(wl) == float(np.percentile(osl, 90))
