"""Output that never contradicts itself (issue 40): one test per contradiction a new user met.

- a 200-request `simulate` printed "requests/s served (completed) 0.00" beside a goodput of 172 req/s;
- `plan --objective latency` on a concurrency-1 workload printed req/s and tok/s/GPU, and a "gap" it did
  not explain;
- `rackplan models --help` / `hardware --help` stopped mid-sentence;
- GB/s link figures (whatif's hardware.nvlink_gbps / scaleout_gbps, the hardware table) never said they
  are bytes, while NICs are sold in gigabits;
- what-if deltas inside the run-to-run noise read as changes.
"""
from __future__ import annotations

import importlib
import json

import pytest

from rackplan.cli import COMMANDS, build_parser, main
from rackplan.sim.search import whatif
from rackplan.specs import Scenario

pytestmark = pytest.mark.integration


def test_a_short_simulate_says_completions_are_not_known(capsys):
    """300 requests of the seed plan: the window (well under a second) starts soon after the first arrival,
    while a request takes ~7 s (E2E p50): no request that arrived in the run could finish in it, so the
    completed rate is not known, and the table says why instead of printing 0.00 beside the goodput.
    (At 200 requests the run's prefill queue growth sits at the stability threshold: 0.09 before the SM100
    MLA prefill refit of session 15, 0.20 after, flagged saturated, which hides the goodput by design.)"""
    assert main(["--requests", "300"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "requests/s served (completed)" in line)
    assert "not known" in row and "0.00" not in row
    assert "requests/s served (completed): not known: the window starts" in " ".join(out.split())
    assert main(["--requests", "300", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stable"]
    assert d["metrics"]["served_rps"] is None and "E2E p50" in d["not_known"]["served_rps"]
    assert d["metrics"]["goodput_rps"] > 0  # what is known still shows


def test_a_long_run_measures_completions(capsys):
    """The tiny plan's steady run (warm-started, thousands of requests) measures them: served ~ offered."""
    assert main(["simulate", "--plan", "tiny-cpu", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["not_known"] == {}
    assert d["metrics"]["served_rps"] == pytest.approx(d["metrics"]["offered_rps"], rel=0.02)


@pytest.fixture(scope="module")
def concurrency_one(tmp_path_factory):
    d = tmp_path_factory.mktemp("latency")
    (d / "one.yaml").write_text("name: tiny-one\narrival:\n  kind: concurrency\n  concurrency: 1\n"
                                "isl:\n  kind: uniform\n  low: 16\n  high: 96\nosl:\n  kind: uniform\n  low: 4\n"
                                "  high: 24\nnum_requests: 32\nseed: 0\n")
    return d


def test_the_latency_objective_reports_per_user_figures(concurrency_one, capsys):
    d = concurrency_one
    rc = main(["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload",
               str(d / "one.yaml"), "--objective", "latency", "--ttft-p90", "1s", "--tpot-p90", "200ms",
               "--workers", "1", "--quiet", "--out", str(d / "plan.yaml")])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(line for line in lines if line.startswith("deployment"))
    assert "tok/s/user" in head and "TTFT p90 ms" in head and "TPOT p90 ms" in head
    assert "req/s" not in head and "tok/s/GPU" not in head
    plan_line = next(line for line in lines if line.startswith("plan:"))
    assert "tokens/s/user" in plan_line and "TTFT p90" in plan_line and "TPOT p90" in plan_line
    assert "req/s" not in plan_line and "tokens/s/GPU" not in plan_line
    text = " ".join(lines)
    assert "gap: verified / estimate - 1" in text  # what the gap means
    assert "not an error of the cost model" in text  # and why it is large for a concurrency workload


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_description_is_whole(command):
    """Each command's --help description is its docstring's whole first paragraph, a full sentence."""
    desc = build_parser(command)._subparsers._group_actions[0].choices[command].description
    doc = importlib.import_module(COMMANDS[command].module).__doc__.strip()
    assert desc == " ".join(doc.split("\n\n")[0].split())
    assert desc.endswith((".", ")")) and not desc.endswith("plus the")


def test_gigabytes_are_said_to_be_bytes(capsys):
    with pytest.raises(SystemExit):
        main(["whatif", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "hardware.nvlink_gbps=900,1800 (GB/s: gigabytes per second per GPU, one way" in text
    assert "an 800 Gb/s NIC is hardware.scaleout_gbps=100" in text
    assert "hardware.hbm_tbps=8 (TB/s)" in text and "request rate in req/s" in text
    assert main(["hardware"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for header in ("HBM GB", "HBM TB/s", "peak TFLOP/s", "NVLink GB/s", "domain GPUs", "scale-out GB/s"):
        assert header in text
    assert "GB/s: gigabytes (bytes) per second per GPU" in text and "an 800 Gb/s NIC is 100 GB/s here" in text
    # and the figure it explains: GB300's 800G CX-8 NIC, scaleout_bw 100e9 B/s, prints as 100
    assert "gb300-nvl72" in text and " 100 " in text.split("gb300-nvl72")[1].split("│ h100")[0]


def test_what_if_deltas_carry_error_bars_and_noise_is_marked():
    """By hand: TTFT p90 0.100 s +- 0.003 against 0.101 s +- 0.004: delta -0.99%, its standard error
    (0.1 / 0.101) sqrt(0.03^2 + (0.004 / 0.101)^2) = 4.92%, so 2 standard errors cover it: noise. tok/s/GPU
    1000 +- 1 against 900 +- 1: +11.1% +- 0.165%, a change. tok/s/user has no standard error: none given."""
    row = {"ttft_p90_s": 0.100, "ttft_p90_se_s": 0.003, "output_tps_per_gpu": 1000.0, "output_tps_per_gpu_se": 1.0,
           "tps_per_user": 50.0}
    base = {"ttft_p90_s": 0.101, "ttft_p90_se_s": 0.004, "output_tps_per_gpu": 900.0, "output_tps_per_gpu_se": 1.0,
            "tps_per_user": 40.0}
    d, err = whatif.deltas(row, base), whatif.delta_errors(row, base)
    assert err["ttft_p90_s"] == pytest.approx((0.1 / 0.101) * ((0.03) ** 2 + (0.004 / 0.101) ** 2) ** 0.5)
    assert whatif.in_noise(d["ttft_p90_s"], err["ttft_p90_s"])
    assert err["output_tps_per_gpu"] == pytest.approx((1000 / 900) * ((1 / 1000) ** 2 + (1 / 900) ** 2) ** 0.5)
    assert not whatif.in_noise(d["output_tps_per_gpu"], err["output_tps_per_gpu"])
    assert "tps_per_user" in d and "tps_per_user" not in err
    from rackplan.sim.search.whatif_command import delta_text

    assert delta_text("ttft_p90_s", d["ttft_p90_s"], err["ttft_p90_s"]) == "ttft-1.0%+-9.8%(noise)"
    assert delta_text("output_tps_per_gpu", d["output_tps_per_gpu"], err["output_tps_per_gpu"]) == "output+11.1%+-0.3%"
    assert delta_text("tps_per_user", d["tps_per_user"], None) == "tps+25.0%"


def test_simulate_says_when_the_planner_would_choose_another_layout(tmp_path, capsys):
    """The seed plan (the write-up's layout, written by hand) is not what the planner's estimate picks on
    its inputs: one line says so, with the planner's choice and its figure, labelled an estimate. A plan the
    planner wrote itself gets no such line."""
    from rackplan.sim.commands.simulate import planner_choice
    from rackplan.specs import load_hardware, load_model, load_plan, load_workload, resolve_profile

    assert main(["--requests", "200"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    plan = load_plan("v41-flash-gb300-nvl72")
    choice = planner_choice(Scenario(plan, load_model(plan.model), load_hardware(plan.hardware),
                                     load_workload(plan.workload), resolve_profile(None, None, plan.hardware)))
    assert not choice["same_layout"]
    line = next(x for x in out.split("planner: ")[1:])
    assert line.startswith("`rackplan plan` would not choose this layout")
    assert f"picks {choice['summary']} at {choice['figure']:,.0f} output tokens/s/GPU (estimate, not simulated" in line
    mine = tmp_path / "mine.yaml"
    assert main(["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
                 "--ttft-p90", "1s", "--tpot-p90", "200ms", "--no-simulate", "--workers", "1", "--quiet",
                 "--out", str(mine)]) == 0
    capsys.readouterr()
    assert main(["simulate", "--plan", str(mine), "--requests", "100"]) == 0
    assert "planner:" not in capsys.readouterr().out
    assert main(["simulate", "--plan", str(mine), "--requests", "100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["planner_estimate"]["same_layout"] is True


def test_simulate_remembers_the_planner_estimate_of_the_same_inputs(tmp_path, monkeypatch, capsys):
    """The planner's estimate is a pure function of the plan, specs, workload, profile and code, and costs
    seconds: the first `simulate` computes it and keeps it in the cache folder, a second one on the same
    inputs reads it (what the file says is what it prints), and other inputs (another rate) compute their own."""
    monkeypatch.setenv("RACKPLAN_CACHE_DIR", str(tmp_path / "cache"))
    run = ["simulate", "--plan", "tiny-cpu", "--requests", "100", "--json"]
    assert main(run) == 0
    first = json.loads(capsys.readouterr().out)["planner_estimate"]
    files = list((tmp_path / "cache" / "planner-estimate").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text()) == first
    files[0].write_text(json.dumps({"error": "written by this test"}))  # a remembered estimate is read, not redone
    assert main(run) == 0
    assert json.loads(capsys.readouterr().out)["planner_estimate"] == {"error": "written by this test"}
    assert main(run[:-1]) == 0
    assert "planner: written by this test" in capsys.readouterr().out
    assert main(run + ["--rate", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["planner_estimate"] != {"error": "written by this test"}
    assert len(list((tmp_path / "cache" / "planner-estimate").glob("*.json"))) == 2
