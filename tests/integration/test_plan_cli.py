"""`rackplan plan` end to end on tiny-moe / cpu-local: files, round trip, exit codes."""
from __future__ import annotations

import csv

import pytest

from rackplan.cli import main
from rackplan.sim.search import planner
from rackplan.sim.search.verify import at_rate, run_simulation
from rackplan.specs import Scenario, load_hardware, load_model, load_plan, load_profile, load_workload

pytestmark = pytest.mark.integration
TINY = ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
        "--workers", "1", "--quiet"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    rc = main(TINY + ["--ttft-p90", "1s", "--tpot-p90", "200ms", "--out", str(d / "plan.yaml"),
                      "--report", str(d / "report")])
    assert rc == 0
    return d


def test_plan_writes_plan_and_report(planned):
    plan = load_plan(planned / "plan.yaml")
    assert plan.gpus_used <= 4 and plan.predicted["request_rate"] > 0
    assert plan.predicted["sim_ttft_p90_s"] <= 1.0 and plan.predicted["sim_tpot_p90_s"] <= 0.2
    for name in ("report.md", "pareto.png", "pareto.csv"):
        assert (planned / "report" / name).stat().st_size > 0
    # tiny-moe has no checkpoint vLLM serves: the report says so instead of writing launch files
    assert not (planned / "report" / "launch").exists()
    assert "No `launch/`" in (planned / "report" / "report.md").read_text()
    rows = list(csv.DictReader(open(planned / "report" / "pareto.csv")))
    assert sum(int(r["winner"]) for r in rows) == 1
    report = (planned / "report" / "report.md").read_text()
    assert "op by op; analytic estimate" in report  # the split is the cost model's, and says so
    # no --profile: cpu-local hardware's default profile, named in the report with its fit error
    assert "Cost-model profile `cpu-local`" in report and "## Profile fit error" in report
    assert plan.profile == "cpu-local"  # pinned, so `simulate --plan` keeps it if the hardware's default changes


def test_plan_read_back_simulates_identically(planned):
    plan = load_plan(planned / "plan.yaml")
    model, hw, prof = load_model(plan.model), load_hardware(plan.hardware), load_profile("datasheet")
    wl = at_rate(load_workload(plan.workload), plan.predicted["request_rate"])
    import json
    again = json.dumps(run_simulation(Scenario(plan, model, hw, wl, prof), 200,
                                      1).metrics, sort_keys=True)  # NaN == NaN
    from rackplan.specs import Plan, from_dict, to_dict
    copy = from_dict(Plan, to_dict(plan))
    assert json.dumps(run_simulation(Scenario(copy, model, hw, wl, prof), 200, 1).metrics, sort_keys=True) == again


def test_only_feasible_plans_come_back(planned):
    m, hw, prof, wl = (load_model("tiny-moe"), load_hardware("cpu-local"), load_profile("datasheet"),
                       load_workload("tiny-chat"))
    plan = load_plan(planned / "plan.yaml")
    req = planner.Request(m, hw, prof, wl, 4, plan.slo, "tiny-moe", "cpu-local", "tiny-chat")
    res = planner.plan(req)
    assert res.winner.passed and res.simulated
    k = res.winner.check.metrics
    assert k["ttft_p90_s"] <= plan.slo.ttft_p90_s and k["tpot_p90_s"] <= plan.slo.tpot_p90_s


def test_the_report_says_how_copies_of_the_winner_fill_the_budget(planned):
    import dataclasses

    from rackplan.sim.search.report import cluster_fill, markdown
    m, hw, prof, wl = (load_model("tiny-moe"), load_hardware("cpu-local"), load_profile("datasheet"),
                       load_workload("tiny-chat"))
    plan = load_plan(planned / "plan.yaml")
    res = planner.plan(planner.Request(m, hw, prof, wl, 4, plan.slo, "tiny-moe", "cpu-local", "tiny-chat"))
    w, unit = res.winner, res.winner.cand.gpus
    assert cluster_fill(res) == "" or res.request.num_gpus % unit
    big = dataclasses.replace(res, request=dataclasses.replace(res.request, num_gpus=3 * unit + 1))
    line = cluster_fill(big)
    tps = 3 * w.tps_gpu * unit  # the unit's verified tokens/s, three times
    assert f"3 copies of this {unit}-GPU deployment use {3 * unit} GPUs (1 idle)" in line
    assert f"{tps:,.0f} output tokens/s" in line and f"{tps / (3 * unit + 1):,.0f} per GPU" in line
    assert "verified figures times 3, an extrapolation" in line and line in markdown(big)
    one = dataclasses.replace(res, request=dataclasses.replace(res.request, num_gpus=unit + 1))
    assert f"uses {unit} GPUs (1 idle)" in cluster_fill(one)
    latency = dataclasses.replace(big, request=dataclasses.replace(big.request, objective="latency"))
    assert cluster_fill(latency) == ""  # a fixed load: copies would serve more than was asked


def test_no_feasible_layout_exits_3_without_a_plan(tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    rc = main(TINY + ["--ttft-p90", "1ms", "--tpot-p90", "1ms", "--out", str(out)])
    assert rc == 3 and not out.exists()
    err = capsys.readouterr().err
    assert "closest:" in err and "misses" in err and " by " in err
    assert "TTFT p90 by" in err and "TPOT p90 by" in err  # both SLOs missed: both named, not only the worse


def test_budget_too_small_for_weights_exits_2(tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    rc = main(["plan", "--model", "deepseek-v3", "--hardware", "h200-sxm", "--gpus", "4",
               "--workload", "isl4k-osl1k", "--out", str(out), "--quiet"])
    assert rc == 2 and not out.exists()
    assert "at least 8 GPUs" in capsys.readouterr().err


def test_bare_tpot_of_one_or_more_is_refused(tmp_path, capsys):
    """`--tpot-p90 50` was read as 50 s per token and planned a 2 tokens/s/user deployment; a bare
    per-token time >= 1 now needs its unit (exit 2, one line, no plan); '0.05' and '50ms' still read."""
    from rackplan.args import per_token_duration

    assert per_token_duration("0.05") == per_token_duration("50ms") == 0.05 and per_token_duration("2s") == 2.0
    out = tmp_path / "plan.yaml"
    assert main(TINY + ["--tpot-p90", "50", "--out", str(out)]) == 2 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tpot-p90" in err[0] and "50ms" in err[0]


def test_plan_names_its_spec_files_so_it_reads_back_from_any_folder(tmp_path, monkeypatch, capsys):
    """`plan --workload w.yaml --profile p.yaml` wrote `profile: p.yaml` as given, relative to the folder it
    was planned in: `simulate --plan` from any other folder (the plan's own included) was exit 2, 'p.yaml:
    expected an existing YAML file'. File paths are now written absolute; embedded names stay names."""
    import shutil

    from rackplan.specs import CONFIG_DIR

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    shutil.copy(CONFIG_DIR / "workloads" / "tiny-chat.yaml", work / "w.yaml")
    shutil.copy(CONFIG_DIR / "profiles" / "cpu-local.yaml", work / "p.yaml")
    monkeypatch.chdir(work)
    args = ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "w.yaml",
            "--profile", "p.yaml", "--workers", "1", "--quiet", "--ttft-p90", "1s", "--tpot-p90", "200ms",
            "--sim-requests", "100", "--out", "out/plan.yaml"]
    assert main(args) == 0
    plan = load_plan(work / "out" / "plan.yaml")
    assert (plan.model, plan.hardware) == ("tiny-moe", "cpu-local")
    assert (plan.workload, plan.profile) == (str(work / "w.yaml"), str(work / "p.yaml"))
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["simulate", "--plan", str(work / "out" / "plan.yaml"), "--requests", "20"]) == 0
    assert "profile cpu-local (the plan's" in capsys.readouterr().out


@pytest.mark.parametrize("objective", ["latency", "min-gpus"])
def test_fixed_load_objectives_choose_as_if_every_front_point_were_simulated(objective, monkeypatch):
    """front.verify_fixed probes only points that can still win: the same plan as probing all."""
    from rackplan.sim.search import front
    from rackplan.specs import SLO

    m, hw, prof, wl = (load_model("tiny-moe"), load_hardware("cpu-local"), load_profile("datasheet"),
                       load_workload("tiny-chat"))
    req = planner.Request(m, hw, prof, wl, 8, SLO(1.0, 0.2), "tiny-moe", "cpu-local", "tiny-chat",
                          objective=objective, target_rps=4.0, sim_requests=64)
    pruned = planner.plan(req)
    monkeypatch.setattr(front, "verify_fixed", lambda _o, points, run, _b, _w: [
        front.Verified(c, k) for c, k in zip(points, run(points), strict=True)])
    full = planner.plan(req)
    assert pruned.plan == full.plan
    assert sum(v.check is not None for v in pruned.verified) <= sum(v.check is not None for v in full.verified)
