import atexit
import os
import shutil
import tempfile

os.environ.setdefault("COLUMNS", "120")
# One intra-op thread for torch (and BLAS) in the test process and its subprocesses, as the executor's
# ranks already run (executor/launch.py): the tests' single-process references are tiny, and on 2 shared
# cores two threads per process spin against each other and the ranks (tests/unit/test_exec_serving.py,
# _speculation, _fp8, _model, test_eplb_placement: 90 s with 2 threads, 22 s with 1, load ~10;
# benchmarks/RESULTS.md 2026-12-02 suitefast). Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Tests never read a warm cache of sampled imbalance points (sim/cost/imbalance.py): a fresh,
# empty folder per session (subprocesses inherit it).
os.environ["RACKPLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="rackplan-test-cache-")
# ... removed when the session ends (a test run leaves nothing behind in the temp folder).
atexit.register(shutil.rmtree, os.environ["RACKPLAN_CACHE_DIR"], ignore_errors=True)


def main_in(folder, argv) -> int:
    """`rackplan` with `folder` as the working directory (outputs named relative to it), then back."""
    from rackplan.cli import main

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return main(list(argv))
    finally:
        os.chdir(cwd)
