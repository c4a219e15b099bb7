"""Multi-turn sessions in the simulator: a turn hits only the blocks still held by the prefix cache of
the instance it is routed to (tiny-moe on the CPU rig, MLA: 64-token KV blocks)."""
import dataclasses
import json

import pytest

from rackplan.cli import main
from rackplan.sim.deployment import validate_plan
from rackplan.sim.simulator import simulate_specs
from rackplan.specs import (
    Arrival,
    LengthDist,
    Scenario,
    Workload,
    dump_yaml,
    load_hardware,
    load_model,
    load_plan,
    load_profile,
)
from rackplan.specs.session import Sessions

pytestmark = pytest.mark.integration
PLAN = load_plan("tiny-disagg")  # two prefill instances, one decode instance
MODEL, HW, PROF = load_model(PLAN.model), load_hardware(PLAN.hardware), load_profile("cpu-local")


def fixed(v):
    return LengthDist(kind="fixed", value=v)


def chat(num_requests=300):
    """Sessions of 2-8 turns starting at 2/s, prompts 200-400 tokens, 20-80 new tokens a turn, 2 s think time."""
    return Workload(name="sessions", arrival=Arrival(kind="poisson", rate=2.0),
                    isl=LengthDist(kind="uniform", low=200, high=400), osl=LengthDist(kind="uniform", low=8, high=32),
                    num_requests=num_requests, sessions=Sessions(turns=LengthDist(kind="uniform", low=2, high=8),
                                                                 followup=LengthDist(kind="uniform", low=20, high=80),
                                                                 think_s=2.0))


def plan_with(router, gpu_memory_utilization=None):
    pre = dataclasses.replace(PLAN.prefill[0], gpu_memory_utilization=gpu_memory_utilization)
    return dataclasses.replace(PLAN, router=router, prefill=(pre,))


def test_second_turn_hits_its_first_turns_full_blocks_by_hand():
    """One session, two turns: 200 tokens (3 full 64-token blocks + 8), then 200 + 10 + 20 = 230.
    Session-affine sends turn 2 where turn 1 ran: 192 cached tokens of 430; round robin sends it to the
    other prefill instance, whose cache is empty: none."""
    wl = Workload(name="one", arrival=Arrival(kind="poisson", rate=1.0), isl=fixed(200), osl=fixed(10),
                  num_requests=2, sessions=Sessions(turns=fixed(2), followup=fixed(20), think_s=1.0))
    sa = simulate_specs(Scenario(plan_with("session_affine"), MODEL, HW, wl, PROF))
    rr = simulate_specs(Scenario(plan_with("round_robin"), MODEL, HW, wl, PROF))
    assert sa.sessions["hit_rate"] == pytest.approx(192 / 430)
    assert sa.sessions["reuse_hit_rate"] == pytest.approx(192 / 200)
    assert [t["hit_rate"] for t in sa.sessions["per_turn"]] == [0.0, pytest.approx(192 / 230)]
    assert rr.sessions["hit_rate"] == 0.0
    assert sa.ttft_s[1] < rr.ttft_s[1]  # 38 tokens to prefill instead of 230
    assert sa.ttft_s[0] == pytest.approx(rr.ttft_s[0], rel=1e-12)


def test_hit_rate_falls_when_the_kv_cache_is_made_smaller():
    """The same seeded sessions on prefill instances with 41,879 and then 4,379 KV tokens a rank: the
    smaller cache evicts context before the session's next turn comes back to it."""
    caps, hits = [], []
    for util in (0.01, 0.005, 0.004):
        plan = plan_with("session_affine", util)
        caps.append(validate_plan(plan, MODEL, HW)["prefill[0]"])
        hits.append(simulate_specs(Scenario(plan, MODEL, HW, chat(), PROF)).sessions["hit_rate"])
    assert caps[0] > caps[1] > caps[2]
    assert hits[0] > hits[1] > hits[2]
    assert hits[2] < 0.8 * hits[0]


def test_session_affine_routing_beats_least_loaded_on_hit_rate():
    sa = simulate_specs(Scenario(plan_with("session_affine"), MODEL, HW, chat(), PROF)).sessions
    ll = simulate_specs(Scenario(plan_with("least_loaded"), MODEL, HW, chat(), PROF)).sessions
    assert sa["turns"] == ll["turns"] == 300
    assert sa["hit_rate"] > ll["hit_rate"]
    assert sa["reuse_hit_rate"] > 0.9  # what is lost: each turn's last partial block, each prompt's last token


def test_simulate_reports_hit_rate_and_latency_per_turn(tmp_path, capsys):
    dump_yaml(plan_with("session_affine"), tmp_path / "plan.yaml")
    dump_yaml(chat(60), tmp_path / "wl.yaml")
    args = ["simulate", "--plan", str(tmp_path / "plan.yaml"), "--workload", str(tmp_path / "wl.yaml")]
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    s = d["sessions"]
    assert s["turns"] == 60 and s["per_turn"][0]["turn"] == 1 and s["per_turn"][0]["hit_rate"] == 0.0
    assert sum(t["requests"] for t in s["per_turn"]) == 60
    assert all(t["ttft_p50_s"] > 0 for t in s["per_turn"])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "sessions (simulated" in out and "sessions/s" in out


def test_execute_refuses_a_session_workload(tmp_path, capsys):
    """The executor replays independent requests: a session workload is one line naming the field, exit 2."""
    dump_yaml(chat(8), tmp_path / "wl.yaml")
    assert main(["execute", "--plan", "tiny-disagg", "--workload", str(tmp_path / "wl.yaml"), "--requests", "4",
                 "--out", str(tmp_path / "run")]) == 2
    assert "field 'sessions'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
