"""`rackplan validate --vllm-bench` simulates the bench's own requests and says which lengths."""
import json
from pathlib import Path

import pytest

from rackplan.calibration.bench_fit import read_bench
from rackplan.calibration.io import read_vllm_bench
from rackplan.calibration.synthetic import synth_records, write_jsonl
from rackplan.calibration.validate import compare_vllm_bench
from rackplan.cli import main
from rackplan.specs import load_plan, load_profile

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parents[1] / "data"
PLAN = load_plan("tiny-cpu")


def test_compare_uses_the_bench_lengths():
    prof = load_profile("cpu-local")
    long = compare_vllm_bench(PLAN, read_bench(DATA / "vllm_bench_detailed.json", PLAN), prof)
    short = compare_vllm_bench(PLAN, read_vllm_bench(DATA / "vllm_bench_summary.json"), prof)
    assert long["workload"].startswith("per-request send times and lengths of 5 requests")
    assert short["workload"].startswith("mean lengths of 6 requests: 60 in / 10 out")
    for out, bench in ((long, "vllm_bench_detailed.json"), (short, "vllm_bench_summary.json")):
        measured = json.loads((DATA / bench).read_text())["median_ttft_ms"] / 1e3
        assert out["ttft_p50_measured_s"] == pytest.approx(measured)
        assert out["ttft_p50_predicted_s"] > 0 and out["tpot_p50_predicted_s"] > 0


def test_validate_prints_which_lengths(tmp_path, capsys):
    write_jsonl(synth_records(PLAN, load_profile("cpu-local"), repeats=1), tmp_path / "measurements.jsonl")
    assert main(["validate", "--plan", "tiny-cpu", "--measurements", str(tmp_path),
                 "--vllm-bench", str(DATA / "vllm_bench_summary.json")]) == 0
    out = capsys.readouterr().out
    assert "vllm.workload: mean lengths of 6 requests: 60 in / 10 out" in out
    assert "vllm.ttft_p50" in out
