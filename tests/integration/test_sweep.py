"""`rackplan sweep`: one table from a grid, the same on any backend and worker count, resumable."""
from __future__ import annotations

import csv
import importlib.util
import json

import pytest

from rackplan.cli import main
from rackplan.sim import sweep

pytestmark = pytest.mark.integration

# 10 rates x 5 host scales x 4 NVLink speeds = 200 cells of 8 requests each on the tiny CPU plan
BIG = """kind: simulate
plans: [tiny-cpu]
rates: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
requests: 8
whatif:
  cpu.overhead_scale: [0.25, 0.5, 1.0, 2.0, 4.0]
  hardware.nvlink_gbps: [100, 200, 400, 900]
"""
SMALL = """kind: simulate
plans: [tiny-cpu, tiny-disagg]
rates: [2.0, 6.0]
requests: 12
whatif: {cpu.overhead_scale: [0.5, 1.0]}
"""


def _sweep(tmp_path, grid: str, out: str, *extra: str) -> list[dict]:
    path = tmp_path / "grid.yaml"
    path.write_text(grid)
    assert main(["sweep", str(path), "--out", str(tmp_path / out), "--quiet", *extra]) == 0
    return list(csv.DictReader(open(tmp_path / out / "sweep.csv")))


def test_a_grid_gives_one_row_per_cell_in_grid_order_on_any_worker_count(tmp_path):
    one = _sweep(tmp_path, SMALL, "one", "--workers", "1")
    two = _sweep(tmp_path, SMALL, "two", "--workers", "2")
    assert one == two
    assert [r["cell"] for r in one] == [str(i) for i in range(8)]
    # the last axis varies fastest: plan, rate, change
    assert [(r["plan"], r["rate"], r["change"]) for r in one[:3]] == [
        ("tiny-cpu", "2.0", "cpu.overhead_scale=0.5"), ("tiny-cpu", "2.0", "cpu.overhead_scale=1.0"),
        ("tiny-cpu", "6.0", "cpu.overhead_scale=0.5")]
    assert all(r["status"] == "ok" and r["source"] == "simulator, 12 requests" for r in one)
    assert all(int(r["num_requests"]) == 12 for r in one)
    # halving the host overhead never slows a tiny CPU plan (its steps are host-bound)
    for slow, fast in zip(one[1::2], one[0::2]):
        assert float(fast["tpot_p90_s"] or 0) <= float(slow["tpot_p90_s"] or 0) or not slow["tpot_p90_s"]
    assert (tmp_path / "one" / "sweep.png").stat().st_size > 0
    html = (tmp_path / "one" / "report.html").read_text()  # one hover label per cell that measured both figures
    assert html.count("<title>cell ") == sum(bool(r["tps_per_user"] and r["output_tps_per_gpu"]) for r in one) > 0
    if importlib.util.find_spec("pyarrow"):
        import pyarrow.parquet as pq

        assert pq.read_table(tmp_path / "one" / "sweep.parquet").num_rows == 8


def test_an_interrupted_sweep_keeps_its_finished_cells(tmp_path, capsys):
    full = _sweep(tmp_path, SMALL, "out", "--workers", "1")
    log = tmp_path / "out" / "cells.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2])  # cut short mid-line
    capsys.readouterr()
    again = _sweep(tmp_path, SMALL, "out", "--workers", "1")
    assert again == full
    assert "5 kept from an earlier run, 3 run" in capsys.readouterr().out
    keys = [json.loads(x)["key"] for x in log.read_text().splitlines()[6:]]
    assert len(keys) == 3


def test_bad_grids_are_refused_before_any_cell_runs(tmp_path, capsys):
    for grid, field in (("kind: simulate\nrates: [1.0]\n", "plans"),
                        ("kind: plan\nmodels: [tiny-moe]\nhardware: [cpu-local]\ngpus: [0]\n", "gpus"),
                        ("kind: simulate\nplans: [tiny-cpu]\nwhatif: {hardware.no_such_field: [1]}\n",
                         "hardware.no_such_field"),
                        ("kind: plan\nmodels: [tiny-moe]\nhardware: [cpu-local]\ngpus: [4]\nrates: [2.0]\n", "rates"),
                        ("kind: simulate\nplans: [no-such-plan]\n", "")):
        path = tmp_path / "grid.yaml"
        path.write_text(grid)
        assert main(["sweep", str(path), "--out", str(tmp_path / "bad"), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and field in err
        assert not (tmp_path / "bad" / "sweep.csv").exists()


def test_plan_cells_run_the_planner_and_say_where_their_figures_come_from(tmp_path):
    grid = ("kind: plan\nmodels: [tiny-moe]\nhardware: [cpu-local]\ngpus: [4]\nworkloads: [tiny-chat]\n"
            "slos: [{ttft_p90_s: 1.0, tpot_p90_s: 0.2}, {ttft_p90_s: 0.001, tpot_p90_s: 0.001}]\n")
    ok, infeasible = _sweep(tmp_path, grid, "plans", "--workers", "1")
    assert ok["status"] == "ok" and ok["source"] == "simulator, verified plan"
    assert int(ok["gpus_used"]) <= 4 and float(ok["ttft_p90_s"]) <= 1.0 and float(ok["tpot_p90_s"]) <= 0.2
    assert infeasible["status"] == "no plan" and "closest:" in infeasible["error"] and not infeasible["source"]


def test_too_many_cells_are_refused_with_the_bound(tmp_path):
    grid = sweep.Grid(plans=("tiny-cpu",), rates=tuple(float(r + 1) for r in range(1000)),
                      whatif={"cpu.overhead_scale": tuple(float(i + 1) for i in range(101))})
    with pytest.raises(sweep.SpecError, match="at most 100,000 cells"):
        sweep.cells(grid)


@pytest.mark.slow  # Ray starts a local instance (277 s wall on the shared 2-core machine under load)
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Ray is not installed (pip install 'rackplan[ray]')")
def test_two_hundred_cells_on_a_local_ray_instance_give_the_process_pool_table(tmp_path):
    pool = _sweep(tmp_path, BIG, "pool", "--workers", "2")
    on_ray = _sweep(tmp_path, BIG, "ray", "--workers", "2", "--ray", "auto")
    assert len(pool) == 200
    assert on_ray == pool
