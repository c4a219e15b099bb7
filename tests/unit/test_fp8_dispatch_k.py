"""vLLM's SM100 per-tensor FP8 GEMM dispatch by m and k (calibration/opdb_ops.FP8_DISPATCH) and the Curve's k
range (z_min <= z < z_max) that carries it: the configuration each (m, n, k) gets, checked by hand against
csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm100_fp8_dispatch.cuh; a k-ranged curve fitted on and pricing
only the rows of its range; an unranged curve priced as before.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rackplan.calibration import opdb, opdb_ops
from rackplan.calibration.opdb_fit import ClassRows, _ranged_start, fit_class
from rackplan.sim.cost import efficiency
from rackplan.specs import Curve, Profile, SpecError, load_hardware

pytestmark = pytest.mark.unit
HW = load_hardware("b200")


def _held_by(arch: str, m: float, n: float, k: float) -> list[int]:
    """Indices of the FP8_DISPATCH ranges of `arch` holding the GEMM (m, n, k)."""
    curves = [_ranged_start(Curve(eff_max=0.5), r) for r in opdb_ops.FP8_DISPATCH[arch]]
    return [j for j, c in enumerate(curves) if efficiency.in_ranges(c, m, 0.0, n, z=k)]


@pytest.mark.parametrize("m, k, config, tile", [
    (1.0, 7168.0, 0, 32.0),  # m = 1: M16_swap_ab, its own curve (a measured step, opdb_ops.FP8_DISPATCH's comment)
    (2.0, 7168.0, 1, 32.0),  # (1, 16]: M16_swap_ab, 128x32x128 swapped
    (16.0, 2048.0, 1, 32.0),
    (17.0, 2048.0, 2, 64.0),  # (16, 64], m != 64: M64_swap_ab at every k
    (48.0, 4095.0, 2, 64.0),
    (33.0, 16384.0, 2, 64.0),
    (64.0, 2048.0, 4, 64.0),  # m == 64 and k < 4096: M64, 64x64x128 not swapped
    (64.0, 4095.0, 4, 64.0),
    (64.0, 4096.0, 3, 64.0),  # m == 64, k >= 4096: M64_swap_ab again
    (65.0, 2048.0, 5, 128.0),  # (64, 256]: M256, 128x128x128
    (256.0, 7168.0, 5, 128.0),
    (257.0, 2048.0, 6, 256.0),  # default, 256x128x128 cluster 2x2
])
def test_sm100_dispatch_picks_the_configuration_by_m_and_k(m, k, config, tile):
    for n in (256.0, 1280.0, 7168.0):  # n plays no part on SM100
        assert _held_by("sm100", m, n, k) == [config]
    assert opdb_ops.FP8_DISPATCH["sm100"][config][2] == tile


def test_every_shape_runs_exactly_one_configuration():
    """The ranges of each architecture partition (m, n, k): one configuration for every GEMM shape."""
    for arch in ("sm90", "sm100"):
        for m in (1.0, 2.0, 16.0, 17.0, 63.0, 64.0, 65.0, 128.0, 129.0, 256.0, 257.0, 8192.0):
            for n in (256.0, 1280.0, 1281.0, 7168.0):
                for k in (256.0, 4095.0, 4096.0, 16384.0):
                    assert len(_held_by(arch, m, n, k)) == 1, (arch, m, n, k)


def test_k_range_prices_inside_only():
    """A k-ranged curve prices as its unranged self for z_min <= k < z_max and an unknown k (0), and not
    outside; an unranged curve is priced by the formula (rackplan.specs.Curve), its k range playing no part."""
    plain = Curve(eff_max=0.6, x_half=200.0, y_half=100.0, z_half=150.0, work_half=5e9, sharpness=1.5)
    low = Curve(**{**plain.__dict__, "z_max": 4096.0})
    high = Curve(**{**plain.__dict__, "z_min": 4096.0})
    m, n = 64.0, 7168.0
    for k in (2048.0, 4095.0, 4096.0, 16384.0):
        work = 2.0 * m * n * k
        want = 0.6 / ((1.0 + (200.0 / m) ** 1.5 + (100.0 / n + 150.0 / k) ** 1.5) ** (1 / 1.5) + 5e9 / work)
        assert efficiency.evaluate((plain,), m, n, k, work) == pytest.approx(want, rel=1e-12)
        assert efficiency.evaluate((low,), m, n, k, work) == (want if k < 4096 else 0.0)
        assert efficiency.evaluate((high,), m, n, k, work) == (want if k >= 4096 else 0.0)
        assert efficiency.evaluate((low, high), m, n, k, work) == pytest.approx(want, rel=1e-12)
    ks = np.array([2048.0, 4096.0, 0.0])  # arrays, as the fit prices rows; 0: unknown k, in every range
    got = efficiency.evaluate((low,), m, n, ks, 2.0 * m * n * np.maximum(ks, 1.0))
    assert got[0] > 0 and got[1] == 0 and got[2] > 0
    with pytest.raises(SpecError, match="z_max"):
        Curve(eff_max=0.5, z_min=4096.0, z_max=1024.0)


def test_k_ranged_curve_is_fitted_on_its_rows_and_priced_only_there():
    """Rows priced under a dispatch that switches kernel at m == 64 by k (the SM100 M64 split, with the
    m = 64, k < 4096 configuration twice as slow) are recovered on held-out rows by a fit given the k
    ranges; the same rows with m = 64 priced by one curve for every k are not; each fitted k-ranged curve
    prices nothing outside its k range."""
    ranges = ((0.0, 63.0, 64.0), (63.0, 64.0, 64.0, 0.0, 0.0, 4096.0, 0.0), (63.0, 64.0, 64.0, 0.0, 0.0, 0.0, 4096.0),
              (64.0, 0.0, 256.0))
    shapes = dict(x_half=200.0, y_half=100.0, z_half=150.0, work_half=5e9, sharpness=1.5)
    truth = tuple(_ranged_start(Curve(eff_max=e, **shapes), r) for e, r in zip((0.5, 0.5, 0.25, 0.7), ranges))
    m = np.array([1, 8, 16, 33, 48, 64, 65, 128, 256, 512, 4096], float)
    ks = (512, 1024, 2048, 3072, 4096, 7168, 16384)
    nk = [(n, k) for n in (1024, 7168, 16384) for k in ks]
    m, n, k = (np.array(x, float) for x in zip(*[(mm, a, b) for mm in m for a, b in nk]))
    m64 = np.concatenate([np.full(len(nk), 64.0)] * 5)  # more m = 64 rows (repeated shapes, own scatter)
    n64, k64 = (np.tile(np.array(x, float), 5) for x in zip(*nk))
    m, n, k = np.concatenate([m, m64]), np.concatenate([n, n64]), np.concatenate([k, k64])
    predict = opdb_ops._gemm_predict("fp8", m, n, k, HW)
    sec = predict(Profile(name="truth", curves={"gemm.fp8": truth}), np.arange(len(m)))
    sec = sec * (1.0 + 0.02 * np.random.default_rng(5).standard_normal(len(sec)))
    table = opdb.Table("gemm_perf", "gemm", "0", Path("synthetic"))
    rows = ClassRows("gemm.fp8", table, sec, predict, opdb_ops.GEMM_START, opdb_ops.ALL_FIELDS, "synthetic",
                     ranges=ranges, x=m, y=n, z=k)
    fit, prof = fit_class(rows, Profile(name="p"))
    by_m = ((0.0, 63.0, 64.0), (63.0, 64.0, 64.0), (64.0, 0.0, 256.0))
    plain, _ = fit_class(ClassRows("gemm.fp8", table, sec, predict, opdb_ops.GEMM_START, opdb_ops.ALL_FIELDS,
                                   "synthetic", ranges=by_m, x=m, y=n, z=k), Profile(name="p"))
    assert fit.mape_held < 3.0 < plain.mape_held
    assert fit.extra["dispatch_by_k"] == "[0, inf) [4096, inf) [0, 4096) [0, inf)"
    curves = prof.curves["gemm.fp8"]
    assert [(c.z_min, c.z_max) for c in curves] == [(0.0, 0.0), (4096.0, 0.0), (0.0, 4096.0), (0.0, 0.0)]
    for kk, inside, outside in ((2048.0, 2, 1), (7168.0, 1, 2)):
        assert efficiency.evaluate((curves[inside],), 64.0, 7168.0, kk, 2 * 64 * 7168 * kk) > 0
        assert efficiency.evaluate((curves[outside],), 64.0, 7168.0, kk, 2 * 64 * 7168 * kk) == 0.0
        assert efficiency.gemm(prof, "fp8", 64.0, 7168.0, kk) == \
            efficiency.evaluate((curves[inside],), 64.0, 7168.0, kk, 2 * 64 * 7168 * kk)
    slow = efficiency.gemm(prof, "fp8", 64.0, 7168.0, 2048.0) / efficiency.gemm(prof, "fp8", 64.0, 7168.0, 4096.0)
    want = efficiency.evaluate(truth, 64.0, 7168.0, 2048.0, 2 * 64 * 7168 * 2048.0) / efficiency.evaluate(
        truth, 64.0, 7168.0, 4096.0, 2 * 64 * 7168 * 4096.0)
    assert slow == pytest.approx(want, rel=0.1)
