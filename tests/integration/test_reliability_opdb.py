"""Issue 36, cause 4: op-database tables that cannot describe the profile asked for are refused.

Tables measured on another GPU than --hardware, a table (or one op class of it) whose latencies are
all NaN, and a malformed reuse.yaml: `calibrate --op-database` and `validate --op-database` print
one line naming the file and the field, exit 2, and write nothing.
"""
import os

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from rackplan.cli import main  # noqa: E402

pytestmark = pytest.mark.integration
GEMM = "synth/gemm/vllm/0.24.0/gemm_perf.parquet"


def _gemm(path, device="NVIDIA GB300", nan_dtype=None):
    """A small gemm_perf table (fp8 and bf16 rows, 1 ms each) measured on `device`; the rows of
    `nan_dtype` ('all' for every row) have NaN latencies."""
    m = [1, 8, 64, 512, 4096] * 2
    dtype = ["fp8"] * 5 + ["bf16"] * 5
    lat = [float("nan") if nan_dtype in (d, "all") else 1.0 for d in dtype]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"device": [device] * 10, "kernel_source": ["k"] * 10, "gemm_dtype": dtype, "m": m,
                             "n": [7168] * 10, "k": [2048] * 10, "latency": np.array(lat)}), path)


def _reuse(text):
    def make(root):
        _gemm(root / GEMM)
        (root / "synth/gemm/vllm/0.27.0").mkdir(parents=True)
        (root / "synth/gemm/vllm/0.27.0/reuse.yaml").write_text(text)
    return make


CASES = [  # (setup of the database, --hardware, what the one line must name)
    ("GB300 tables as h200-sxm", lambda r: _gemm(r / GEMM), "h200-sxm", "'NVIDIA GB300'"),
    ("GB300 tables as b300", lambda r: _gemm(r / GEMM), "b300", "(B300;"),
    ("H100 tables as h200-sxm", lambda r: _gemm(r / GEMM, "NVIDIA H100 80GB HBM3"), "h200-sxm", "H100"),
    ("every latency NaN", lambda r: _gemm(r / GEMM, nan_dtype="all"), "gb300-nvl72", "every row is NaN"),
    ("one class all NaN", lambda r: _gemm(r / GEMM, nan_dtype="bf16"), "gb300-nvl72", "gemm_dtype bf16"),
    ("reuse.yaml of plain names", _reuse("reuse:\n- gemm_perf\n"), "gb300-nvl72", "reuse[0]"),
    ("reuse.yaml reuse a mapping", _reuse("reuse: {table: gemm_perf}\n"), "gb300-nvl72", "'reuse'"),
    ("reuse.yaml without from_version", _reuse("reuse:\n- {table: gemm_perf}\n"), "gb300-nvl72", "reuse[0]"),
    ("reuse.yaml from a parent folder", _reuse("reuse:\n- {table: gemm_perf, from_version: ../../..}\n"),
     "gb300-nvl72", "from_version"),
]


@pytest.mark.parametrize("command", ["calibrate", "validate"])
@pytest.mark.parametrize("setup,hardware,needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_op_database_refused_in_one_line(tmp_path, capsys, command, setup, hardware, needle):
    root = tmp_path / "db"
    setup(root)
    argv = [command, "--op-database", "synth", "--op-database-root", str(root), "--hardware", hardware]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = main(argv + (["--out", "p.yaml"] if command == "calibrate" else []))
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("rackplan: error:") and needle in err, err
    assert str(root) in err  # the file named
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]  # no profile written
