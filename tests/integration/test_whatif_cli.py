"""`rackplan whatif`: no change reproduces the baseline; more bandwidth / less CPU is never slower."""
from __future__ import annotations

import dataclasses

import pytest

from rackplan.cli import main
from rackplan.sim.search import whatif
from rackplan.sim.search.whatif_command import study
from rackplan.specs import Scenario, load_hardware, load_model, load_plan, load_profile, load_workload

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def base():
    # separate prefill and decode GPUs: in a colocated plan, where the two pools take turns on the
    # same GPUs, a faster part can reorder the turns and lengthen some requests
    plan = dataclasses.replace(load_plan("tiny-cpu"), colocated=False)
    return plan, Scenario(None, load_model(plan.model), load_hardware(plan.hardware), load_workload(plan.workload),
                          load_profile("datasheet"))


def test_no_change_returns_the_baseline_exactly(base):
    plan, specs = base
    baseline, rows = study(plan, specs, [("cpu.overhead_scale", [1]), ("hardware.nvlink_gbps", [1.0])])
    assert rows[0].metrics == baseline.metrics  # cpu-local scale-up is 1 GB/s: the same spec


@pytest.mark.parametrize("key,values", [("hardware.nvlink_gbps", [1.0, 4.0, 16.0]),
                                        ("cpu.overhead_scale", [2.0, 1.0, 0.25])])
def test_faster_system_is_never_slower(base, key, values):
    plan, specs = base
    # 128 requests: the window's p50s move by less than the per-step imbalance draws' noise at 32-64
    _, rows = study(plan, specs, [(key, values)], num_requests=128, seed=0)
    for slower, faster in zip(rows, rows[1:], strict=False):
        for m in ("e2e_p50_s", "ttft_p50_s"):
            assert faster.metrics[m] <= slower.metrics[m] * 1.001


def test_whatif_cli_table_files_and_bad_key(tmp_path, capsys):
    rc = main(["whatif", "--plan", "tiny-cpu", "--set", "cpu.overhead_scale=0.5,1", "--workers", "1",
               "--out", str(tmp_path)])
    assert rc == 0
    assert "baseline" in capsys.readouterr().out
    assert (tmp_path / "whatif.csv").exists() and (tmp_path / "whatif.png").exists()
    assert main(["whatif", "--plan", "tiny-cpu", "--set", "hardware.flux_capacitor=1"]) == 2


def test_pool_keys_run_and_are_refused_with_replan(tmp_path, capsys):
    """decode.<Layout field> changes the plan's decode instances (a row of its own); with --replan,
    where the planner chooses layouts, it is refused rather than silently ignored."""
    assert main(["whatif", "--plan", "tiny-cpu", "--set", "decode.max_batch_per_rank=4,16", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "decode.max_batch_per_rank=4" in out and "decode.max_batch_per_rank=16" in out
    head = next(line for line in out.splitlines() if line.startswith("change"))
    assert head.split()[1] == "GPUs"  # a layout change may add GPUs: each row says how many
    assert main(["whatif", "--plan", "tiny-cpu", "--set", "decode.max_batch_per_rank=4", "--replan"]) == 2
    assert "--replan" in capsys.readouterr().err


def test_baseline_note_names_the_plans_verified_run(base):
    plan, specs = base
    baseline, _ = study(plan, specs, [], num_requests=200)
    from rackplan.sim.search.whatif_command import baseline_note

    assert baseline_note(plan, baseline) == ""
    planned = dataclasses.replace(plan, predicted={"output_tps_per_gpu": 123.4, "sim_requests": 1946.0})
    note = baseline_note(planned, baseline)
    assert "the plan's verified 123 came from 1,946 requests" in note and "over 200 requests" in note


def test_whatif_png_marks_rows_without_latency(tmp_path):
    """An unstable row's latency deltas are not compared: whatif.png says so on the row instead of
    drawing bars of 0% (which read as 'no change')."""
    from rackplan.sim.search.whatif_command import bar_note, write_outputs

    base = whatif.Row((), {"stable": 1.0, "ttft_p90_s": 1.0, "tpot_p90_s": 0.03, "output_tps_per_gpu": 500.0,
                           "tps_per_user": 30.0, "request_rate": 40.0, "served_rps": 40.0})
    sat = whatif.Row((("decode.mtp", 0),), {**base.metrics, "stable": 0.0, "saturated": "decode"})
    none = whatif.Row((("hardware.nvlink_gbps", 1),), {"error": "no layout meets the SLOs"})
    assert bar_note(base) == "" and "decode" in bar_note(sat) and bar_note(none) == "no plan"
    write_outputs(tmp_path, base, [sat, none])
    assert (tmp_path / "whatif.png").stat().st_size > 0
