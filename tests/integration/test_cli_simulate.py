"""`rackplan simulate`: the default run prints the table; the same seed gives identical JSON."""
import json

import pytest

from rackplan.cli import main

pytestmark = pytest.mark.integration


def test_default_simulate_prints_table(capsys):
    assert main([]) == 0  # the seed scenario under its hardware's default profile: a table, stable or not
    out = capsys.readouterr().out
    for word in ("measured over", "output tokens/s per GPU", "requests/s offered", "decode[0].0", "prefill[0].3"):
        assert word in out
    # the seed plan names no profile: GB300's measured default, and the header says so
    assert "profile gb300-nvl72-vllm (default for gb300-nvl72, measured: aiconfigurator-core" in out
    # under the datasheet profile its prefill pool serves ~260 req/s: at 200 it is stable, and latency shows
    assert main(["simulate", "--profile", "datasheet", "--rate", "200"]) == 0
    out = capsys.readouterr().out
    for word in ("steady state: stable", "TTFT", "TPOT", "ITL", "E2E", "p90 std. error"):
        assert word in out
    # the rate asked for, the kind of figure, and no 'inf' for the E2E of requests still decoding at the end
    assert "poisson at 200 req/s" in out and "simulation (discrete-event), measured over" in out
    assert "inf" not in out
    assert "still decoding when the run stopped" in out


def test_json_is_byte_identical_for_a_seed(capsys):
    outs = []
    for _ in range(2):
        assert main(["simulate", "--requests", "400", "--seed", "7", "--json"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    d = json.loads(outs[0])
    assert d["seed"] == 7 and d["metrics"]["num_requests"] == 400
    assert main(["simulate", "--requests", "400", "--seed", "8", "--json"]) == 0
    assert capsys.readouterr().out != outs[0]


def test_single_user_plan_reports_tokens_per_user(capsys):
    assert main(["simulate", "--plan", "v41-flash-gb300-single-user", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["metrics"]["tps_per_user"] > 100


def test_models_and_hardware_lists(capsys):
    assert main(["models"]) == 0 and "deepseek-v4.1-flash" in capsys.readouterr().out
    assert main(["hardware"]) == 0 and "gb300-nvl72" in capsys.readouterr().out
    # --json prints one record per entry, the table's numbers unrounded
    assert main(["models", "--json"]) == 0
    v41 = {m["name"]: m for m in json.loads(capsys.readouterr().out)}["deepseek-v4.1-flash"]
    assert v41["top_k"] > 0 and v41["params"] > 1e11
    assert main(["hardware", "--json"]) == 0
    gb300 = {h["name"]: h for h in json.loads(capsys.readouterr().out)}["gb300-nvl72"]
    assert gb300["domain_size"] == 72 and gb300["peak_flops"]["fp8"] > 0


def test_cost_and_power_follow_the_simulated_busy_share(capsys):
    """$/M tokens, tok/s/MW and J/token from the run's own figures (rackplan/economics.py), by hand."""
    from rackplan.specs import load_hardware, load_plan

    args = ["simulate", "--requests", "400", "--seed", "7", "--json", "--price-per-gpu-hour", "3",
            "--kwh-price", "0.1", "--pue", "1.1"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    eco, m, util = d["economics"], d["metrics"], d["utilisation"]
    plan, hw = load_plan("v41-flash-gb300-nvl72"), load_hardware("gb300-nvl72")
    gpus = {"prefill": plan.prefill[0].gpus, "decode": plan.decode[0].gpus}
    busy = sum(u * gpus[name.split("[")[0]] for name, u in util.items()) / 72
    assert eco["busy_share"] == pytest.approx(busy) and 0 < busy <= 1
    it_kw = 72 * (hw.power_idle_w + (hw.power_loaded_w - hw.power_idle_w) * busy) / 1e3
    assert eco["it_power_kw"] == pytest.approx(it_kw)
    assert eco["facility_power_kw"] == pytest.approx(1.1 * it_kw)
    usd_h = 72 * 3 + 1.1 * it_kw * 0.1
    assert eco["usd_per_hour"] == pytest.approx(usd_h)
    out_tps = m["output_tps_per_gpu"] * 72
    assert eco["usd_per_m_output_tokens"] == pytest.approx(usd_h / (out_tps * 3600 / 1e6))
    assert eco["output_tps_per_mw"] == pytest.approx(out_tps / (1.1 * it_kw / 1e3))
    assert eco["joules_per_output_token"] == pytest.approx(1.1 * it_kw * 1e3 / out_tps)
    assert main(["simulate", "--requests", "400", "--seed", "7"]) == 0  # the table names the sources
    out = capsys.readouterr().out
    assert "per M output tokens" in out and "Spheron" in out and "ISCA 2007" in out
