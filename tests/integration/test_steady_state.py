"""Steady-state measurement (sim/steady.py): figures that do not move with the run's length, a
saturating pool reported as unstable (and which one), and served throughput within what the cost
model says the pools can serve. Explicit datasheet profile, so a change of default profile does
not move these assertions."""
import dataclasses
import json

import numpy as np
import pytest

from rackplan.cli import main
from rackplan.sim.cost.step import CostContext, RankWork
from rackplan.sim.pricer import StepPricer
from rackplan.sim.simulator import PRECISION, simulate_specs, simulate_steady
from rackplan.sim.steady import mser_truncation
from rackplan.specs import (
    Arrival,
    Layout,
    LengthDist,
    Plan,
    Scenario,
    Workload,
    dump_yaml,
    load_hardware,
    load_model,
    load_profile,
)

pytestmark = pytest.mark.integration
PROF = load_profile("datasheet")
MODEL = load_model("deepseek-v3")
HW = load_hardware("h200-sxm")
PREFILL = Layout(role="prefill", dp=8, max_tokens_per_step=8192)


def plan(decode_batch=64):
    return Plan(name="t", model="deepseek-v3", hardware="h200-sxm", num_gpus=16, prefill=(PREFILL,),
                decode=(Layout(role="decode", dp=8, max_batch_per_rank=decode_batch),))


def workload(rate, isl=None, osl=(50, 150)):
    isl = LengthDist(kind="fixed", value=isl) if isl else LengthDist(kind="uniform", low=512, high=1536)
    return Workload(name="w", arrival=Arrival(kind="poisson", rate=rate), isl=isl,
                    osl=LengthDist(kind="uniform", low=osl[0], high=osl[1]), num_requests=1000, seed=0)


def prefill_capacity_rps(isl: int) -> float:
    """Prompts/s of the prefill instance at full steps (budget / isl prompts on every rank), the
    most a step's fixed costs can be spread over: the cost model's capacity."""
    per_rank = PREFILL.max_tokens_per_step // isl
    step = StepPricer(CostContext(MODEL, HW, PREFILL, PROF)).uniform(RankWork(0.0, 0.0, ((per_rank, isl, 0.0),)))
    return PREFILL.dp * per_rank / step.period_s


def test_auto_length_figures_do_not_move_with_4x_the_requests():
    """At half the prefill capacity the automatic run length gives tokens/s/GPU and TTFT/TPOT
    p50/p90 within 3% of a run of four times as many requests."""
    wl = workload(50.0)
    short = simulate_steady(Scenario(plan(), MODEL, HW, wl, PROF), precision=PRECISION)
    n = int(short.metrics["num_requests"])
    long = simulate_specs(Scenario(plan(), MODEL, HW, wl, PROF), num_requests=4 * n)
    assert short.stable and long.stable and short.stability.converged
    for key in ("output_tps_per_gpu", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s"):
        assert long.metrics[key] == pytest.approx(short.metrics[key], rel=0.03), key
    w = short.window  # warm-up (none needed here: warm-started) and cool-down left out, and said so
    assert 0 <= w.start_s < w.end_s < w.last_arrival_s and w.requests < n
    assert short.metrics["window_start_s"] == w.start_s


@pytest.mark.parametrize("steady", [True, False])
def test_a_rate_20_percent_above_prefill_capacity_is_unstable(steady):
    cap = prefill_capacity_rps(1024)
    wl = workload(1.2 * cap, isl=1024)
    res = simulate_steady(Scenario(plan(), MODEL, HW, wl, PROF)) if steady else \
        simulate_specs(Scenario(plan(), MODEL, HW, wl, PROF), num_requests=3000)
    assert not res.stable and res.stability.saturated == ("prefill",)
    assert res.stability.growth["prefill"] > 0.1  # ~1/6 of arrivals pile up
    assert res.metrics["prefill_served_rps"] == pytest.approx(cap, rel=0.05)  # it serves its capacity
    assert res.metrics["prefill_capacity_rps"] == pytest.approx(cap, rel=0.02)  # prompts per busy second
    assert res.metrics["served_rps"] < res.metrics["offered_rps"]


def test_a_rate_below_capacity_is_stable():
    res = simulate_steady(Scenario(plan(), MODEL, HW, workload(0.6 * prefill_capacity_rps(1024), isl=1024), PROF))
    assert res.stable and res.stability.saturated == () and abs(res.stability.growth["prefill"]) < 0.02


@pytest.mark.parametrize("factor", [0.5, 1.2, 3.0])
def test_served_throughput_never_exceeds_the_cost_models_capacity(factor):
    """Prompt tokens served <= full prefill steps back to back; output tokens <= every decode rank
    at its largest batch on the cheapest step (each sequence at its shortest context). The decode
    pool here (8 per rank) saturates first."""
    isl, batch = 1024, 8
    pr = StepPricer(CostContext(MODEL, HW, plan(batch).decode[0], PROF))
    decode_cap = 8 * batch / pr.uniform(RankWork(float(batch), float(batch * isl))).period_s  # tokens/s
    p = plan(batch)
    res = simulate_specs(Scenario(p, MODEL, HW, workload(factor * decode_cap / 100.0, isl=isl), PROF),
                         num_requests=2500)
    m, gpus = res.metrics, p.gpus_used
    assert m["prefill_served_rps"] * isl <= prefill_capacity_rps(isl) * isl * 1.01
    assert m["prefill_capacity_rps"] <= prefill_capacity_rps(isl) * 1.01
    assert m["output_tps_per_gpu"] * gpus <= decode_cap * 1.01
    assert m["input_tps_per_gpu"] * gpus <= m["offered_rps"] * isl * 1.05  # served, never offered
    if factor > 1:
        assert not res.stable and res.stability.saturated[0] == "decode"


def test_closed_loop_runs_are_judged_on_convergence():
    wl = dataclasses.replace(workload(1.0), arrival=Arrival(kind="concurrency", concurrency=64))
    res = simulate_steady(Scenario(plan(), MODEL, HW, wl, PROF))
    assert res.stable and res.stability.converged and res.window.start_s > 0


def test_mser_drops_a_ramp_and_flags_a_run_that_never_settles():
    ramp = np.concatenate([np.linspace(0, 100, 100), np.full(400, 100.0) + np.sin(np.arange(400))])
    drop, converged = mser_truncation(ramp)
    assert 90 <= drop <= 110 and converged
    assert not mser_truncation(np.linspace(0, 100, 500))[1]  # still rising at the end


def test_simulate_cli_reports_an_unstable_rate(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    dump_yaml(dataclasses.replace(plan(), workload=None), path)
    wl = tmp_path / "w.yaml"
    dump_yaml(workload(10.0, isl=1024), wl)
    rate = str(1.5 * prefill_capacity_rps(1024))
    args = ["simulate", "--plan", str(path), "--workload", str(wl), "--rate", rate, "--profile", "datasheet"]
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stable"] is False and d["saturated"] == ["prefill"] and d["metrics"]["ttft_p90_s"] is None
    assert d["window"]["start_s"] < d["window"]["end_s"] == pytest.approx(d["window"]["last_arrival_s"])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "UNSTABLE" in out and "prefill" in out and "measured over" in out and "TTFT" not in out
