"""Simulator behaviour on tiny seeded workloads: exact timelines, conservation, Little's law,
low-load latency and saturation at the cost model's capacity."""
import dataclasses

import numpy as np
import pytest

from rackplan.sim.cost.step import CostContext
from rackplan.sim.cost.transfer import kv_transfer_seconds
from rackplan.sim.pricer import StepPricer
from rackplan.sim.simulator import simulate, simulate_specs
from rackplan.specs import (
    Arrival,
    Layout,
    LengthDist,
    Plan,
    Scenario,
    Workload,
    load_hardware,
    load_model,
    load_profile,
)

pytestmark = pytest.mark.integration
PROF = load_profile("datasheet")
MODEL = load_model("deepseek-v3")
HW = load_hardware("h200-sxm")


def small_plan(decode_batch=64, prefill_dp=8, decode_dp=8, imbalance=1.2):
    """A 16-GPU plan; a fixed expert imbalance (no per-step routing draws) keeps every timestamp
    exactly the priced path; imbalance=None samples it per step (sim/pricer.py)."""
    return Plan(name="t", model="deepseek-v3", hardware="h200-sxm", num_gpus=16,
                prefill=(Layout(role="prefill", dp=prefill_dp, max_tokens_per_step=8192, moe_imbalance=imbalance),),
                decode=(Layout(role="decode", dp=decode_dp, max_batch_per_rank=decode_batch,
                               moe_imbalance=imbalance),))


def wl(rate=None, conc=None, isl=1000, osl=50, n=50, seed=0):
    arr = Arrival(kind="poisson", rate=rate) if rate else Arrival(kind="concurrency", concurrency=conc)
    return Workload(name="w", arrival=arr, isl=LengthDist(kind="fixed", value=isl),
                    osl=LengthDist(kind="fixed", value=osl), num_requests=n, seed=seed)


def _prices(plan):
    pre = StepPricer(CostContext(MODEL, HW, plan.prefill[0], PROF))
    dec = StepPricer(CostContext(MODEL, HW, plan.decode[0], PROF))
    return pre, dec


def test_exact_timeline_two_requests():
    """Two seeded Poisson requests far enough apart that each runs alone: every timestamp is the
    arrival plus the step prices along its path (prefill step, KV transfer, decode steps)."""
    plan = small_plan()
    w = wl(rate=1.0, isl=1000, osl=4, n=2, seed=3)
    arrivals = np.cumsum(np.random.default_rng(3).exponential(1.0, size=2))
    res = simulate_specs(Scenario(plan, MODEL, HW, w, PROF))
    pre, dec = _prices(plan)
    p1 = pre.step([[(0, 1000, 0)]] + [[]] * 7)
    kv = kv_transfer_seconds(MODEL, HW, PROF, 1000, same_domain=False)
    zeros = np.zeros(8)

    def dstep(batches):
        b = zeros.copy()
        b[: len(batches)] = [1] * len(batches)
        c = zeros.copy()
        c[: len(batches)] = batches
        return dec.decode(b, c)

    # request 0: prefill alone, KV transfer, then 4 decode steps on its own (contexts 1000..1003)
    t = arrivals[0] + p1 + kv
    ttft0 = t + dstep([1000]) - arrivals[0]
    assert res.ttft_s[0] == pytest.approx(ttft0, rel=1e-12)
    # request 1 arrives after request 0 left prefill: its prefill starts on arrival
    assert arrivals[1] > arrivals[0] + p1
    ready1 = arrivals[1] + p1 + kv
    # decode steps of request 0, then request 1 joins at the first step boundary after it is ready
    steps0 = [dstep([1000 + i]) for i in range(4)]
    ends0 = arrivals[0] + p1 + kv + np.cumsum(steps0)
    assert ready1 > ends0[-1]  # no overlap at this seed: request 1 decodes alone too
    e2e1 = ready1 + sum(dstep([1000 + i]) for i in range(4)) - arrivals[1]
    assert res.e2e_s[0] == pytest.approx(ends0[-1] - arrivals[0], rel=1e-12)
    assert res.e2e_s[1] == pytest.approx(e2e1, rel=1e-12)
    assert res.tpot_s[0] == pytest.approx((ends0[-1] - (arrivals[0] + ttft0)) / 3, rel=1e-9)


def test_shared_decode_steps_when_overlapping():
    """Closed loop with 2 concurrent requests: both prefill in one step, decode together."""
    plan = small_plan()
    w = wl(conc=2, isl=1000, osl=3, n=2)
    res = simulate_specs(Scenario(plan, MODEL, HW, w, PROF))
    pre, dec = _prices(plan)
    p = pre.step([[(0, 1000, 0)], [(1, 1000, 0)]] + [[]] * 6)
    kv = kv_transfer_seconds(MODEL, HW, PROF, 1000, same_domain=False)
    b = np.zeros(8)
    b[:2] = 1  # least-loaded admission puts them on different ranks
    steps = [dec.decode(b, b * (1000 + i)) for i in range(3)]
    # the client sends both at t = 0; the prefill instance's 8 API-server processes (one per DP rank on an
    # 8-GPU host) tokenise the two prompts side by side, so both reach the engine after one prompt's time
    fe = PROF.host_for("prefill").api_per_prompt_token_s * 1000
    assert res.ttft_s[0] == pytest.approx(fe + p + kv + steps[0], rel=1e-12)
    assert res.e2e_s[1] == pytest.approx(fe + p + kv + sum(steps), rel=1e-12)


def test_routing_imbalance_drawn_per_step_gives_itl_a_tail():
    """Sampled imbalance: each decode step draws its routing imbalance (seeded), so inter-token
    latencies spread around the mean step; the same seed gives the same run, another seed another."""
    plan = small_plan(decode_batch=8, imbalance=None)
    w = wl(conc=16, isl=500, osl=200, n=64)
    a, b = simulate_specs(Scenario(plan, MODEL, HW, w, PROF),
                          seed=1), simulate_specs(Scenario(plan, MODEL, HW, w, PROF), seed=1)
    np.testing.assert_equal(a.metrics, b.metrics)  # NaN standard errors (short window) compare equal
    m = a.metrics
    assert m["itl_p99_s"] > m["itl_p50_s"]
    fixed = simulate_specs(Scenario(small_plan(decode_batch=8, imbalance=1.2), MODEL, HW, w, PROF), seed=1).metrics
    assert fixed["itl_p99_s"] != m["itl_p99_s"]  # the draws, not only batch composition, move the steps
    c = simulate_specs(Scenario(plan, MODEL, HW, w, PROF), seed=2).metrics
    assert c["itl_p99_s"] != m["itl_p99_s"]


def test_conservation():
    plan = small_plan()
    w = dataclasses.replace(wl(rate=20.0, n=300), isl=LengthDist(kind="uniform", low=100, high=3000),
                            osl=LengthDist(kind="lognormal", mean=200, sigma=0.8, max=2000))
    res = simulate_specs(Scenario(plan, MODEL, HW, w, PROF))
    from rackplan.sim.workload import make_requests
    reqs = make_requests(w)
    assert np.isfinite(res.e2e_s).all()  # every request finished
    assert res.metrics["output_tokens"] == reqs.osl.sum()
    assert (res.ttft_s > 0).all() and (res.e2e_s >= res.ttft_s).all()


def test_littles_law_long_run():
    plan = small_plan()
    w = dataclasses.replace(wl(rate=15.0, n=3000), osl=LengthDist(kind="uniform", low=20, high=400))
    res = simulate_specs(Scenario(plan, MODEL, HW, w, PROF))
    m = res.metrics  # over the steady-state window: L = lambda x W
    assert m["mean_in_system"] == pytest.approx(m["offered_rps"] * m["e2e_mean_s"], rel=0.02)


def test_low_load_ttft_is_unloaded_path():
    plan = small_plan()
    w = wl(conc=1, isl=2000, osl=2, n=5)  # one request at a time: nothing queues
    res = simulate_specs(Scenario(plan, MODEL, HW, w, PROF))
    pre, dec = _prices(plan)
    b = np.zeros(8)
    b[0] = 1
    fe = PROF.host_for("prefill").api_per_prompt_token_s * 2000  # the API server tokenises the prompt first
    expected = (fe + pre.step([[(0, 2000, 0)]] + [[]] * 7) + kv_transfer_seconds(MODEL, HW, PROF, 2000, False)
                + dec.decode(b, b * 2000))
    assert res.ttft_s == pytest.approx(np.full(5, expected), rel=1e-9)


def test_throughput_saturates_at_capacity():
    """Closed loop with far more requests than slots: decode runs full at max batch, so output
    tokens/s = ranks x max_batch / step(max_batch, context)."""
    plan = Plan(name="t", model="deepseek-v3", hardware="h200-sxm", num_gpus=16,
                prefill=(Layout(role="prefill", dp=8, max_tokens_per_step=16384),),
                decode=(Layout(role="decode", dp=8, max_batch_per_rank=16),))
    w = wl(conc=512, isl=200, osl=400, n=1500)
    res = simulate_specs(Scenario(plan, MODEL, HW, w, PROF))
    dec = StepPricer(CostContext(MODEL, HW, plan.decode[0], PROF))
    full = np.full(8, 16.0)
    step = dec.decode(full, full * 400)  # mean context 200 + 400/2
    capacity = 8 * 16 / step
    achieved = res.metrics["output_tokens"] / res.metrics["duration_s"]
    assert achieved == pytest.approx(capacity, rel=0.08)
    assert achieved <= capacity * 1.03


def test_aggregated_and_default_plans_run():
    from rackplan.specs import load_plan, load_workload
    plan = load_plan("v41-flash-gb300-single-user")
    res = simulate(plan, load_workload("single-user"), PROF, num_requests=2)
    assert res.metrics["tps_per_user"] > 100
    assert np.isfinite(res.e2e_s).all()


def test_colocated_prefill_and_decode_take_turns():
    """Colocated pools time-share GPUs: a prefill step delays the decode steps behind it, so TPOT
    grows under load while the GPU count halves."""
    base = small_plan()
    coloc = dataclasses.replace(base, colocated=True)
    assert coloc.gpus_used == 8 and base.gpus_used == 16
    w = wl(rate=8.0, isl=2000, osl=100, n=200)
    sep = simulate_specs(Scenario(base, MODEL, HW, w, PROF)).metrics
    shared = simulate_specs(Scenario(coloc, MODEL, HW, w, PROF)).metrics
    assert shared["tpot_p90_s"] > sep["tpot_p90_s"] * 1.2
    assert shared["output_tps_per_gpu"] > sep["output_tps_per_gpu"]


def test_closed_loop_front_end_splits_the_next_step():
    """Prefill-only closed loop (OSL 1), 4 in flight, 8 requests, a budget of 4 prompts, one API-server
    process tokenising each 2,000-token prompt in tau = 2 ms. By hand: the first prompt enters at tau and
    runs alone (the engine steps on the first queued request); the other three join the next step; each
    finished request's replacement enters tau after its step, while the other step runs. So the steps carry
    1, 3, 1, 3 prompts and the last ends at tau + p(1) + p(3) + p'(1) + p(3), where p(k) is a k-prompt step
    (a run of k requests without the front end: one step) and p'(1) a 1-prompt step after another (the second
    step of a 1-in-flight run of 2, less p(1)). Without the front end: two steps of 4."""
    plan = Plan(name="fe", model="deepseek-v3", hardware="h200-sxm", num_gpus=8,
                aggregated=(Layout(role="both", dp=1, tp=8, max_tokens_per_step=8000),))
    tau = 2000 * 1e-6
    with_fe = PROF.with_host(lambda h: dataclasses.replace(h, api_per_prompt_token_s=1e-6))
    no_fe = PROF.with_host(lambda h: dataclasses.replace(h, api_per_prompt_token_s=0.0))

    def run(prof, conc, n):
        return simulate_specs(Scenario(plan, MODEL, HW, wl(conc=conc, isl=2000, osl=1, n=n), prof))

    p1, p3 = (run(no_fe, k, k).metrics["duration_s"] for k in (1, 3))
    p1_next = run(no_fe, 1, 2).metrics["duration_s"] - p1
    res = run(with_fe, 4, 8)
    assert sum(res.steps.values()) == 4
    assert res.metrics["duration_s"] == pytest.approx(tau + p1 + p3 + p1_next + p3, rel=1e-9)
    assert p1 > 3 * tau  # (the replacements of a 3-prompt step all enter while the 1-prompt step runs)
    assert sum(run(no_fe, 4, 8).steps.values()) == 2
