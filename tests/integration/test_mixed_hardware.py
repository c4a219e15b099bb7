"""Mixed hardware (sim/mixed.py): DeepSeek-V4.1-Flash prefilling on H200 HGX nodes and decoding on a
GB300 NVL72 rack (configs/plans/v41-flash-h200-prefill-gb300-decode.yaml). Each pool is priced and
holds KV on its own hardware, the KV cache crosses the slower NIC of the two, and cost and power
add up per pool: every expected value below derived by hand from the YAMLs' figures."""
from __future__ import annotations

import dataclasses
import json
from argparse import Namespace

import numpy as np
import pytest
import simpy

from rackplan import economics
from rackplan.cli import main
from rackplan.sim.cost.memory import kv_capacity_tokens
from rackplan.sim.deployment import Deployment, validate_plan
from rackplan.sim.metrics import RequestLog
from rackplan.sim.mixed import plan_kv_link, prefill_side
from rackplan.sim.simulator import simulate_specs
from rackplan.sim.workload import make_requests
from rackplan.specs import Scenario, SpecError, load_hardware, load_model, load_plan, load_profile, load_workload
from rackplan.specs.layout import Layout, Plan

pytestmark = pytest.mark.integration
PLAN = "v41-flash-h200-prefill-gb300-decode"


@pytest.fixture(scope="module")
def specs():
    plan = load_plan(PLAN)
    return plan, load_model(plan.model), load_hardware("gb300-nvl72"), load_profile("gb300-nvl72-vllm")


def test_kv_transfer_over_the_slower_nic_by_hand(specs):
    plan, model, hw, prof = specs
    # V4.1-Flash KV per token: the shared latent, 874 B on 1 stored layer, + its indexer key, 128 B every
    # 8th token -> 874 + 16 = 890 B; per sequence: the sliding window, 128 tokens x 512 B x 40 layers
    assert model.kv_bytes_per_token == 874 + 128 / 8 == 890.0
    assert model.kv_bytes_per_sequence_fixed == 128 * 512 * 40 == 2_621_440
    # link: H200 CX-7 400 Gb/s = 50 GB/s per GPU against GB300 CX-8 100 GB/s -> 50 GB/s, x 0.7 (the decode
    # profile's efficiency) = 35 GB/s; handshake 1 ms. An 8,000-token prompt: 8,000 x 890 + 2,621,440 =
    # 9,741,440 B / 35e9 B/s = 0.27833 ms -> 1.27833 ms in all
    link = plan_kv_link(plan, model, hw, prof)
    assert link.bw == pytest.approx(50e9 * 0.7)
    assert link.seconds(8000) == pytest.approx(1e-3 + 9_741_440 / 35e9)
    assert link.seconds(8000) == pytest.approx(1.27833e-3, rel=1e-5)
    # the same plan on one GB300 rack (40 GPUs, one NVLink domain): 900 GB/s NVLink x 0.7
    one = dataclasses.replace(plan, prefill_hardware=None)
    assert plan_kv_link(one, model, hw, prof).seconds(8000) == pytest.approx(1e-3 + 9_741_440 / (900e9 * 0.7))
    # a declared link acts: 25 GB/s x 0.7
    slow = dataclasses.replace(plan, kv_link_bw=25e9)
    assert plan_kv_link(slow, model, hw, prof).seconds(8000) == pytest.approx(1e-3 + 9_741_440 / 17.5e9)


def test_each_pool_on_its_own_hardware(specs):
    plan, model, hw, prof = specs
    h200 = load_hardware("h200-sxm")
    pre_hw, pre_prof = prefill_side(plan, hw, prof)
    assert (pre_hw.name, pre_prof.name) == ("h200-sxm", "h200-sxm-vllm")  # H200's default profile prices it
    caps = validate_plan(plan, model, hw)  # KV per rank: the prefill pool's in H200 HBM, the decode pool's in GB300's
    assert caps["prefill[0]"] == kv_capacity_tokens(model, h200, plan.prefill[0])
    assert caps["decode[0]"] == kv_capacity_tokens(model, hw, plan.decode[0])
    assert caps["prefill[0]"] < kv_capacity_tokens(model, hw, plan.prefill[0])  # 141 GB against 279 GB
    # every request's transfer seconds in the simulator are the link's (same floats)
    wl = load_workload("agentic-chat")
    reqs = make_requests(wl, 50)
    dep = Deployment(simpy.Environment(), Scenario(plan, model, hw, wl, prof), reqs, RequestLog(50))
    assert dep.front[0].pricer.cx.hw.name == "h200-sxm" and dep.decoders[0].pricer.cx.hw.name == "gb300-nvl72"
    want = 1e-3 + (np.asarray(reqs.isl, dtype=float) * 890.0 + 2_621_440) / 35e9
    assert np.allclose(np.asarray(dep.kv_s), want, rtol=1e-12)
    dep.close()


def test_cost_and_power_add_up_per_pool(specs):
    """A short run: each pool's GPUs at their own busy share and their hardware's draw and price."""
    plan, model, hw, prof = specs
    res = simulate_specs(Scenario(plan, model, hw, load_workload("agentic-chat"), prof), num_requests=200)
    args = Namespace(price_per_gpu_hour=None, kwh_price=None, pue=None, cost=None)
    eco = economics.of_plan_metrics(plan, hw, args, res.metrics, res.utilisation)
    h200 = load_hardware("h200-sxm")
    u = res.utilisation
    u_pre = sum(u[f"prefill[0].{j}"] for j in range(3)) / 3  # three 8-GPU instances
    u_dec = u["decode[0].0"]
    it_w = 24 * (380 + (1275 - 380) * u_pre) + 16 * (560 + (1875 - 560) * u_dec)  # the YAMLs' idle / loaded
    assert eco.it_power_w == pytest.approx(it_w)
    assert eco.facility_power_w == pytest.approx(1.2 * it_w)
    assert eco.usd_per_hour == pytest.approx(24 * 4.54 + 16 * 5.45) == 196.16  # each hardware's list price
    tps = res.metrics["output_tps_per_gpu"] * 40
    assert eco.usd_per_m_output == pytest.approx(196.16 / (tps * 3600 / 1e6))
    assert (h200.power_idle_w, h200.power_loaded_w, h200.price_per_gpu_hour) == (380, 1275, 4.54)
    lines = economics.lines(eco, (h200, hw))
    assert "24 x h200-sxm at $4.54/GPU-h" in lines[1] and "16 x gb300-nvl72 at $5.45/GPU-h" in lines[1]
    assert "h200-sxm: H200 700 W" in lines[0]
    with pytest.raises(SpecError, match="--price-per-gpu-hour"):  # one price for two kinds: refused
        economics.of_plan_metrics(plan, hw, Namespace(**{**vars(args), "price_per_gpu_hour": 3.0}), res.metrics,
                                  res.utilisation)


def test_mixed_fields_refused_where_they_cannot_act(tmp_path, capsys):
    agg = Plan("x", "tiny-moe", "cpu-local", 1, aggregated=(Layout("both", dp=1),))
    with pytest.raises(SpecError, match="prefill_hardware"):  # no prefill pool of its own
        dataclasses.replace(agg, prefill_hardware="h200-sxm")
    with pytest.raises(SpecError, match="kv_link_bw"):
        dataclasses.replace(load_plan("tiny-disagg"), kv_link_bw=0.0)
    assert main(["deploy", "--plan", PLAN, "--out", str(tmp_path / "d")]) == 2
    assert "prefill_hardware" in capsys.readouterr().err and not (tmp_path / "d").exists()
    assert main(["execute", "--plan", PLAN, "--device", "cpu", "--model", "tiny-moe", "--out",
                 str(tmp_path / "e")]) == 2
    assert "prefill_hardware" in capsys.readouterr().err


@pytest.mark.slow
def test_mixed_plan_verifies_at_steady_state(capsys):
    """`rackplan simulate --plan` at the plan's rate (40 req/s): stable at steady state, SLOs met."""
    assert main(["simulate", "--plan", PLAN, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    m = doc["metrics"]
    assert m["stable"] == 1.0 and m["request_rate"] == pytest.approx(40.0, rel=0.05)
    assert m["ttft_p90_s"] <= 2.0 and m["tpot_p90_s"] <= 0.05
    assert doc["economics"]["usd_per_hour"] == pytest.approx(196.16)
