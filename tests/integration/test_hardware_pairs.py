"""`rackplan plan --hardware-pairs` (sim/search/pairs.py): the planner searches mixed prefill/decode
hardware pairs beside single kinds, and the objective chooses across them.

Two kinds derived from the CPU machine's YAML with round figures, so every check is done by hand:
`fast` has 4x the FLOP/s at a quarter of the memory bandwidth and costs $3/GPU-h, `cheap` is the
machine itself at $1/GPU-h; both draw 10 W idle and 100 W loaded. Prefill is compute-bound, so
`fast:cheap` (prefill on fast, decode on cheap) serves tokens cheaper than either kind alone."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackplan.cli import build_parser, main
from rackplan.sim.search import compare, pairs
from rackplan.sim.search.command import build_request
from rackplan.specs import SpecError, load_plan, resolve_path

pytestmark = pytest.mark.integration
IDLE_W, LOADED_W, PUE = 10.0, 100.0, 1.2  # PUE: the default (rackplan/economics.py DEFAULT_PUE)
KINDS = {"cheap": (1.0, "90.0e9", "31.5e9", "1.0e9"), "fast": (3.0, "360.0e9", "7.875e9", "0.5e9")}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> Path:
    """cheap.yaml and fast.yaml (each with its own copy of the cpu-local profile, fitted on it by name)."""
    d = tmp_path_factory.mktemp("kinds")
    hw = resolve_path("hardware", "cpu-local").read_text().replace("cores: 2 ", "cores: 8 ")  # no core cap
    prof = resolve_path("profiles", "cpu-local").read_text()
    for name, (price, flops, hbm, nic) in KINDS.items():
        (d / f"{name}-prof.yaml").write_text(prof.replace("cpu-local", name))
        (d / f"{name}.yaml").write_text(
            hw.replace("name: cpu-local", f"name: {name}").replace("fp32: 90.0e9", f"fp32: {flops}")
            .replace("hbm_bw: 31.5e9", f"hbm_bw: {hbm}").replace("scaleout_bw: 1.0e9", f"scaleout_bw: {nic}")
            .replace("default_profile: cpu-local", f"default_profile: {d / name}-prof.yaml")
            + f"power_idle_w: {IDLE_W}\npower_loaded_w: {LOADED_W}\nprice_per_gpu_hour: {price}\n")
    return d


def _args(kinds: Path, *extra: str) -> list[str]:
    return ["plan", "--model", "tiny-moe", "--hardware", f"{kinds / 'cheap.yaml'},{kinds / 'fast.yaml'}",
            "--hardware-pairs", f"{kinds / 'fast.yaml'}:{kinds / 'cheap.yaml'}", "--gpus", "4", "--workload",
            "tiny-chat", "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "1", "--quiet",
            "--out", str(kinds / "plan.yaml"), *extra]


@pytest.fixture(scope="module")
def rows(kinds):
    args = build_parser("plan").parse_args(_args(kinds, "--objective", "cost"))
    return compare.plan_each(args, build_request)


def test_pairs_parse_and_bad_input(kinds, capsys):
    assert pairs.parse("a:b, c:d") == [("a", "b"), ("c", "d")]
    assert pairs.parse("a,b,c") == [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")]
    for bad in ("a", "a:a", "a:b,a:b", "a:b,c", "a:b:c", "a,,b", ":b", "a,a"):
        with pytest.raises(SpecError, match="--hardware-pairs"):
            pairs.parse(bad)
    base = _args(kinds)
    i = base.index("--hardware-pairs") + 1
    for bad in ("h200-sxm:no-such-kind", "h200-sxm:", "h200-sxm:h200-sxm"):
        assert main(base[:i] + [bad] + base[i + 1:]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--hardware-pairs" in err[0], err
    assert main(base + ["--mode", "agg"]) == 2 and "--mode" in capsys.readouterr().err


def test_a_pair_is_chosen_on_cost_and_priced_per_kind_by_hand(rows):
    assert [r.hardware for r in rows] == ["cheap", "fast", "fast:cheap"]
    assert all(r.res is not None for r in rows)
    best = compare.choice(rows)
    assert best.hardware == "fast:cheap"
    req, w = best.res.request, best.res.winner
    # verified in the simulator at steady state, prefill pool on fast, decode pool on cheap
    assert w.check is not None and w.passed and w.check.metrics["stable"] == 1.0
    assert best.res.plan.prefill_hardware.endswith("fast.yaml") and best.res.plan.hardware.endswith("cheap.yaml")
    # the KV link: the slower NIC of the two (fast's 0.5 GB/s), at the decode profile's efficiency
    assert pairs.kv_link(req).bw == pytest.approx(0.5e9 * req.profile.kv_transfer_bw_eff)
    # $/M output tokens: GPU-hours of each kind x its price / output tokens in an hour
    m = w.check.metrics
    g_p, g_d = pairs.pool_gpus(w.cand)
    tps = m["output_tps_per_gpu"] * (g_p + g_d)
    usd_h = g_p * 3.0 + g_d * 1.0
    fig = best.figures(None)
    assert fig["usd_per_m_output_tokens"] == pytest.approx(usd_h / (tps * 3600 / 1e6))
    # power: each pool's GPUs at its own simulated busy share, linear between idle and loaded, x PUE
    u_p, u_d = m["busy_share.prefill"], m["busy_share.decode"]
    watts = PUE * (g_p * (IDLE_W + (LOADED_W - IDLE_W) * u_p) + g_d * (IDLE_W + (LOADED_W - IDLE_W) * u_d))
    assert fig["output_tps_per_mw"] == pytest.approx(tps / (watts / 1e6))
    # the cost objective across rows ranks on the 4-GPU budget: copies fill it, the rest paid at the pair's
    # mean price; the pair beats both kinds alone on it
    copies = 4 // (g_p + g_d)
    billed = copies * usd_h + (4 - copies * (g_p + g_d)) * usd_h / (g_p + g_d)
    assert economy_budget(req, w).usd_per_m_output == pytest.approx(billed / (copies * tps * 3600 / 1e6))
    others = [economy_budget(r.res.request, r.res.winner).usd_per_m_output for r in rows[:2]]
    assert economy_budget(req, w).usd_per_m_output < min(others)
    assert any(line.startswith("chosen (cost") and "fast:cheap" in line for line in compare.notes(rows, None))


def economy_budget(req, v):
    from rackplan.sim.search import economy

    return economy.budget_of(req, v)


def test_the_pair_plan_file_simulates_at_steady_state(rows, capsys):
    best = compare.choice(rows)
    compare.write(rows, None, None)
    plan = load_plan(best.out)
    assert plan.prefill_hardware == best.res.request.prefill_side.hw_ref
    assert main(["simulate", "--plan", best.out, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stable"] is True
    assert doc["metrics"]["output_tps_per_gpu"] > 0
    assert doc["economics"]["usd_per_m_output_tokens"] > 0
