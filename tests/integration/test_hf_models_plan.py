"""The models shipped from config.json files plan and simulate on Hopper (h200-sxm) and Blackwell
(gb300-nvl72): `plan` picks a layout (analytic search), `simulate` runs the plan it wrote; and
`--model` takes a config.json folder directly, the plan naming the file it was made from."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackplan.cli import main
from rackplan.specs import load_model, load_plan

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
NEW = ["kimi-k2", "qwen3-30b-a3b", "qwen3-coder-480b-a35b", "glm-4.5", "gpt-oss-120b", "deepseek-v4-pro"]
GPUS = {"h200-sxm": "16", "gb300-nvl72": "72"}


# Kimi K2 (1.03T parameters, FP8) and Qwen3-Coder-480B (BF16, 960 GB) on 16 H200: only TP8 prefill shapes
# hold the weights, and their KV cannot take agentic-chat's longest prompt (the planner refuses them: test
# below; for GQA the memory model counts a TP rank's KV unsharded, sim/cost/memory.py: conservative); 32 can
MORE_GPUS = {("kimi-k2", "h200-sxm"): "32", ("qwen3-coder-480b-a35b", "h200-sxm"): "32"}


def plan_then_simulate(tmp_path, capsys, model: str, hardware: str, requests: int = 40) -> dict:
    out = tmp_path / f"{hardware}.yaml"
    gpus = MORE_GPUS.get((model, hardware), GPUS[hardware])
    assert main(["plan", "--model", model, "--hardware", hardware, "--gpus", gpus, "--workers", "1",
                 "--no-simulate", "--quiet", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["simulate", "--plan", str(out), "--requests", str(requests), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    m = result["metrics"]
    assert m["num_requests"] == requests and m["output_tokens"] > 0 and m["duration_s"] > 0
    return result


@pytest.mark.slow
@pytest.mark.parametrize("hardware", sorted(GPUS))
@pytest.mark.parametrize("model", NEW)
def test_new_model_plans_and_simulates(model, hardware, tmp_path, capsys):
    result = plan_then_simulate(tmp_path, capsys, model, hardware)
    assert result["hardware"] == hardware and load_plan(tmp_path / f"{hardware}.yaml").model == model


def test_planner_skips_layouts_whose_kv_cannot_hold_the_longest_prompt(tmp_path, capsys):
    """GLM-4.5 (BF16) on 8 H200 at vLLM's default 0.9 of HBM: a DEP8 rank holds every attention weight and 1/8
    of the experts, and its KV room (376,832 B per token, all 8 KV heads) falls short of agentic-chat's longest
    prompt (its clip, 65,536 tokens); the planner skips that shape, says so, and with nothing else meeting the
    SLOs refuses in one line (was: a plan simulate then refused, field isl). Until session 20 this was Kimi K2
    TP8 on 16 H200, whose weights no longer fit beside 0.9 x 141 GB at all."""
    from rackplan.policy.kv import longest_admitted
    from rackplan.sim.cost.memory import kv_capacity_tokens
    from rackplan.sim.search import space
    from rackplan.specs import Layout, load_hardware, load_workload

    m, hw = load_model("glm-4.5"), load_hardware("h200-sxm")
    assert space.longest(load_workload("agentic-chat")) == (65536, 65536 + 8192)  # the workload's clips
    dep8 = Layout("prefill", dp=8)
    kv = kv_capacity_tokens(m, hw, dep8)
    # whole 16-token GQA blocks, less the step's query token: below the longest prompt, above one block
    assert longest_admitted(kv, 16) == int(kv // 16) * 16 - 1 < 65536 and kv >= 16
    assert not space.fits(m, hw, dep8, 65536) and space.fits(m, hw, dep8)
    rc = main(["plan", "--model", "glm-4.5", "--hardware", "h200-sxm", "--gpus", "8", "--workers", "1",
               "--no-simulate", "--quiet", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert rc == 3 and not (tmp_path / "p.yaml").exists()  # no feasible plan (planner.NoFeasiblePlan)
    assert "skipped: KV per rank too small for the workload's longest request (prompt 65,536" in err
    assert "both DEP8" in err


def test_model_given_as_a_config_folder(tmp_path, capsys):
    folder = DATA / "Qwen--Qwen3-30B-A3B"
    plan_then_simulate(tmp_path, capsys, str(folder), "h200-sxm", requests=20)
    plan = load_plan(tmp_path / "h200-sxm.yaml")
    assert plan.model == str((folder / "config.json").resolve())
    assert load_model(plan.model) == load_model(str(folder))
