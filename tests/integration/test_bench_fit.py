"""Calibration from `vllm bench serve` results: a perturbed profile fitted back, vLLM's exact schema
read, before/after in validate, and bad bench files refused with one line and no profile."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rackplan.calibration import bench_fit
from rackplan.calibration.validate import compare_vllm_bench
from rackplan.cli import main
from rackplan.sim.simulator import with_rate
from rackplan.specs import SpecError, load_plan, load_profile, load_workload, plan_hash, resolve_profile

pytestmark = pytest.mark.integration
H200 = str(Path(__file__).resolve().parents[1] / "data" / "h200-dsv3-32gpu.yaml")
TRUE = {"prefill_scale": 1.3, "decode_scale": 0.8}  # the perturbation the fit must find


def _base():
    """The profile a bench-only fit starts from: the plan's, else its hardware's default."""
    plan = load_plan(H200)
    return resolve_profile(None, plan.profile, plan.hardware)


def _bench(tmp: Path, name: str, seed: int, requests: int = 400) -> Path:
    """A bench JSON simulated with the perturbed profile at half the planned rate."""
    plan = load_plan(H200)
    wl = with_rate(load_workload(plan.workload), 0.5 * plan.predicted["request_rate"])
    data = bench_fit.simulated_bench(plan, bench_fit.with_params(_base(), TRUE), wl, requests, seed)
    path = tmp / name
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("benchfit")
    bench, held = _bench(tmp, "bench.json", 0), _bench(tmp, "held.json", 1)
    out = tmp / "fitted.yaml"
    assert main(["calibrate", "--vllm-bench", str(bench), "--plan", H200, "--out", str(out)]) == 0
    return out, held


def test_perturbed_phase_scales_are_recovered_within_5pct(fitted):
    prof = load_profile(fitted[0])
    fit = prof.provenance["vllm_bench_fit"]["parameters"]
    for op in ("moe.experts", "attn.core", "moe.dispatch", "lm_head"):
        assert prof.op_scale[f"{op}/prefill"] == pytest.approx(TRUE["prefill_scale"], rel=0.05)
        assert prof.op_scale[f"{op}/decode"] == pytest.approx(TRUE["decode_scale"], rel=0.05)
    assert fit["prefill_scale"]["identified"] and fit["decode_scale"]["identified"]
    # async scheduling hides host time here except the serial part of each decode step (the DP16
    # collective and the speculative readback, ~0.5 ms of ~30 ms): host_scale is weakly identified
    # at best, and stays within two posterior sd of the truth (1)
    host = fit["host_scale"]
    assert host["sd_log"] > 0.2 and abs(math.log(host["value"])) < 2 * host["sd_log"]
    after = prof.provenance["vllm_bench_fit"]["error_after_pct"]
    before = prof.provenance["vllm_bench_fit"]["error_before_pct"]
    assert max(map(abs, after.values())) < 2.0 < min(map(abs, before.values()))


def test_validate_shows_the_gain_on_a_held_out_bench(fitted, capsys):
    out, held = fitted
    assert main(["validate", "--plan", H200, "--vllm-bench", str(held), "--profile", str(out), "--json"]) == 0
    serving = json.loads(capsys.readouterr().out)["serving"]
    for stat in ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"):
        before, after = serving[f"vllm.before.{stat}_err"], serving[f"vllm.{stat}_err"]
        assert abs(after) < 0.08 and abs(after) < abs(before) / 4, (stat, before, after)
    assert main(["validate", "--plan", H200, "--vllm-bench", str(held), "--profile", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.strip().startswith("statistic"))  # base before, fitted after
    assert header.split()[1:] == ["measured", _base().name, "(base)", load_profile(out).name]
    assert any(line.split()[0] == "vllm.tpot_p50" for line in lines if line.strip())


# vLLM 0.33 `vllm bench serve --save-result --save-detailed --percentile-metrics ttft,tpot,itl,e2el
# --metric-percentiles 50,90,99 --metadata rackplan_plan=...` (vllm/benchmarks/serve.py: result_json
# setup, metadata and traffic keys, then benchmark_result with the detailed lists and
# process_one_metric's mean/median/std/pNN keys), written out by hand for 4 requests, one failed.
def _handwritten(plan_name: str, phash: str) -> dict:
    return {
        "date": "20261201-101500", "endpoint_type": "openai", "backend": "openai", "label": None,
        "model_id": "deepseek-ai/DeepSeek-V3", "tokenizer_id": "deepseek-ai/DeepSeek-V3", "num_prompts": 4,
        "rackplan_plan": plan_name, "rackplan_plan_hash": phash, "rackplan_workload": "isl4k-osl1k",
        "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None,
        "duration": 3.1, "completed": 3, "failed": 1, "total_input_tokens": 12000, "total_output_tokens": 12,
        "request_throughput": 0.97, "request_goodput": None, "output_throughput": 3.9, "total_token_throughput": 3874.0,
        "input_lens": [4000, 4000, 4000, 4000], "output_lens": [4, 4, 0, 4],
        "ttfts": [0.21, 0.25, 0.0, 0.22], "itls": [[0.02, 0.021, 0.019], [0.02, 0.02, 0.02], [], [0.022, 0.02, 0.021]],
        "latencies": [0.27, 0.31, 0.0, 0.283], "start_times": [5001.0, 5001.4, 5001.9, 5002.6],
        "queue_times": [0.0, 0.0, 0.0, 0.0], "generated_texts": ["a b c d", "e f g h", "", "i j k l"],
        "errors": ["", "", "Bad Gateway", ""], "max_output_tokens_per_s": 6.0, "max_concurrent_requests": 2,
        "rtfx": 0.0,
        "mean_ttft_ms": 226.7, "median_ttft_ms": 220.0, "std_ttft_ms": 17.0, "p50_ttft_ms": 220.0,
        "p90_ttft_ms": 244.0, "p99_ttft_ms": 249.4,
        "mean_tpot_ms": 20.3, "median_tpot_ms": 20.0, "std_tpot_ms": 0.5, "p50_tpot_ms": 20.0,
        "p90_tpot_ms": 20.8, "p99_tpot_ms": 21.0,
        "mean_itl_ms": 20.3, "median_itl_ms": 20.0, "std_itl_ms": 0.9, "p50_itl_ms": 20.0,
        "p90_itl_ms": 21.6, "p99_itl_ms": 22.0,
        "mean_e2el_ms": 287.7, "median_e2el_ms": 283.0, "std_e2el_ms": 16.6, "p50_e2el_ms": 283.0,
        "p90_e2el_ms": 305.6, "p99_e2el_ms": 309.4,
    }


def test_handwritten_vllm_schema_is_read_and_replayed(tmp_path):
    plan = load_plan(H200)
    data = _handwritten(plan.name, plan_hash(plan))
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(data))
    b = bench_fit.read_bench(path, plan)
    assert len(b.isl) == 3 and b.start_s.tolist() == pytest.approx([0.0, 0.4, 1.6])  # the failed one dropped
    assert b.tpot_s.tolist() == pytest.approx([0.02, 0.02, 0.021])
    assert b.summary["ttft_median_s"] == pytest.approx(0.22) and b.concurrency is None
    cmp = compare_vllm_bench(plan, b, load_profile("datasheet"))
    assert cmp["ttft_p50_measured_s"] == pytest.approx(0.22) and np.isfinite(cmp["ttft_p50_err"])
    # our simulated benches write the same schema (every key vLLM writes, same types of lists)
    sim = bench_fit.simulated_bench(plan, load_profile("datasheet"), load_workload(plan.workload), 5)
    assert set(data) <= set(sim) and all(type(sim[k]) is type(data[k]) for k in ("itls", "ttfts", "errors"))


def _variant(tmp: Path, edit) -> Path:
    plan = load_plan(H200)
    data = _handwritten(plan.name, plan_hash(plan))
    edit(data)
    path = tmp / "bad.json"
    path.write_text(json.dumps(data) if isinstance(data, dict) else data)
    return path


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(model_id="Qwen/Qwen3-235B-A22B"), "model_id"),
    (lambda d: d.pop("ttfts"), "ttfts"),
    (lambda d: d.pop("start_times"), "start_times"),
    (lambda d: d.pop("output_throughput"), "output_throughput"),
    (lambda d: d.update(rackplan_plan_hash="0123456789abcdef"), "rackplan_plan_hash"),
    (lambda d: d.update(errors=["x"] * 4), "errors"),
])
def test_bad_bench_json_is_one_line_exit_2_and_no_profile(tmp_path, capsys, edit, field):
    out = tmp_path / "p.yaml"
    rc = main(["calibrate", "--vllm-bench", str(_variant(tmp_path, edit)), "--plan", H200, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and field in err


def test_not_json_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="vllm bench serve result JSON"):
        bench_fit.read_bench(path, load_plan(H200))


def test_closed_loop_bench_replays_at_its_concurrency(tmp_path):
    plan = load_plan(H200)
    data = _handwritten(plan.name, plan_hash(plan))
    data.update(request_rate="inf", max_concurrency=2)  # `--max-concurrency 2 --request-rate inf`
    path = tmp_path / "closed.json"
    path.write_text(json.dumps(data))
    b = bench_fit.read_bench(path, plan)
    assert b.concurrency == 2
    assert np.isfinite(compare_vllm_bench(plan, b, load_profile("datasheet"))["tpot_p50_err"])


def test_calibrate_prints_the_bench_fit_as_lines_and_a_table(tmp_path, capsys):
    """calibrate --vllm-bench printed `vllm_bench: {'prefill_scale': '1.034', ...}` and the errors as
    Python dict reprs: now one line per parameter and the base / fitted errors side by side."""
    plan = load_plan(H200)
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(_handwritten(plan.name, plan_hash(plan))))
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--vllm-bench", str(path), "--plan", H200, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "{'" not in text and "': " not in text  # no dict reprs
    lines = [line.split() for line in text.splitlines()]
    assert ["base_profile:", _base().name] in lines and any(w[0] == "decode_scale:" for w in lines)
    fit = load_profile(out).provenance["vllm_bench_fit"]
    header = lines.index(["statistic", "base", "fitted"])
    rows = {w[0]: w[1:] for w in lines[header + 1:]}
    pct = (fit["error_before_pct"]["ttft_p50"], fit["error_after_pct"]["ttft_p50"])
    assert rows["ttft_p50"] == [f"{pct[0]:+.2f}", f"{pct[1]:+.2f}"]
