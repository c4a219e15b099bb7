"""The planner reports what its simulator verified (tiny-moe on cpu-local, datasheet profile):
a candidate whose estimate passes but whose simulation does not is never chosen, the headline and
plan.yaml carry the verified figures, and `rackplan simulate --plan` reproduces them."""
from __future__ import annotations

import dataclasses
import json

import pytest

from rackplan.cli import main
from rackplan.sim.search import planner
from rackplan.sim.search.combine import Candidate
from rackplan.specs import SLO, load_hardware, load_model, load_plan, load_profile, load_workload

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def req():
    return planner.Request(load_model("tiny-moe"), load_hardware("cpu-local"), load_profile("datasheet"),
                           load_workload("tiny-chat"), 4, SLO(1.0, 0.2), "tiny-moe", "cpu-local", "tiny-chat")


def _starved(good: Candidate) -> Candidate:
    """The good deployment with a prefill budget of one token per rank per step (every prompt takes
    16-96 steps), claiming three times its estimated rate at the same fast TTFT and TPOT."""
    pre, dec = good.prefill[0], good.decode[0]
    pools = ((dataclasses.replace(pre, max_tokens_per_step=1, replicas=1), {}), (dec, {}))
    return Candidate("disaggregated", pools, good.gpus, 3 * good.rate_rps, 0.01, good.tpot_s, good.batch_per_rank,
                     good.osl, 3 * good.capacity_rps)


def test_a_candidate_whose_estimate_passes_but_whose_simulation_fails_is_rejected(req):
    good = planner.estimate(req, planner.price_all(req)).front[0]
    fake = _starved(good)
    assert fake.tps_gpu > good.tps_gpu and fake.ttft_p90_s < req.slo.ttft_p90_s  # the estimate would pick it
    verified = planner.verify(req, [fake, good])
    assert not verified[0].passed and verified[0].check is not None
    assert verified[1].passed
    assert planner.choose(req, verified).cand is good
    with pytest.raises(planner.NoFeasiblePlan):
        planner.choose(req, planner.verify(req, [fake]))


def test_headline_is_verified_and_simulate_reproduces_it(req, tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    assert main(["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
                 "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "1", "--quiet", "--out", str(out),
                 "--report", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    plan = load_plan(out)
    p = plan.predicted
    assert "verified in the simulator at steady state" in printed and f"{p['output_tps_per_gpu']:,.0f}" in printed
    assert p["sim_stable"] == 1.0 and p["sim_requests"] > 0
    assert p["sim_ttft_p90_s"] <= plan.slo.ttft_p90_s and p["sim_tpot_p90_s"] <= plan.slo.tpot_p90_s
    assert p["output_tps_per_gpu"] == p["sim_output_tps_per_gpu"] != p["est_output_tps_per_gpu"]
    assert main(["simulate", "--plan", str(out), "--json"]) == 0  # the plan's rate, the planner's run
    d = json.loads(capsys.readouterr().out)
    assert d["stable"] and d["metrics"]["output_tps_per_gpu"] == p["output_tps_per_gpu"]
    assert d["metrics"]["ttft_p90_s"] == p["sim_ttft_p90_s"] and d["metrics"]["num_requests"] == p["sim_requests"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "verified in the simulator at steady state" in report and "Analytic estimate" in report
    rows = (tmp_path / "report" / "pareto.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert {"tps_gpu", "est_tps_gpu", "gap", "status"} <= set(header)
    winner = [r for r in rows[1:] if r.endswith(",1")]
    assert len(winner) == 1 and ",verified," in winner[0]


def test_a_bisection_gives_up_once_its_capacity_bound_at_the_measured_tokens_per_request_cannot_win(req):
    """verify.max_rate with `most_rps` (the front's capacity bound) and `give_up_tps` (the best verified
    tokens/s/GPU): after a passing probe, the tokens/s/GPU it measured per req/s times most_rps is the
    most the point can reach; at or below give_up_tps it stops there (given up, passed at that rate),
    above it the same bisection goes on exactly as without the bound."""
    from rackplan.sim.search import front
    from rackplan.sim.search.verify import max_rate
    from rackplan.specs import Scenario

    for good in planner.estimate(req, planner.price_all(req)).front:  # one whose bisection goes on past a pass
        sc = Scenario(planner.to_plan(req, good, "check", {}), req.model, req.hw, req.workload, req.profile)
        first = front.first_probe(good, good.rate_rps, front.p90_output_length(req.workload))
        est = min(good.rate_rps, good.capacity_rps)
        plain = max_rate(sc, est, req.slo, None, req.seed, first, bound_rps=good.capacity_rps)
        assert plain.passed and not plain.given_up
        j = next(i for i, p in enumerate(plain.probes) if p.passed)  # the first passing probe
        if j + 1 < plain.runs:
            break
    else:
        raise AssertionError("no front point bisects on past its first pass")
    per_rps = plain.probes[j].metrics["output_tps_per_gpu"] / plain.probes[j].rate_rps
    most = 1.05 * good.capacity_rps
    stop = max_rate(sc, est, req.slo, None, req.seed, first, bound_rps=good.capacity_rps,
                    give_up_tps=per_rps * most, most_rps=most)  # at best exactly reachable: cannot beat it
    assert stop.given_up and stop.passed and stop.runs == j + 1 and stop.rate_rps == plain.probes[j].rate_rps
    assert stop.metrics == plain.probes[j].metrics
    go_on = max_rate(sc, est, req.slo, None, req.seed, first, bound_rps=good.capacity_rps,
                     give_up_tps=0.99 * per_rps * plain.probes[j].rate_rps, most_rps=most)  # beatable there: as plain
    assert not go_on.given_up and [p.rate_rps for p in go_on.probes] == [p.rate_rps for p in plain.probes]
    assert go_on.metrics == plain.metrics
