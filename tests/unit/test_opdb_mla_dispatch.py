"""MLA prefill on SM90: the module table's rows carry the backend vLLM ran at each prompt length
(FLASH_ATTN_MLA's decode pathway up to 512 tokens, FLASH_ATTN above: opdb_ops.MLA_PREFILL_DISPATCH), and
the importer fits one curve per backend on all of them instead of the kernel with most rows."""
from __future__ import annotations

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from rackplan.calibration import opdb, opdb_ops  # noqa: E402
from rackplan.calibration.opdb_fit import fit_class  # noqa: E402
from rackplan.specs import Curve, Profile, load_hardware, load_profile  # noqa: E402

pytestmark = pytest.mark.unit
H200 = load_hardware("h200-sxm")
# two backends of different speed, switched at isl 512 as vLLM switches them on SM90
TRUTH = (Curve(eff_max=0.1, x_half=200.0, y_half=2e7, work_half=6e9, sharpness=2.0, x_max=512.0),
         Curve(eff_max=0.8, x_half=3000.0, y_half=1e9, work_half=2e10, sharpness=1.2, x_min=512.0))
KEY = "attn.prefill.mla.bf16"


def _table(tmp_path, shuffle_kernels: bool = False) -> opdb.Table:
    """A synthetic mla_context_module_perf: FLASH_ATTN_MLA at isl 1-512 (more rows), FLASH_ATTN at 1024-32768,
    timed under TRUTH with 2% noise (shuffle_kernels: every row labelled FLASH_ATTN_MLA, as one backend)."""
    rows = [(b, s) for s in (1, 16, 64, 128, 256, 512) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    rows += [(b, s) for s in (1024, 2048, 4096, 8192, 16384, 32768) for b in (1, 2, 4, 8, 16) if b * s <= 131072]
    b, s = (np.array(x, float) for x in zip(*rows))
    kernel = np.where(s <= 512, "FLASH_ATTN_MLA", "FLASH_ATTN")
    n = len(b)
    cols = {"kernel_source": kernel.tolist(), "model": ["deepseek-ai/DeepSeek-V3"] * n,
            "mla_dtype": ["bfloat16"] * n, "kv_cache_dtype": ["bfloat16"] * n, "gemm_type": ["bfloat16"] * n,
            "num_heads": [128] * n, "batch_size": b.astype(int), "isl": s.astype(int), "latency": np.ones(n)}
    base = load_profile("h200-sxm-vllm")
    model, comp = opdb_ops._mla(2.0)
    shapes = opdb_ops._core_shapes(model, comp, "prefill", b, s, 1.0, H200)  # [n, 5], all 128 heads on the rank
    proj = opdb_ops.projection_seconds(model, b * s, np.ones(n), "bf16", H200, base)
    truth = Profile(name="truth", curves={**base.curves, KEY: TRUTH})
    sec = opdb_ops._core_predict("mla", "prefill", shapes, H200, proj)(truth, np.arange(n))
    cols["latency"] = sec * (1.0 + 0.02 * np.random.default_rng(7).standard_normal(n)) * 1e3
    path = tmp_path / "mla_context_module_perf.parquet"
    table = opdb.Table("mla_context_module_perf", "mla", "0.24.0", path)
    if shuffle_kernels:
        cols["kernel_source"] = ["FLASH_ATTN_MLA"] * n
    pq.write_table(pa.table(cols), path)
    return table


def test_mla_prefill_keeps_both_backends_rows_and_fits_one_curve_each(tmp_path):
    """Every row is fitted (the 59-row FLASH_ATTN range was dropped by most_rows), one curve per backend
    range; held-out MAPE reported overall and by kernel, and long prompts priced as measured."""
    table = _table(tmp_path)
    base = load_profile("h200-sxm-vllm")
    rows = opdb_ops._mla_rows(table, "prefill", H200, base)
    isl = opdb.read(table)["isl"]
    assert len(rows.seconds) == len(isl) and rows.ranges == ((0.0, 512.0, 0.0), (512.0, 0.0, 0.0))
    assert rows.range_kernels == ("FLASH_ATTN_MLA", "FLASH_ATTN")
    fit, prof = fit_class(rows, base)
    by_kernel = fit.extra["mape_held_out_by_kernel_pct"]
    assert fit.mape_held < 4.0 and set(by_kernel) == {"FLASH_ATTN_MLA", "FLASH_ATTN"}
    assert all(v < 5.0 for v in by_kernel.values())
    assert fit.extra["rows_by_kernel"] == {"FLASH_ATTN_MLA": int(np.sum(isl <= 512)),
                                           "FLASH_ATTN": int(np.sum(isl > 512))}
    assert [(c.x_min, c.x_max) for c in prof.curves[KEY]] == [(0.0, 512.0), (512.0, 0.0)]
    long = np.flatnonzero(isl >= 4096)
    ratio = rows.predict(prof, long) / rows.seconds[long]
    assert np.all(np.abs(ratio - 1.0) < 0.08)


def test_rows_of_a_backend_outside_its_range_are_dropped(tmp_path):
    """A shape timed by a backend vLLM does not pick there (here: every row labelled FLASH_ATTN_MLA) is not
    fitted: only FLASH_ATTN_MLA's own range (isl <= 512) remains, the FLASH_ATTN curve has no rows."""
    table = _table(tmp_path, shuffle_kernels=True)
    rows = opdb_ops._mla_rows(table, "prefill", H200, load_profile("h200-sxm-vllm"))
    isl = opdb.read(table)["isl"]
    assert len(rows.seconds) == int(np.sum(isl <= 512))
    assert rows.in_range(1).sum() == 0


def test_an_architecture_without_a_dispatch_keeps_the_kernel_with_most_rows(tmp_path):
    """Blackwell (no MLA_PREFILL_DISPATCH entry): the single kernel with most rows, no ranges, as before."""
    table = _table(tmp_path)
    rows = opdb_ops._mla_rows(table, "prefill", load_hardware("b200"), load_profile("h200-sxm-vllm"))
    assert rows.kernel == "FLASH_ATTN_MLA" and rows.ranges == () and rows.range_kernels == ()
    assert len(rows.seconds) == int(np.sum(opdb.read(table)["isl"] <= 512))


def test_dispatched_rows_rule():
    """dispatched_rows: with a dispatch, each kernel's rows inside its range; without one, most_rows."""
    kernels = np.array(["A", "A", "A", "B", "B"])
    x = np.array([1.0, 10.0, 100.0, 50.0, 200.0])
    base = np.ones(5, bool)
    sel, ranges, names = opdb_ops.dispatched_rows(kernels, x, base, ((0.0, 20.0, "A"), (20.0, 0.0, "B")))
    assert sel.tolist() == [True, True, False, True, True] and names == "A, B"
    assert ranges == ((0.0, 20.0, 0.0), (20.0, 0.0, 0.0))
    sel, ranges, names = opdb_ops.dispatched_rows(kernels, x, base, ())
    assert sel.tolist() == [True, True, True, False, False] and ranges == () and names == "A"
