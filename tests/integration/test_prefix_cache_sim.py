"""Prefix caches in the simulator, driven by the block hashes of the Mooncake sample
(tests/data/mooncake_prefix.jsonl: system prompts A = blocks 0-3 and B = blocks 10-13; requests
every 2 s in the order A1 A2 B1 B2, then each one's second turn), so each prefill has finished
and cached its blocks before the next request arrives."""
import json
from pathlib import Path

import pytest

from rackplan.cli import main
from rackplan.sim.simulator import simulate_specs
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
TRACE = Path(__file__).resolve().parents[1] / "data" / "mooncake_prefix.jsonl"
PROF, MODEL, HW = load_profile("datasheet"), load_model("deepseek-v3"), load_hardware("h200-sxm")
PROMPT_TOKENS = 3 * 2972 + 2400 + 3 * 3500 + 3000  # 24816
WL = Workload(name="mooncake-sample", arrival=Arrival(kind="trace"), isl=LengthDist(kind="trace"),
              osl=LengthDist(kind="trace"), trace=str(TRACE))


def two_prefill_plan(router):
    return Plan(name="p", model="deepseek-v3", hardware="h200-sxm", num_gpus=24, router=router,
                prefill=(Layout(role="prefill", dp=8, replicas=2),), decode=(Layout(role="decode", dp=8),))


def test_round_robin_hit_rate_by_hand():
    """Round robin: instance 0 gets r0 A1, r2 B1, r4 A1', r6 B1'; instance 1 gets r1 A2, r3 B2, r5 A2', r7 B2'.
    First turns all miss (each instance meets A and B once); second turns hit their first turn's
    blocks: r4 6 blocks (3072), r5 6 (3072), r6 6 (3072), r7 5 (2560): 11776 of 24816 tokens."""
    res = simulate_specs(Scenario(two_prefill_plan("round_robin"), MODEL, HW, WL, PROF))
    assert res.metrics["prefix_hit_rate"] == pytest.approx(11776 / PROMPT_TOKENS)


def test_prefix_aware_router_keeps_prefixes_together():
    """Prefix aware: queues are empty at every arrival, so a request goes where most of its blocks
    are: once A (or B) sits on an instance all of A's (B's) requests follow it, and each instance's
    hits equal one shared cache's: r1 2048, r3 2048, r4 3072, r5 3072, r6 3072, r7 2560 = 15872."""
    rr = simulate_specs(Scenario(two_prefill_plan("round_robin"), MODEL, HW, WL, PROF))
    pa = simulate_specs(Scenario(two_prefill_plan("prefix_aware"), MODEL, HW, WL, PROF))
    assert pa.metrics["prefix_hit_rate"] == pytest.approx(15872 / PROMPT_TOKENS)
    assert pa.metrics["prefix_hit_rate"] > rr.metrics["prefix_hit_rate"]
    # the hits are prefill work not done: A2 and B2 (4 cached blocks each) reach their first token sooner
    assert pa.ttft_s[1] < rr.ttft_s[1] and pa.ttft_s[3] < rr.ttft_s[3]
    assert pa.ttft_s[0] == pytest.approx(rr.ttft_s[0], rel=1e-12)  # a miss costs the same either way


def test_aggregated_instance_caches_too():
    plan = Plan(name="a", model="deepseek-v3", hardware="h200-sxm", num_gpus=8,
                aggregated=(Layout(role="both", dp=8),))
    res = simulate_specs(Scenario(plan, MODEL, HW, WL, PROF))
    assert res.metrics["prefix_hit_rate"] == pytest.approx(15872 / PROMPT_TOKENS)  # one cache, as by hand


def test_simulate_reports_measured_hit_rate(tmp_path, capsys):
    dump_yaml(two_prefill_plan("prefix_aware"), tmp_path / "plan.yaml")
    dump_yaml(WL, tmp_path / "wl.yaml")
    assert main(["simulate", "--plan", str(tmp_path / "plan.yaml"), "--workload", str(tmp_path / "wl.yaml"),
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["metrics"]["prefix_hit_rate"] == pytest.approx(15872 / PROMPT_TOKENS)
    assert main(["simulate", "--plan", str(tmp_path / "plan.yaml"), "--workload", str(tmp_path / "wl.yaml")]) == 0
    assert "prefix-cache hits" in capsys.readouterr().out
