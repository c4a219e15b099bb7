"""The Curve's row term (rackplan.specs.Curve row_half, chunk_half, z_chunk): work each row of x does whatever y,
fixed and per z_chunk of z, the per-row cost of vLLM's per-tensor FP8 linear (calibration/opdb_ops.FP8_ROW_CHUNK).
Hand-derived prices, the term's validation on load, and a fit that recovers it where a curve without it cannot.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rackplan.calibration import opdb, opdb_ops
from rackplan.calibration.opdb_fit import ClassRows, fit_class
from rackplan.sim.cost import efficiency
from rackplan.sim.cost.roofline import price_gemm
from rackplan.specs import Curve, Profile, SpecError, from_dict, load_hardware

pytestmark = pytest.mark.unit
HW = load_hardware("gb200-nvl72")
ROW = Curve(eff_max=0.5, row_half=1e6, chunk_half=2e6, z_chunk=2048.0)


@pytest.mark.parametrize("k, chunks", [(256.0, 1), (2048.0, 1), (2049.0, 2), (2560.0, 2), (4096.0, 2), (4097.0, 3),
                                       (65536.0, 32)])
def test_row_term_by_hand(k, chunks):
    """eff = eff_max / (1 + (row_half + chunk_half ceil(k / z_chunk)) / (n k)) with every other term off: at
    n = 256, k = 2048 that is 0.5 / (1 + 3e6 / 524288)."""
    n = 256.0
    want = 0.5 / (1.0 + (1e6 + 2e6 * chunks) / (n * k))
    for m in (1.0, 300.0, 8192.0):  # the row term's share does not depend on m
        assert efficiency.evaluate((ROW,), m, n, k, 2.0 * m * n * k) == pytest.approx(want, rel=1e-12)


def test_row_term_is_seconds_per_row_whatever_n():
    """A weight GEMM's seconds under the row term: its FLOPs at eff_max plus 2 x row / (peak x eff_max) per row of
    m, the same at every n (priced through roofline.price_gemm, as serving and the fit price it)."""
    prof = Profile(name="p", op_fixed_s=0.0, curves={"gemm.fp8": (ROW,)})
    peak = HW.flops_for("fp8")
    k = 5120.0  # ceil(5120 / 2048) = 3 steps: row = 1e6 + 3 x 2e6 FLOPs per row
    per_row = 2.0 * 7e6 / (peak * 0.5)
    for n in (256.0, 7168.0, 65536.0):
        for m in (1.0, 512.0, 32768.0):
            flops = 2.0 * m * n * k
            got = price_gemm(flops, k * n, peak, "fp8", m, n, k, HW, prof)
            assert got == pytest.approx(flops / (peak * 0.5) + m * per_row, rel=1e-12)


def test_row_term_arrays_match_scalars_and_unknown_shapes_drop_it():
    """The fit prices rows as arrays and serving as floats: the same efficiency; an unknown n or k (0) has no row
    term, as the other terms drop."""
    m, n, k = np.array([1.0, 64.0, 4096.0]), np.array([256.0, 7168.0, 1024.0]), np.array([2048.0, 2560.0, 65536.0])
    got = efficiency.evaluate((ROW,), m, n, k, 2.0 * m * n * k)
    for i in range(3):
        assert got[i] == pytest.approx(efficiency.evaluate((ROW,), m[i], n[i], k[i], 2.0 * m[i] * n[i] * k[i]),
                                       rel=1e-12)
    assert efficiency.evaluate((ROW,), 64.0, 0.0, 2048.0) == 0.5
    assert efficiency.evaluate((ROW,), 64.0, 7168.0, 0.0) == 0.5
    assert list(efficiency.evaluate((ROW,), np.array([64.0, 64.0]), np.array([0.0, 256.0]), np.array([2048.0, 0.0]))) \
        == [0.5, 0.5]


def test_fixed_row_half_alone_and_default_off():
    """row_half without a chunk is a cost per row whatever k; a curve without the row fields (every profile but
    the per-tensor FP8 curves) has none."""
    fixed = Curve(eff_max=0.5, row_half=4e6)
    assert efficiency.evaluate((fixed,), 100.0, 1000.0, 3000.0) == pytest.approx(0.5 / (1.0 + 4e6 / 3e6), rel=1e-12)
    plain = Curve(eff_max=0.5, x_half=200.0, z_half=150.0)
    assert efficiency._row_term(plain, 1000.0, 3000.0) == 0.0
    assert efficiency.evaluate((plain,), 100.0, 1000.0, 3000.0) == 0.5 / (1.0 + 2.0 + 150.0 / 3000.0)


@pytest.mark.parametrize("fields, name", [
    ({"z_chunk": 2048.0}, "z_chunk"),  # a width with no step: prices nothing
    ({"chunk_half": 1e6}, "z_chunk"),  # a step with no width
    ({"row_half": -1.0}, "row_half"),
    ({"chunk_half": -1.0, "z_chunk": 2048.0}, "chunk_half"),
    ({"chunk_half": 1e6, "z_chunk": -2048.0}, "z_chunk"),
])
def test_row_fields_are_validated_on_load(fields, name):
    """A row field that would do nothing or is negative is refused naming it, as a profile's YAML loads."""
    with pytest.raises(SpecError, match=name):
        from_dict(Curve, {"eff_max": 0.5, **fields})
    with pytest.raises(SpecError, match=name):
        from_dict(Profile, {"name": "p", "curves": {"gemm.fp8": [{"eff_max": 0.5, **fields}]}})


def test_fit_recovers_a_chunked_row_cost():
    """Rows priced with a per-row cost stepping every 2048 of k (opdb_ops.FP8_ROW_CHUNK, as the per-tensor FP8
    tables have it) are recovered on held-out rows by a fit with the row fields free; the curve's other terms
    alone cannot follow it (none is linear in m alone)."""
    truth = Curve(eff_max=0.7, x_half=100.0, y_half=50.0, z_half=300.0, work_half=5e9, sharpness=1.2,
                  row_half=3e6, chunk_half=7e6, z_chunk=opdb_ops.FP8_ROW_CHUNK)
    grid = [(mm, a, b) for mm in (256.0, 1024.0, 4096.0, 16384.0) for a in (256.0, 2048.0, 16384.0)
            for b in (256.0, 1024.0, 2048.0, 2560.0, 4096.0, 5120.0, 8192.0, 16384.0)]
    m, n, k = (np.array(x, float) for x in zip(*grid))
    m, n, k = np.tile(m, 3), np.tile(n, 3), np.tile(k, 3)
    predict = opdb_ops._gemm_predict("fp8", m, n, k, HW)
    sec = predict(Profile(name="truth", curves={"gemm.fp8": (truth,)}), np.arange(len(m)))
    sec = sec * (1.0 + 0.02 * np.random.default_rng(3).standard_normal(len(sec)))
    table = opdb.Table("gemm_perf", "gemm", "0", Path("synthetic"))
    start = Curve(**{**opdb_ops.GEMM_START.__dict__, **opdb_ops.FP8_ROW_START})
    with_row, prof = fit_class(ClassRows("gemm.fp8", table, sec, predict, start, opdb_ops.ALL_FIELDS
                                         + opdb_ops.FP8_ROW_FIELDS, "synthetic"), Profile(name="p"))
    without, _ = fit_class(ClassRows("gemm.fp8", table, sec, predict, opdb_ops.GEMM_START, opdb_ops.ALL_FIELDS,
                                     "synthetic", configs=1), Profile(name="p"))
    assert with_row.mape_held < 3.0 < without.mape_held
    c = prof.curves["gemm.fp8"][0]
    assert c.z_chunk == opdb_ops.FP8_ROW_CHUNK and c.chunk_half > 0
    step = efficiency.evaluate((c,), 16384.0, 256.0, 2560.0) / efficiency.evaluate((c,), 16384.0, 256.0, 2048.0)
    want = efficiency.evaluate((truth,), 16384.0, 256.0, 2560.0) / efficiency.evaluate((truth,), 16384.0, 256.0, 2048.0)
    assert step == pytest.approx(want, rel=0.1) and not math.isclose(want, 1.0, rel_tol=0.2)
