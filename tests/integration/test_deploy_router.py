"""What runs is what was simulated: every `router:` value the plan accepts deploys (exit 0) on the seed,
H200 32-GPU, 144-GPU two-rack and single-user plans, and router.sh, the llm-d scheduler config and the
plan name the same policy through the one table (rackplan/deploy/policies.py)."""
from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml

from rackplan.cli import main
from rackplan.deploy import build, context_for, policies
from rackplan.specs import Plan, dump_yaml, load_plan

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"
PLANS = {"seed": "v41-flash-gb300-nvl72", "h200-32gpu": str(DATA / "h200-dsv3-32gpu.yaml"),
         "gb300-144gpu": str(DATA / "v41-gb300-144gpu.yaml"), "single-user": "v41-flash-gb300-single-user"}
ROUTERS = typing.get_args(typing.get_type_hints(Plan)["router"])


def test_the_table_covers_every_router_value_the_plan_accepts():
    assert set(policies.POLICIES) == set(ROUTERS)


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("plan", PLANS)
def test_deploy_runs_every_documented_router_value(tmp_path, plan, router):
    p = dataclasses.replace(load_plan(PLANS[plan]), router=router)
    path = tmp_path / "plan.yaml"
    dump_yaml(p, path)
    assert main(["deploy", "--plan", str(path), "--out", str(tmp_path / "launch")]) == 0
    router_sh = (tmp_path / "launch" / "router.sh").read_text()
    values = yaml.safe_load((tmp_path / "launch" / "k8s" / "inferencepool.values.yaml").read_text())
    custom = values["inferenceExtension"]["pluginsCustomConfig"]["custom-plugins.yaml"]
    pol = policies.POLICIES[router]
    # the three name the same policy: the plan's, the vllm-router policy of it, the EPP plugins of it
    assert re.search(rf"--policy {pol.vllm_router}\b", router_sh) and f"Simulated policy {router} ->" in router_sh
    assert custom.startswith(f"# simulated router policy: {router} ")
    graph = [d for d in yaml.safe_load_all((tmp_path / "launch" / "dynamo" / "graph.yaml").read_text())
             if d["kind"] == "DynamoGraphDeployment"][0]
    front = next(c for c in graph["spec"]["components"] if c["type"] == "frontend")
    args = front["podTemplate"]["spec"]["containers"][0]["args"]
    assert args[args.index("--router-mode") + 1] == pol.dynamo
    epp = yaml.safe_load(custom)
    types = {p["type"] for p in epp["plugins"]}
    assert {t for t, _ in pol.scorers} | {pol.picker} <= types
    assert not ({"random-picker", "max-score-picker"} - {pol.picker}) & types  # no other picker
    for prof in epp["schedulingProfiles"]:
        refs = [r["pluginRef"] for r in prof["plugins"]]
        assert refs[-1] == pol.picker and [t for t, _ in pol.scorers] == [r for r in refs if r.endswith("-scorer")]


def test_prefix_aware_routes_to_dp_ranks_with_the_api_key():
    """prefix_aware keeps per-rank state (a prefix cache per DP rank): on the H200 plan every endpoint
    serves 8 local ranks, so vllm-router routes to ranks, and servers and router share VLLM_API_KEY."""
    cx = context_for(dataclasses.replace(load_plan(PLANS["h200-32gpu"]), router="prefix_aware"))
    files = build(cx)
    assert "--intra-node-data-parallel-size 8" in files["router.sh"]
    assert '--api-key "$VLLM_API_KEY"' in files["router.sh"]
    assert all('--api-key "$VLLM_API_KEY"' in t and "VLLM_API_KEY:?" in t for n, t in files.items()
               if n.startswith("host-"))
    # the seed plan's endpoints differ (2 ranks per prefill endpoint, 4 per decode host): one router flag
    # cannot name both, so each API server balances its own ranks
    seed = build(context_for(dataclasses.replace(load_plan(PLANS["seed"]), router="prefix_aware")))
    assert "--intra-node-data-parallel-size 1" in seed["router.sh"] and "VLLM_API_KEY" not in seed["router.sh"]
    least = build(context_for(load_plan(PLANS["h200-32gpu"])))
    assert "--intra-node-data-parallel-size 1" in least["router.sh"]  # least load: vLLM's own balancer
