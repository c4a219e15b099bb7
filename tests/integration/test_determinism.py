"""The same inputs give the same report: `plan` and `simulate` write the same bytes under another
PYTHONHASHSEED, BLAS/OpenMP thread count, working directory, time zone and a cold or warm imbalance
cache (benchmarks/RESULTS.md, 2026-12-02 "same inputs, same report")."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# one process runs both commands (one interpreter start): the plan's files, then the plan simulated
RUN = ("import sys; from rackplan.cli import main; o = sys.argv[1]; "
       "assert main(['plan', '--model', 'tiny-moe', '--hardware', 'cpu-local', '--gpus', '4', '--workload', "
       "'tiny-chat', '--workers', '1', '--quiet', '--ttft-p90', '1s', '--tpot-p90', '200ms', "
       "'--out', o + '/plan.yaml', '--report', o + '/report']) == 0; "
       "assert main(['simulate', '--plan', o + '/plan.yaml', '--requests', '64', '--json']) == 0")


def _outputs(out: Path, cwd: Path, env: dict) -> dict[str, bytes]:
    """Every file the two commands write under `out` (and their stdout), by relative path."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    res = subprocess.run([sys.executable, "-c", RUN, str(out)], capture_output=True, cwd=cwd, timeout=120,
                         env={**os.environ, "COLUMNS": "120", **env})
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    return {**files, "(stdout)": res.stdout}


@pytest.mark.slow  # two interpreters each planning and simulating: about 8 s
def test_plan_and_simulate_write_the_same_bytes_whatever_the_environment(tmp_path):
    cache = tmp_path / "cache"  # cold in the first run, warm in the second
    first = _outputs(tmp_path / "out", ROOT, {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1",
                                              "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TZ": "UTC",
                                              "RACKPLAN_CACHE_DIR": str(cache)})
    (tmp_path / "elsewhere").mkdir()
    second = _outputs(tmp_path / "out", tmp_path / "elsewhere", {
        "PYTHONHASHSEED": "1", "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2",
        "TZ": "Pacific/Kiritimati", "RACKPLAN_CACHE_DIR": str(cache)})
    assert {"plan.yaml", "report/report.md", "report/pareto.png", "report/pareto.csv"} <= set(first)
    assert b'"converged"' in first["(stdout)"]
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []


# the window's statistics of a long run (50,000 samples: np.dot would hand them to BLAS), printed to the bit
STATS = ("import numpy as np; from rackplan.sim import metrics, steady; r = np.random.default_rng(0); "
         "t, q, w = np.cumsum(r.random(50000)), r.random(50000), r.random(50000); "
         "print(repr((steady._trend(t, q), steady.dot(q, w), metrics.autocorrelation_time(q))))")


def test_window_statistics_do_not_depend_on_the_blas_thread_count():
    out = {subprocess.run([sys.executable, "-c", STATS], capture_output=True, text=True, check=True, timeout=60,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n}).stdout
           for n in ("1", "2", "3")}
    assert len(out) == 1 and "(" in out.pop()


def test_a_fitted_profile_is_dated_the_same_in_every_time_zone(tmp_path):
    """calibrate writes the same profile at UTC+14 and UTC-12 (26 h apart: always two calendar dates)."""
    from rackplan.calibration.synthetic import synth_records, write_jsonl
    from rackplan.specs import load_plan, load_profile

    write_jsonl(synth_records(load_plan("tiny-cpu"), load_profile("cpu-local"), repeats=1), tmp_path / "m.jsonl")
    written = set()
    for tz in ("Pacific/Kiritimati", "Etc/GMT+12"):
        subprocess.run([sys.executable, "-m", "rackplan.cli", "calibrate", "--plan", "tiny-cpu", "--measurements",
                        str(tmp_path / "m.jsonl"), "--no-holdout", "--out", str(tmp_path / "p.yaml")], check=True,
                       timeout=120,
                       capture_output=True, env={**os.environ, "TZ": tz})
        written.add((tmp_path / "p.yaml").read_bytes())
    assert len(written) == 1 and b"(UTC)" in written.pop()
