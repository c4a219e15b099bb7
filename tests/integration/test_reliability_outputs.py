"""Issue 18 outputs: the same inputs give byte-identical files; folders with an earlier run are
refused unless --force; a profile is loaded back before it is written."""
import json
from pathlib import Path

import pytest
from conftest import main_in

pytestmark = pytest.mark.integration
PLAN = ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
        "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "2", "--quiet", "--sim-requests", "16",
        "--out", "plan.yaml", "--report", "report", "--json"]


def _in(folder: Path, argv, capsys) -> tuple[int, str, str]:
    folder.mkdir(exist_ok=True)
    code = main_in(folder, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_plan_twice_is_byte_identical(tmp_path, capsys):
    code_a, json_a, _ = _in(tmp_path / "a", PLAN, capsys)
    code_b, json_b, _ = _in(tmp_path / "b", PLAN, capsys)
    assert code_a == code_b == 0
    assert json_a == json_b and "timings" not in json.loads(json_a)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert sorted(a) == sorted(b) and {"plan.yaml", "report/report.md", "report/pareto.png"} <= set(a)
    assert [k for k in a if a[k] != b[k]] == []


def test_timings_go_to_stderr_only_when_asked(tmp_path, capsys):
    code, out, err = _in(tmp_path, PLAN + ["--timings"], capsys)
    # (stderr may also carry the planner's note that cpu-local caps the GPU budget at its cores)
    assert code == 0 and "timings" in json.loads(out) and err.splitlines()[-1].startswith("timings: ")


def test_report_folder_with_an_earlier_run_needs_force(tmp_path, capsys):
    assert _in(tmp_path, PLAN, capsys)[0] == 0
    before = _files(tmp_path)
    code, _, err = _in(tmp_path, PLAN, capsys)
    assert code == 2 and "--force" in err and len(err.strip().splitlines()) == 1
    assert _files(tmp_path) == before
    (tmp_path / "report" / "stale.txt").write_text("old")
    assert _in(tmp_path, PLAN + ["--force"], capsys)[0] == 0
    assert not (tmp_path / "report" / "stale.txt").exists()  # --force replaced the folder
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_execute_into_an_earlier_run_needs_force(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "expert_counts.jsonl").write_text("{}\n")  # a stale file of an earlier serving run
    code, _, err = _in(tmp_path, ["execute", "--plan", "tiny-cpu", "--steps", "1", "--out", "run"], capsys)
    assert code == 2 and "--force" in err
    code, _, _ = _in(tmp_path, ["execute", "--plan", "tiny-cpu", "--steps", "1", "--warmup", "0", "--out", "run",
                                "--force"], capsys)
    assert code == 0
    # the stale file is gone (ran.json: what ran of the plan, written by every run since issue 34)
    assert sorted(p.name for p in run.iterdir()) == ["measurements.jsonl", "ran.json"]
