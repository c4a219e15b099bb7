"""Bad input: one line naming the field and what was expected, exit code 2, no output written."""
import os
from pathlib import Path

import pytest

from rackplan.cli import main

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
GOOD_PLAN = (ROOT / "configs/plans/tiny-cpu.yaml").read_text()


def run_cli(tmp_path, capsys, *argv):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        before = set(tmp_path.iterdir())
        code = main(list(argv))
        after = set(tmp_path.iterdir())
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err.strip()
    return code, err, after - before


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("mutate,field", [
    (lambda t: t.replace("dp: 2\n    max_tokens_per_step: 256", "dp: 0\n    max_tokens_per_step: 256"), "dp"),
    (lambda t: t.replace("num_gpus: 4", "num_gpus: -4"), "num_gpus"),
    (lambda t: t.replace("num_gpus: 4", "num_gpus: 1"), "num_gpus"),  # DEP2 pools need 2 GPUs
    (lambda t: t.replace("model: tiny-moe", "model: gpt-9"), "model"),
    (lambda t: t.replace("hardware: cpu-local", "hardware: tpu-v9"), "hardware"),
    (lambda t: t + "colour: blue\n", "colour"),
    (lambda t: t.replace("name: tiny-cpu\n", ""), "name"),
    (lambda t: t.replace("max_batch_per_rank: 16", "max_batch_per_rank: lots"), "max_batch_per_rank"),
    (lambda t: t.replace("role: decode", "role: sideways"), "role"),
])
def test_bad_plan_fields(tmp_path, capsys, mutate, field):
    plan = write(tmp_path, "plan.yaml", mutate(GOOD_PLAN))
    code, err, new_files = run_cli(tmp_path, capsys, "simulate", "--plan", plan, "--requests", "4")
    assert code == 2
    assert len(err.splitlines()) == 1 and field in err
    assert new_files == set()


def test_malformed_yaml(tmp_path, capsys):
    plan = write(tmp_path, "plan.yaml", "name: [unclosed\nmodel: tiny-moe\n")
    code, err, _ = run_cli(tmp_path, capsys, "simulate", "--plan", plan)
    assert code == 2 and "well-formed YAML" in err and len(err.splitlines()) == 1


def test_weights_do_not_fit(tmp_path, capsys):
    text = GOOD_PLAN.replace("model: tiny-moe", "model: deepseek-v3")
    plan = write(tmp_path, "plan.yaml", text)
    code, err, _ = run_cli(tmp_path, capsys, "simulate", "--plan", plan)
    assert code == 2 and "fits in HBM" in err and "prefill[0]" in err


def test_unknown_embedded_names(tmp_path, capsys):
    code, err, _ = run_cli(tmp_path, capsys, "simulate", "--plan", "no-such-plan")
    assert code == 2 and "plan" in err and "v41-flash-gb300-nvl72" in err
    code, err, _ = run_cli(tmp_path, capsys, "simulate", "--workload", "nope")
    assert code == 2 and "workload" in err


@pytest.mark.parametrize("yaml_text,field", [
    ("name: w\narrival: {kind: poisson, rate: -1}\nisl: {kind: fixed, value: 10}\nosl: {kind: fixed, value: 5}\n",
     "rate"),
    ("name: w\narrival: {kind: poisson, rate: 1}\nisl: {kind: fixed, value: 0}\nosl: {kind: fixed, value: 5}\n",
     "value"),
    ("name: w\narrival: {kind: poisson, rate: 1}\nisl: {kind: fixed, value: 10}\n", "osl"),
    ("name: w\narrival: {kind: trace}\nisl: {kind: trace}\nosl: {kind: trace}\n", "trace"),
])
def test_bad_workloads(tmp_path, capsys, yaml_text, field):
    w = write(tmp_path, "w.yaml", yaml_text)
    code, err, _ = run_cli(tmp_path, capsys, "simulate", "--plan", "tiny-cpu", "--workload", w)
    assert code == 2 and field in err and len(err.splitlines()) == 1


def test_specs_load_and_are_frozen():
    from dataclasses import FrozenInstanceError

    from rackplan.specs import available, load_hardware, load_model
    for name in available("models"):
        m = load_model(name)
        with pytest.raises(FrozenInstanceError):
            m.hidden_size = 1
    for name in available("hardware"):
        assert load_hardware(name).hbm_bw > 0
