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
    assert f"vllm: {DATA / 'vllm_bench_summary.json'}: mean lengths of 6 requests: 60 in / 10 out" in out
    assert "vllm.ttft_p50" in out


def test_several_profiles_are_replayed_side_by_side(capsys):
    """`validate --vllm-bench B --profile A --profile C` replayed the bench under A only (C did nothing);
    each profile is now a column named by the profile, with what the error means."""
    bench = str(DATA / "vllm_bench_detailed.json")
    assert main(["validate", "--plan", "tiny-cpu", "--vllm-bench", bench, "--profile", "cpu-local",
                 "--profile", "datasheet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("error = simulated / measured - 1" in line for line in lines)
    header = next(line for line in lines if line.strip().startswith("statistic"))
    assert header.split()[1:] == ["measured", "cpu-local", "datasheet"]
    rows = [line.split() for line in lines if line.strip().startswith("vllm.")]
    assert {r[0] for r in rows} >= {"vllm.ttft_p50", "vllm.tpot_p50"}
    for r in rows:
        own = compare_vllm_bench(PLAN, read_bench(bench, PLAN), load_profile("datasheet"))[f"{r[0][5:]}_err"]
        assert len(r) == 4 and r[3] == f"{own * 100:+.1f}%"
    assert any(r[2] != r[3] for r in rows)  # the two profiles price the bench differently


def test_max_mape_gates_every_bench(tmp_path, capsys):
    """--max-mape gated the first --vllm-bench only: a second bench 10x slower than the simulator passed."""
    bench = DATA / "vllm_bench_detailed.json"
    first = compare_vllm_bench(PLAN, read_bench(bench, PLAN), load_profile("cpu-local"))
    gate = max(abs(first[f"{s}_err"]) for s in ("ttft_p50", "tpot_p50")) * 100 + 1
    slow = json.loads(bench.read_text())
    slow["ttfts"] = [t * 10 for t in slow["ttfts"]]
    slow["latencies"] = [t * 10 for t in slow["latencies"]]
    (tmp_path / "slow.json").write_text(json.dumps(slow))
    args = ["validate", "--plan", "tiny-cpu", "--vllm-bench", str(bench), "--max-mape", f"{gate:.1f}"]
    assert main(args) == 0
    assert main(args + ["--vllm-bench", str(tmp_path / "slow.json")]) == 1
    assert "worst vllm1." in capsys.readouterr().out


def test_json_with_max_mape_is_json_only(capsys):
    """validate --json --max-mape printed its verdict line after the JSON on stdout: not parseable."""
    bench = str(DATA / "vllm_bench_detailed.json")
    rc = main(["validate", "--plan", "tiny-cpu", "--vllm-bench", bench, "--max-mape", "0", "--json"])
    out, err = capsys.readouterr()
    assert rc == 1 and json.loads(out)["gated"] and err.startswith("validate: FAIL")
