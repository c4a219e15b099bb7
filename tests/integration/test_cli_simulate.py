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
