"""`rackplan calibrate` / `validate` end to end on synthetic measurements, and on bad input."""
import dataclasses
import json

import pytest

from rackplan.calibration.synthetic import synth_records, write_jsonl
from rackplan.cli import main
from rackplan.specs import load_plan, load_profile

pytestmark = pytest.mark.integration
PLAN = load_plan("tiny-cpu")
TRUE = dataclasses.replace(load_profile("datasheet"), gemm_eff_max=0.3, op_fixed_s=2e-5,
                           host=dataclasses.replace(load_profile("datasheet").host, prepare_step_s=1e-3))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    write_jsonl(synth_records(PLAN, TRUE, decode_batches=(1, 2, 4, 8, 16), repeats=2), d / "measurements.jsonl")
    return d


def test_calibrate_then_validate_held_out(run_dir, tmp_path, capsys):
    out = tmp_path / "cpu.yaml"
    assert main(["calibrate", "--plan", "tiny-cpu", "--measurements", str(run_dir), "--holdout", "decode:4",
                 "--out", str(out)]) == 0
    prof = load_profile(out)
    assert prof.provenance["held_out_sizes"]["decode"] == [4]
    assert prof.provenance["inputs"][0]["sha256"] and prof.provenance["plan_hash"]
    capsys.readouterr()
    assert main(["validate", "--plan", "tiny-cpu", "--measurements", str(run_dir), "--profile", str(out),
                 "--max-mape", "10"]) == 0
    text = capsys.readouterr().out
    assert "held out: decode batches [4]" in text and "validate: OK" in text


def test_validate_exits_nonzero_above_max_mape(run_dir):
    assert main(["validate", "--plan", "tiny-cpu", "--measurements", str(run_dir), "--max-mape", "0.01"]) == 1


def _corrupt(lines):
    return lines[:3] + ['{"schema": 1, "op": "step"'] + lines[3:]


def _truncated(lines):
    return lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]


def _mixed(lines):
    rec = json.loads(lines[0])
    rec["plan_hash"] = "0" * 16
    return lines + [json.dumps(rec)]


def _nan(lines):
    rec = json.loads(lines[0])
    rec["seconds"] = float("nan")
    return [json.dumps(rec)] + lines[1:]


def _negative(lines):
    rec = json.loads(lines[0])
    rec["seconds"] = -1e-3
    return [json.dumps(rec)] + lines[1:]


def _too_few(lines):
    return [ln for ln in lines if json.loads(ln)["step"] < 2]


@pytest.mark.parametrize("spoil", [_corrupt, _truncated, _mixed, _nan, _negative, _too_few])
def test_bad_measurements_leave_profile_untouched(run_dir, tmp_path, capsys, spoil):
    lines = (run_dir / "measurements.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(spoil(lines)) + "\n")
    out = tmp_path / "existing.yaml"
    out.write_text("name: keep-me\n")
    code = main(["calibrate", "--plan", "tiny-cpu", "--measurements", str(bad), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("rackplan: error:")
    assert out.read_text() == "name: keep-me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "existing.yaml"]


def test_bad_table_is_one_line_error(tmp_path, capsys):
    t = tmp_path / "t.csv"
    t.write_text("kernel,ep,phase,tokens,latency_us,dtype\nlow_latency,8,dispatch,1,nan,bf16\n")
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--a2a-table", str(t), "--hardware", "h800", "--out", str(out)]) == 2
    assert not out.exists()
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_validate_two_profiles_side_by_side(run_dir, capsys):
    """The datasheet and the fitted profile on the same measurements, one column each; the step
    error differs because the synthetic run was made with gemm_eff_max 0.3, not the datasheet's 0.7."""
    assert main(["validate", "--plan", "tiny-cpu", "--measurements", str(run_dir), "--profile", "datasheet",
                 "--profile", "cpu-local"]) == 0
    text = capsys.readouterr().out
    assert "side by side" in text and "datasheet" in text and "cpu-local" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("step all"))
    a, b = (float(v.rstrip("%")) for v in row.split()[2:4])
    assert a != b


def test_validate_rejects_a_profile_of_other_hardware(run_dir, capsys):
    assert main(["validate", "--plan", "tiny-cpu", "--measurements", str(run_dir), "--profile",
                 "h200-sxm-vllm"]) == 2
    err = capsys.readouterr().err
    assert "h200-sxm" in err and "cpu-local" in err


def test_fit_without_held_out_sizes_is_refused_unless_asked(run_dir, tmp_path, capsys):
    """A --holdout that names no measured size (or none at all) leaves no held-out error: refused, exit 2,
    no profile; --no-holdout fits on every size."""
    out = tmp_path / "p.yaml"
    for hold in ([], ["--holdout", "decode:999"]):
        assert main(["calibrate", "--plan", "tiny-cpu", "--measurements", str(run_dir), *hold, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--holdout" in err[0] and "--no-holdout" in err[0] and not out.exists()
    assert main(["calibrate", "--plan", "tiny-cpu", "--measurements", str(run_dir), "--no-holdout",
                 "--out", str(out)]) == 0 and out.exists()
    assert main(["calibrate", "--plan", "tiny-cpu", "--measurements", str(run_dir), "--no-holdout",
                 "--holdout", "decode:4", "--out", str(tmp_path / "q.yaml")]) == 2
