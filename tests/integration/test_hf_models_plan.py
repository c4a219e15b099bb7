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


def plan_then_simulate(tmp_path, capsys, model: str, hardware: str, requests: int = 40) -> dict:
    out = tmp_path / f"{hardware}.yaml"
    assert main(["plan", "--model", model, "--hardware", hardware, "--gpus", GPUS[hardware], "--workers", "1",
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
    if (model, hardware) == ("kimi-k2", "h200-sxm"):
        # the planner's analytic search does not check the workload's longest prompt against a layout's KV
        # room: it picks TP8 prefill ranks whose KV cannot hold agentic-chat's long prompts, which the serving
        # policy's paged KV then never admits (simulate refuses it: field 'isl'); open in issue 43's notes
        pytest.xfail("planner does not check the longest prompt against the prefill layout's KV room")
    result = plan_then_simulate(tmp_path, capsys, model, hardware)
    assert result["hardware"] == hardware and load_plan(tmp_path / f"{hardware}.yaml").model == model


def test_model_given_as_a_config_folder(tmp_path, capsys):
    folder = DATA / "Qwen--Qwen3-30B-A3B"
    plan_then_simulate(tmp_path, capsys, str(folder), "h200-sxm", requests=20)
    plan = load_plan(tmp_path / "h200-sxm.yaml")
    assert plan.model == str((folder / "config.json").resolve())
    assert load_model(plan.model) == load_model(str(folder))
