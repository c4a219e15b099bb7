"""The host model (sim/cost/host.py): each part against a hand-derived value, the two-stage
pipeline of async scheduling, the API server as a bound on the decode step, and the what-if
knobs that change one part at a time."""
import dataclasses
import math

import pytest

from rackplan.sim.cost import host
from rackplan.sim.cost.step import CostContext, RankWork, Step, decode_step, prefill_step
from rackplan.sim.search import whatif
from rackplan.specs import (
    HostParams,
    Layout,
    Scenario,
    SpecError,
    Speculation,
    load_hardware,
    load_model,
    load_plan,
    load_profile,
)

pytestmark = pytest.mark.unit
V3, GB300 = load_model("deepseek-v3"), load_hardware("gb300-nvl72")  # 61 layers; 4 GPUs per host
# round numbers (seconds) so every expected value below is arithmetic on the page
HP = HostParams(schedule_step_s=100e-6, schedule_per_seq_s=10e-6, prepare_step_s=50e-6, prepare_per_seq_s=5e-6,
                prepare_per_token_s=1e-6, launch_s=4e-6, kernels_per_layer=24, graph_launch_s=50e-6,
                dp_sync_s=50e-6, dp_jitter=0.0, sample_step_s=50e-6, sample_per_seq_s=2e-6, sample_per_draft_s=1e-6,
                spec_sync_s=300e-6, output_step_s=50e-6, output_per_token_s=12e-6, api_per_token_s=15e-6,
                api_per_chunk_s=10e-6, api_per_prompt_token_s=1e-6)
PROF = dataclasses.replace(load_profile("datasheet"), host=HP)
SPEC = Speculation(num_tokens=2, acceptance_length=2.5)


def cost(batch=8, prof=PROF, ctx=1000, **lay):
    layout = Layout(role="decode", **{"dp": 8, **lay})
    return decode_step(CostContext(V3, GB300, layout, prof), batch, batch * ctx)


def test_schedule_per_step_and_per_sequence():
    assert cost(8).host.part("host.schedule") == pytest.approx(100e-6 + 8 * 10e-6)  # 180 us


def test_prepare_per_step_sequence_and_token():
    # 8 sequences verifying 1 + 2 drafts = 24 tokens: 50 + 8 x 5 + 24 x 1 = 114 us
    assert cost(8, speculation=SPEC).host.part("host.prepare") == pytest.approx(114e-6)


def test_launch_graph_replay_or_every_kernel():
    assert cost(8).host.part("host.launch") == pytest.approx(50e-6)
    assert cost(8, cuda_graphs=False).host.part("host.launch") == pytest.approx(4e-6 * 24 * 61)  # 5.856 ms
    # prompt steps run eager (CUDA graphs for decode-only steps, vLLM's FULL_DECODE_ONLY)
    cx = CostContext(V3, GB300, Layout(role="prefill", dp=8), PROF)
    assert prefill_step(cx, [512]).host.part("host.launch") == pytest.approx(4e-6 * 24 * 61)


def test_dp_sync_collective_per_doubling_of_ranks():
    assert cost(8, dp=1).host.part("host.dp_sync") == 0.0
    assert cost(8, dp=8).host.part("host.dp_sync") == pytest.approx(3 * 50e-6)
    assert cost(8, dp=64).host.part("host.dp_sync") == pytest.approx(6 * 50e-6)


def test_dp_sync_waits_for_the_slowest_rank():
    # E[max of n standard normals]: 1/sqrt(pi) for n = 2, 3.241 for n = 1000 (Blom: within 5%)
    assert host.expected_max_normal(1) == 0.0
    assert host.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=0.05)
    assert host.expected_max_normal(1000) == pytest.approx(3.241, rel=0.02)
    jit = dataclasses.replace(PROF, host=dataclasses.replace(HP, dp_jitter=0.1))
    c = cost(8, prof=jit, dp=8)
    work = sum(c.host.part(p) for p in ("host.schedule", "host.prepare", "host.sample", "host.output"))
    assert c.host.part("host.dp_sync") == pytest.approx(150e-6 + 0.1 * host.expected_max_normal(8) * work)


def test_sample_and_rejection_sampling():
    assert cost(8).host.part("host.sample") == pytest.approx(50e-6 + 8 * 2e-6)  # 66 us
    # + 16 drafts x 1 us + the accepted-count readback of a speculative step (300 us) = 382 us
    assert cost(8, speculation=SPEC).host.part("host.sample") == pytest.approx(382e-6)


def test_output_per_emitted_token():
    assert cost(8).host.part("host.output") == pytest.approx(50e-6 + 8 * 12e-6)  # 146 us
    assert cost(8, speculation=SPEC).host.part("host.output") == pytest.approx(50e-6 + 20 * 12e-6)  # 2.5 x 8


def test_api_server_per_token_and_chunk_shared_by_processes():
    # dp 8 on hosts of 4 GPUs: an endpoint serves 4 ranks x 8 sequences = 32 tokens and 32 chunks
    assert cost(8).host.api_s == pytest.approx((32 * 15e-6 + 32 * 10e-6) / 4)  # default: 4 processes
    assert cost(8, api_servers=1).host.api_s == pytest.approx(32 * 15e-6 + 32 * 10e-6)
    assert cost(8, stream_interval=10).host.api_s == pytest.approx((32 * 15e-6 + 3.2 * 10e-6) / 4)
    # speculation: 2.5 tokens per request per step, one chunk per step at stream interval 1
    assert cost(8, speculation=SPEC).host.api_s == pytest.approx((80 * 15e-6 + 32 * 10e-6) / 4)


def test_api_server_bounds_the_decode_step():
    slow = dataclasses.replace(PROF, host=dataclasses.replace(HP, api_per_token_s=0.01))
    c, ref = cost(8, prof=slow, api_servers=1), cost(8, api_servers=1)
    assert c.seconds == pytest.approx(ref.seconds)  # the engine step does not wait for it
    assert c.period_s == pytest.approx(32 * 0.01 + 32 * 10e-6)  # what a step delivers
    assert c.period_s > c.seconds
    assert c.api_wait_s == pytest.approx(c.period_s - c.seconds)


def test_async_pipeline_hides_host_up_to_the_gpu_step_and_exposes_the_rest():
    g = 10e-3
    assert host.pipeline_seconds(g, 4e-3, 50e-6, 0.0, True) == pytest.approx(g)  # hidden
    assert host.pipeline_seconds(g, 14e-3, 50e-6, 0.0, True) == pytest.approx(14e-3)  # 4 ms does not fit
    assert host.pipeline_seconds(g, 4e-3, 50e-6, 1e-3, True) == pytest.approx(1e-3 + g)  # serial part
    assert host.pipeline_seconds(g, 4e-3, 50e-6, 1e-3, False) == pytest.approx(4e-3 - 50e-6 + g)  # sync
    assert host.pipeline_seconds(g, 14e-3, 12e-3, 0.0, False) == pytest.approx(2e-3 + 12e-3)  # launch-bound


def test_async_on_the_cost_model():
    on, off = cost(8, dp=1), cost(8, dp=1, async_scheduling=False)
    gpu, total, launch = on.host.gpu_s, on.host.total_s, on.host.part("host.launch")
    assert total < gpu and on.host.exposed_s == 0.0 and on.seconds == pytest.approx(gpu)
    assert off.seconds == pytest.approx(gpu + total - launch)  # graph launch overlaps the kernels
    slow = dataclasses.replace(PROF, host=dataclasses.replace(HP, schedule_step_s=2 * gpu))
    s = cost(8, prof=slow, dp=1)
    assert s.host.exposed_s == pytest.approx(s.host.total_s - gpu)  # the part that does not fit
    dp8 = cost(8)  # DP collective: on the device stream, it waits for the step: never hidden
    assert dp8.host.exposed_s == pytest.approx(150e-6) and dp8.host.serial_s == pytest.approx(150e-6)


def test_idle_ranks_run_dummy_steps():
    cx = CostContext(V3, GB300, Layout(role="decode", dp=4), PROF)
    busy, idle = RankWork(8.0, 8000.0), RankWork(0.0, 0.0)
    mixed = cx.step_model.price(Step((busy, idle), (3, 1)))
    assert mixed.host.part("host.schedule") == pytest.approx(180e-6)  # the busiest rank sets the step
    quiet = cx.step_model.price(Step((idle,), (4,)))
    assert quiet.host.part("host.schedule") == pytest.approx(100e-6)  # a dummy step: fixed parts only
    assert quiet.host.part("host.output") == pytest.approx(50e-6)


def _specs():
    plan = load_plan("v41-flash-gb300-nvl72")
    return Scenario(plan, load_model(plan.model), load_hardware(plan.hardware), None, PROF), plan


def test_overhead_scale_scales_every_part_and_part_scales_one():
    specs, _ = _specs()
    half = whatif.apply(specs, "cpu.overhead_scale", 0.5).profile.host
    for f in dataclasses.fields(HP):
        if f.name.endswith("_s"):
            assert getattr(half, f.name) == pytest.approx(getattr(HP, f.name) * 0.5), f.name
    sched = whatif.apply(specs, "host.scheduler_scale", 0.5).profile.host
    assert sched == dataclasses.replace(HP, schedule_step_s=50e-6, schedule_per_seq_s=5e-6)
    api = whatif.apply(specs, "host.api_server_scale", 2).profile.host
    assert api == dataclasses.replace(HP, api_per_token_s=30e-6, api_per_chunk_s=20e-6, api_per_prompt_token_s=2e-6)


def test_layout_knobs_change_every_instance():
    specs, plan = _specs()
    out = whatif.apply(specs, "host.async_scheduling", False).plan
    assert all(not lay.async_scheduling for lay in out.prefill + out.decode)
    assert whatif.apply(specs, "host.stream_interval", 10).plan.decode[0].stream_interval == 10
    assert whatif.apply(specs, "host.api_servers", 4).plan.decode[0].api_servers == 4
    for key, bad in (("host.async_scheduling", 2), ("host.api_servers", 0), ("host.stream_interval", 1.5),
                     ("host.nope", 1), ("host.scheduler_scale", -1)):
        with pytest.raises(Exception, match="--set"):
            whatif.apply(specs, key, bad)


@pytest.mark.parametrize("lay", [dict(dp=1), dict(dp=8), dict(dp=8, async_scheduling=False),
                                 dict(dp=1, speculation=SPEC), dict(dp=1, cuda_graphs=False)])
def test_halving_cpu_cost_changes_the_step_exactly_where_host_time_is_exposed(lay):
    specs, _ = _specs()
    half = whatif.apply(specs, "cpu.overhead_scale", 0.5).profile
    base, halved = cost(8, **lay), cost(8, prof=half, **lay)
    if base.host.exposed_s == 0.0:
        assert halved.seconds == base.seconds  # fully hidden: nothing changes
    else:
        assert halved.seconds < base.seconds


def test_planner_tries_frontends_and_keeps_those_that_change_a_step():
    from rackplan.sim.search import space
    from rackplan.sim.search.estimate import Pricer, Traffic, price_decode

    m, hw = load_model("qwen3-0.6b"), load_hardware("gb200-nvl72")
    base = Layout("decode", dp=1, max_batch_per_rank=512)
    fronts = space.frontend_options(base, hw, space.SearchSpace())
    assert [(f.api_servers, f.stream_interval) for f in fronts] == [(None, 1), (4, 1), (None, 10)]
    tr, grid = Traffic(128, 128, 0.0), (64, 256, 512)
    slow_api = dataclasses.replace(PROF, host=dataclasses.replace(HP, api_per_token_s=200e-6))
    for prof, binds in ((PROF, False), (slow_api, True)):
        pr = Pricer(m, hw, prof)
        units = [price_decode(pr, f, tr, grid) for f in fronts]
        assert units[0] is not None  # vLLM's default is always a deployment
        if not binds:  # the API server keeps up: other frontends change nothing and are dropped
            assert units[1] is None and units[2] is None
        else:  # it bounds the step: more processes or a longer interval sustain more
            assert all(u.rates[-1] > units[0].rates[-1] for u in units[1:])
    # the shared device pricing of host-setting variants gives the same engine step
    pr = Pricer(m, hw, PROF)
    a, b = pr.decode(fronts[0], 256, 192), pr.decode(fronts[2], 256, 192)
    assert a.seconds == b.seconds and a.host.api_s > b.host.api_s


def test_central_scheduler_counts_every_rank_of_the_instance():
    # the CPU executor's leader schedules and books all 4 ranks: its fixed 100 us once + 4 x 20 us per
    # rank + 32 x 10 us = 500 us; output: 4 x 50 + 32 x 12 us
    central = dataclasses.replace(PROF, host=dataclasses.replace(HP, scheduler="central", schedule_per_rank_s=20e-6))
    c = cost(8, prof=central, dp=4)
    assert c.host.part("host.schedule") == pytest.approx(100e-6 + 4 * 20e-6 + 32 * 10e-6)
    assert c.host.part("host.output") == pytest.approx(4 * 50e-6 + 32 * 12e-6)
    assert c.host.part("host.prepare") == cost(8, dp=4).host.part("host.prepare")  # still per rank


def test_a_prefill_loop_of_its_own_prices_prefill_instances():
    from rackplan.sim.search.estimate import Pricer

    slow = dataclasses.replace(HP, prepare_step_s=5e-3)
    prof = dataclasses.replace(PROF, host_prefill=slow)
    assert prof.host_for("prefill") is slow and prof.host_for("decode") is HP and prof.host_for("both") is HP
    pre = CostContext(V3, GB300, Layout(role="prefill", dp=8), prof)
    agg = CostContext(V3, GB300, Layout(role="both", dp=8), prof)
    assert prefill_step(pre, [512]).host.part("host.prepare") == pytest.approx(5e-3 + 5e-6 + 512e-6)
    assert prefill_step(agg, [512]).host.part("host.prepare") == pytest.approx(50e-6 + 5e-6 + 512e-6)
    pr = Pricer(V3, GB300, prof)  # the planner keeps prefill instances' pricer apart
    assert pr.pricer(Layout("prefill", dp=8)) is not pr.pricer(Layout("decode", dp=8))
    half = whatif.apply(Scenario(None, V3, GB300, None, prof), "cpu.overhead_scale", 0.5).profile
    assert half.host_prefill.prepare_step_s == pytest.approx(2.5e-3)  # knobs scale every host block


@pytest.mark.parametrize("batch", [1, 8, 64, 256])
@pytest.mark.parametrize("dp", [1, 8])
def test_async_scheduling_and_cuda_graphs_never_price_worse(batch, dp):
    # why space.host_features sets both on wherever the hardware overlaps host and device work:
    # variants without them are dominated (the planner would only ever drop them)
    from rackplan.sim.search import space

    best = cost(batch, dp=dp).seconds
    for lay in (dict(async_scheduling=False), dict(cuda_graphs=False), dict(async_scheduling=False, cuda_graphs=False)):
        assert cost(batch, dp=dp, **lay).seconds >= best
    assert space.host_features(GB300) == {"cuda_graphs": True, "async_scheduling": True}
    assert space.host_features(load_hardware("cpu-local")) == {"cuda_graphs": False, "async_scheduling": False}


TURN = dataclasses.replace(HP, schedule_per_rank_s=20e-6, schedule_per_admit_s=30e-6, schedule_spec_s=40e-6,
                           output_per_finish_s=7e-6, output_spec_s=3e-6)


def _turnover_time(hp, admitted, finished, dp=2, spec=None):
    lay = Layout(role="decode", dp=dp, speculation=spec, async_scheduling=False)
    hm = host.HostModel(hp, lay, V3.num_layers, GB300.gpus_per_node)
    rank = hm.rank(8, 0, 0, admitted / dp, finished / dp)
    return hm.time([rank] * dp, 1e-3, True, 0.0, hm.rank(8 * dp, 0, 0, admitted, finished)), hm


def test_schedule_per_rank_admitted_request_and_speculative_step():
    # one rank's scheduler: 100 + 20 (its rank) + 8 x 10 + 3 admitted x 30 = 290 us; speculative: + 40 us
    t, hm = _turnover_time(TURN, admitted=6, finished=0)
    assert hm.turnover and t.part("host.schedule") == pytest.approx(290e-6)
    t, _ = _turnover_time(TURN, admitted=6, finished=0, spec=SPEC)
    assert t.part("host.schedule") == pytest.approx(330e-6)
    # central (the CPU executor's leader, DP 2): 100 + 2 x 20 + 16 x 10 + 6 x 30 + 40 = 520 us
    t, _ = _turnover_time(dataclasses.replace(TURN, scheduler="central"), admitted=6, finished=0, spec=SPEC)
    assert t.part("host.schedule") == pytest.approx(520e-6)


def test_output_per_finished_request():
    # 8 emitted tokens + 2 finished of the rank's 4: 50 + 8 x 12 + 2 x 7 = 160 us; central: 2 x 50 + 16 x 12 + 4 x 7
    t, _ = _turnover_time(TURN, admitted=0, finished=4)
    assert t.part("host.output") == pytest.approx(160e-6)
    t, _ = _turnover_time(dataclasses.replace(TURN, scheduler="central"), admitted=0, finished=4)
    assert t.part("host.output") == pytest.approx(100e-6 + 192e-6 + 28e-6)
    # speculative (acceptance 2.5): 8 x 2.5 = 20 tokens: 50 + 20 x 12 + 2 x 7 + 3 = 307 us
    t, _ = _turnover_time(TURN, admitted=0, finished=4, spec=SPEC)
    assert t.part("host.output") == pytest.approx(307e-6)


def test_prepare_of_a_speculative_step_and_output_per_sequence():
    # prepare: 8 sequences, 1 + 2 drafts = 24 tokens: 50 + 8 x 5 + 24 x 1 = 114 us, a speculative
    # step's difference -20 us (signed: the CPU executor's plain step runs colder) -> 94 us; plain: 50 + 40 + 8
    hp = dataclasses.replace(HP, prepare_spec_s=-20e-6, output_per_seq_s=2e-6)
    t, _ = _turnover_time(hp, admitted=0, finished=0, spec=SPEC)
    assert t.part("host.prepare") == pytest.approx(94e-6)
    t, _ = _turnover_time(hp, admitted=0, finished=0)
    assert t.part("host.prepare") == pytest.approx(98e-6)
    # output: 50 + 8 sequences x 2 + 8 tokens x 12 = 162 us; central (DP 2): 2 x 50 + 16 x 2 + 16 x 12 = 324 us
    assert t.part("host.output") == pytest.approx(162e-6)
    t, _ = _turnover_time(dataclasses.replace(hp, scheduler="central"), admitted=0, finished=0)
    assert t.part("host.output") == pytest.approx(324e-6)


def test_a_speculative_steps_prepare_difference_keeps_the_fixed_part_non_negative():
    with pytest.raises(SpecError, match="prepare_spec_s"):
        dataclasses.replace(HP, prepare_spec_s=-60e-6)  # 50 - 60 us: a negative fixed part


def test_turnover_terms_default_to_nothing():
    # the datasheet and GPU profiles never measured them: admissions and finishes leave the step as it was
    t0, hm = _turnover_time(HP, admitted=0, finished=0)
    t1, _ = _turnover_time(HP, admitted=6, finished=4)
    assert not hm.turnover and t0.parts == t1.parts


def test_the_simulator_prices_a_decode_steps_admissions_and_finishes():
    from rackplan.policy import EngineCore
    from rackplan.sim.pricer import StepPricer

    layout = Layout(role="decode", dp=2, async_scheduling=False)
    pr = StepPricer(CostContext(V3, GB300, layout, dataclasses.replace(PROF, host=TURN)))
    assert pr.turnover
    base = pr.decode([4, 4], [4000, 4000], 8)
    # synchronous scheduling: each rank pays its share, 1 admitted x 30 us + 1 finished x 7 us (of 2, 2)
    assert pr.decode([4, 4], [4000, 4000], 8, 2, 2) - base == pytest.approx(30e-6 + 7e-6)
    plain = StepPricer(CostContext(V3, GB300, layout, PROF))  # no per-request terms: the same step
    assert not plain.turnover and plain.decode([4, 4], [4000, 4000], 8, 2, 2) == plain.decode([4, 4], [4000, 4000], 8)
    core = EngineCore("decode", 2, 8192, 8, 10**6, 16, [100, 100], [1, 3], [0, 0])  # the sequences the next
    core.add(0)  # step finishes, as the pricer's turnover terms count them
    core.add(1)
    for want_finishing, want_done in ((1, [0]), (0, []), (1, [1])):
        batch = core.schedule()
        assert batch.finishing == want_finishing and core.finish(batch).finished == want_done
