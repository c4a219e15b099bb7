"""`rackplan execute` runs what a plan names: the embedded single-user plan (aggregated TP4 with
DSpark speculation) on tiny-moe shapes, speculation in disaggregated serving, EPLB placements,
async scheduling."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from rackplan.executor.schema import read_measurements
from rackplan.specs import EPLBConfig, Speculation, dump_yaml, load_plan

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _execute(plan, out: Path, *extra, timeout=180):
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(plan), "--device", "cpu",
           "--out", str(out), *extra]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return read_measurements(out)


def _check_single_user(recs):
    steps = [r for r in recs if r["op"] == "step"]
    assert {r["role"] for r in steps} == {"prefill", "decode"} and {r["rank"] for r in steps} == {0, 1, 2, 3}
    assert all(r["shape"]["instance"] == "aggregated[0]" and r["ep"] == 4 for r in steps)
    assert {r["shape"]["tp_rank"] for r in steps} == {0, 1, 2, 3}
    assert {"attn.allreduce", "ffn.allreduce", "moe.dispatch", "draft"} <= {r["op"] for r in recs}
    assert recs[0]["model"] == "tiny-moe" and recs[0]["plan_model"] == "deepseek-v4.1-flash"
    for r in (r for r in steps if r["role"] == "decode"):
        s = r["shape"]
        assert s["spec_depth"] == 5 and s["tokens"] == 6 * s["batch"] and s["acceptance"] == "drawn"
        assert s["tokens_emitted"] == s["batch"] + s["accepted"]


def test_single_user_plan_layouts_on_tiny_shapes(tmp_path):
    """The single-user plan's layout (TP4, EP4, DSpark block drafts of 5) at tiny-chat lengths."""
    plan = dataclasses.replace(load_plan("v41-flash-gb300-single-user"), workload="tiny-chat")
    dump_yaml(plan, tmp_path / "plan.yaml")
    _check_single_user(_execute(tmp_path / "plan.yaml", tmp_path, "--model", "tiny-moe", "--steps", "2"))


@pytest.mark.slow
def test_embedded_single_user_plan_executes_on_cpu(tmp_path):
    """The embedded plan as it is (4k-token prompts), two tiny-moe layers."""
    _check_single_user(_execute("v41-flash-gb300-single-user", tmp_path, "--model", "tiny-moe", "--steps", "1",
                                "--warmup", "0", "--max-dense-layers", "1", "--max-moe-layers", "1"))


@pytest.mark.slow
def test_speculation_and_async_scheduling_in_disaggregated_serving(tmp_path):
    base = load_plan("tiny-disagg")
    dec = dataclasses.replace(base.decode[0], speculation=Speculation(2, 2.2), async_scheduling=True)
    plan = dataclasses.replace(base, model="tiny-moe-mtp", prefill=(dataclasses.replace(base.prefill[0], replicas=1),),
                               decode=(dec,), num_gpus=2)
    dump_yaml(plan, tmp_path / "plan.yaml")
    recs = _execute(tmp_path / "plan.yaml", tmp_path, "--workload", "tiny-chat", "--requests", "8")
    reqs = [r for r in recs if r["op"] == "request"]
    assert len(reqs) == 8 and all(len(r["output_tokens"]) == r["osl"] for r in reqs)
    dec_steps = [r for r in recs if r["role"] == "decode" and r["op"] == "step"]
    assert all(r["shape"]["tokens"] == 3 * r["shape"]["batch"] for r in dec_steps)
    assert sum(r["shape"]["tokens_emitted"] for r in dec_steps) == sum(r["osl"] for r in reqs)
    assert sum(r["shape"]["accepted"] for r in dec_steps) > 0  # drawn at the plan's rate, so fewer steps
    assert len(dec_steps) < sum(r["osl"] for r in reqs)
    assert {"draft", "host.exposed"} <= {r["op"] for r in recs if r["role"] == "decode"}


def test_eplb_placement_runs_in_benchmark_mode(tmp_path):
    base = load_plan("tiny-cpu")
    dec = dataclasses.replace(base.decode[0], eplb=EPLBConfig(2, "global"))
    dump_yaml(dataclasses.replace(base, decode=(dec,)), tmp_path / "plan.yaml")
    recs = _execute(tmp_path / "plan.yaml", tmp_path, "--steps", "2", "--skip-prefill")
    exp = [r for r in recs if r["op"] == "moe.experts"]
    assert all(r["shape"]["eplb"] == {"policy": "global", "redundant_experts": 2, "slots_per_rank": 9,
                                      "loads_from": "routing skew 0"} for r in exp)
    assert all(len(r["shape"]["expert_tokens_layers"]) == 3 for r in exp)
