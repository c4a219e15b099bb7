"""The accuracy benchmark end to end on two cheap cases: a cost-model step and a real simulation."""
import json
import math
from pathlib import Path

import pytest
from bench_scripts import script

from rackplan.accuracy import command as accuracy

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration
CHEAP = ["--case", "h100-decode-ep72", "--case", "r1-gb300-prefill-ep2"]


def _run(capsys, *args):
    code = accuracy.main([*CHEAP, "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_two_cases_finite_and_reproducible(capsys, tmp_path):
    code, rep = _run(capsys, "--seed", "3", "--out", str(tmp_path))
    assert code == 0
    preds = {c["id"]: c["predictions"]["datasheet"] for c in rep["cases"]}
    assert set(preds) == {"h100-decode-ep72", "r1-gb300-prefill-ep2"}
    for p in preds.values():
        assert math.isfinite(p["predicted"]) and p["predicted"] > 0 and p["error"] is None
    assert rep["summary"]["datasheet"]["rows"] == 2
    assert _run(capsys, "--seed", "3")[1] == rep  # same seed, same report
    profiles = len(rep["summary"])  # datasheet and each case hardware's default profile
    assert profiles == 2
    assert (tmp_path / "accuracy.csv").read_text().count("\n") == 1 + 2 * profiles  # header + case x profile
    assert (tmp_path / "accuracy.png").stat().st_size > 1000


def test_a_profile_for_other_hardware_does_not_apply(capsys):
    code, rep = _run(capsys, "--profile", "datasheet", "--profile", "h800-deepep")
    assert code == 0
    for c in rep["cases"]:
        assert c["predictions"]["h800-deepep"]["predicted"] is None
        assert "fitted on h800" in c["predictions"]["h800-deepep"]["skipped"]
    assert rep["summary"]["h800-deepep"] is None


def test_bad_case_file_exits_2_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "x.yaml").write_text("cases:\n  - {id: x}\n")
    out = tmp_path / "out"
    assert accuracy.main(["--cases", str(tmp_path / "cases"), "--out", str(out)]) == 2
    assert "field" in capsys.readouterr().err
    assert not out.exists()


def test_closed_loop_rates_count_every_request_whole():
    """`vllm bench serve` divides all tokens by the run's duration, so at fixed ISL 2048 / OSL 1024
    input tok/s is exactly twice output tok/s. At concurrency 512 of 1000 requests (two waves) the
    steady-state window counted decode steps of the first wave against fewer prompts (ratio ~1.25)."""
    accuracy_sweep = script("accuracy_sweep.py")

    (row,) = accuracy_sweep.sweep("v32-gb300-mixed-tp4-fp8", [512], None, 1000, 0)
    out_tps = row["output_tps_per_gpu"] * 4  # TP4: 4 GPUs
    assert row["total_tps"] == pytest.approx(3 * out_tps, rel=1e-9)  # input + output = (2 + 1) x output
