"""DeepGEMM's SM90 configuration choice as a GEMM curve's tile rule (sim/cost/deepgemm.py, Curve.tile_rule): the
configuration at hand-checked shapes, the padded work, pricing under the rule, the m < 32 family fallback, an
unknown rule rejected, and a fit that recovers known curves through the rule."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rackplan.calibration import opdb_ops
from rackplan.calibration.opdb import Table
from rackplan.calibration.opdb_fit import fit_class
from rackplan.sim.cost import deepgemm, efficiency
from rackplan.sim.cost.roofline import price_gemm
from rackplan.specs import Curve, Profile, SpecError, load_hardware
from rackplan.specs.fields import from_dict

pytestmark = pytest.mark.unit
H200 = load_hardware("h200-sxm")
SMS = H200.num_sms  # 132
RULE = "deepgemm_sm90"


@pytest.mark.parametrize("m, config, group", [
    # n 1536, k 7168 (benchmarks/RESULTS.md, 2026-12-02 "DeepGEMM's SM90 configuration"): at m 1792 a 128 x 192
    # tile makes 14 x 8 = 112 blocks, one wave of 132 SMs, and a 2-CTA cluster is refused at one wave
    # (sm90.hpp l. 233-235); at 2049 the 1-CTA candidates need two waves, where the 2x1 cluster's halved L2
    # traffic wins with 128 x 112 (17 x 14 = 238 blocks); at 2561 the same with 128 x 128 (21 x 12 = 252)
    (1792, (128, 192, 1, 1), 2),
    (2049, (128, 112, 2, 2), 3),
    (2561, (128, 128, 2, 2), 3),
])
def test_sm90_configuration_at_hand_checked_shapes(m, config, group):
    assert deepgemm.sm90_config(m, 1536, 7168, SMS) == config
    assert deepgemm.sm90_group(m, 1536, 7168, SMS) == group


def test_padded_work_of_the_chosen_tiles():
    """m 2049, n 1536 on 128 x 112 tiles: 17 x 128 = 2176 rows by 14 x 112 = 1568 columns over 2049 x 1536."""
    assert deepgemm.sm90_padded(2049, 1536, 7168, SMS) == pytest.approx(2176 * 1568 / (2049 * 1536))
    assert deepgemm.sm90_padded(2048, 1536, 7168, SMS) == 1.0  # 16 x 8 whole 128 x 192 tiles


def _ruled(eff_max=0.6, x_half=100.0, pad_cost=0.5, x_min=31.0) -> tuple[Curve, ...]:
    return tuple(Curve(eff_max=eff_max - 0.1 * (g - 1), x_half=x_half, pad_cost=pad_cost, tile_rule=RULE,
                       rule_group=g, x_min=x_min) for g in deepgemm.GROUPS)


FP8 = (Curve(eff_max=0.5, x_half=50.0),)
PROF = Profile(name="t", curves={"gemm.fp8_block": _ruled(), "gemm.fp8": FP8})


def test_curve_with_the_rule_is_priced_by_its_formula():
    """At m 2049 (group 3, padded 1.0841) only the group-3 curve runs: eff_max / (pad + x_half / m)."""
    pad = 1.0 + 0.5 * (2176 * 1568 / (2049 * 1536) - 1.0)
    want = 0.4 / (pad + 100.0 / 2049)
    assert efficiency.gemm(PROF, "fp8_block", 2049.0, 1536.0, 7168.0, SMS) == pytest.approx(want, rel=1e-12)
    arr = efficiency.gemm(PROF, "fp8_block", np.array([2049.0, 1792.0]), np.array([1536.0] * 2),
                          np.array([7168.0] * 2), SMS)
    assert arr[0] == pytest.approx(want, rel=1e-12) and arr[1] == pytest.approx(0.5 / (1.0 + 100.0 / 1792))


def test_below_m_32_the_family_prices_it_and_nothing_divides_by_zero():
    """m 8 lies outside every gemm.fp8_block curve (x_min 31): gemm.fp8's efficiency, not 0, and price_gemm's
    seconds are gemm.fp8's (the weight bytes are the same), not flops / 1e-9."""
    for m in (8.0, np.array([8.0, 16.0])):
        assert np.all(efficiency.gemm(PROF, "fp8_block", m, 1536.0, 7168.0, SMS)
                      == efficiency.gemm(PROF, "fp8", m, 1536.0, 7168.0, SMS))
    flops, nbytes = 2.0 * 8 * 1536 * 7168, 1536.0 * 7168
    sec = price_gemm(flops, nbytes, H200.flops_for("fp8"), "fp8_block", 8.0, 1536.0, 7168.0, H200, PROF)
    assert sec == price_gemm(flops, nbytes, H200.flops_for("fp8"), "fp8", 8.0, 1536.0, 7168.0, H200, PROF) < 1e-3
    assert efficiency.gemm(PROF, "fp8_block", 8.0, 0.0, 0.0, SMS) > 0  # n, k unknown: in no group, the family
    no_floor = Profile(name="t", curves={"gemm.fp8_block": _ruled(x_min=0.0), "gemm.fp8": FP8})
    for m in (0.5, 31.5):  # fractional rows (a per-rank average): the configuration of the kernel's ceil(m) rows
        g, padded = deepgemm.rule_at(RULE, m, 1536.0, 7168.0, SMS)
        assert (g, padded) == deepgemm.rule_at(RULE, float(np.ceil(m)), 1536.0, 7168.0, SMS) and g in deepgemm.GROUPS
        want = (0.6 - 0.1 * (g - 1)) / (1.0 + 0.5 * (padded - 1.0) + 100.0 / m)
        assert efficiency.gemm(no_floor, "fp8_block", m, 1536.0, 7168.0, SMS) == pytest.approx(want, rel=1e-12)


def test_a_rule_without_an_sm_count_is_an_error():
    with pytest.raises(SpecError, match="num_sms"):
        efficiency.gemm(PROF, "fp8_block", 64.0, 1536.0, 7168.0)
    with pytest.raises(SpecError, match="num_sms"):
        price_gemm(1.0, 1.0, 1e15, "fp8_block", 64.0, 1536.0, 7168.0, dataclasses.replace(H200, num_sms=0), PROF)


@pytest.mark.parametrize("fields, field", [
    ({"tile_rule": "deepgemm_sm100"}, "tile_rule"),
    ({"rule_group": 2}, "rule_group"),  # a group without a rule
    ({"tile_rule": RULE, "rule_group": 4}, "rule_group"),
    ({"tile_rule": RULE, "x_tile": 128.0}, "x_tile"),  # two pad terms
])
def test_unknown_rule_or_group_is_rejected_naming_the_field(fields, field):
    with pytest.raises(SpecError, match=f"field '{field}'"):
        from_dict(Curve, {"eff_max": 0.5, **fields}, "profile p curves.gemm.fp8_block")


def test_curves_without_a_rule_price_as_before():
    """A profile whose curves carry no rule needs no SM count and prices exactly the plain formula."""
    prof = Profile(name="t", curves={"gemm.fp8": (Curve(eff_max=0.5, x_half=50.0, x_tile=64.0, pad_cost=0.5),)})
    want = 0.5 / ((128 + 0.5 * 28) / 100 + 50.0 / 100)
    assert efficiency.gemm(prof, "fp8", 100.0, 1536.0, 7168.0) == pytest.approx(want, rel=1e-12)


def test_synthetic_fit_recovers_curves_through_the_rule():
    """A table priced under one known curve per configuration group, fitted through the importer's rows of a
    ruled kernel (opdb_ops._ruled_rows, one configuration per group here): the held-out rows are reproduced and
    each group's curve recovers its eff_max and pad_cost."""
    truth = tuple(dataclasses.replace(c, y_half=50.0, pad_cost=0.3 + 0.2 * c.rule_group) for c in _ruled())
    m = np.unique(np.round(np.geomspace(32, 8192, 48)))
    nk = [(1536, 7168), (7168, 2048), (4096, 7168), (24576, 1536), (2048, 512)]
    m, n, k = (np.array(x, float) for x in zip(*[(mm, a, b) for mm in m for a, b in nk]))
    sec = opdb_ops._gemm_predict("fp8_block", m, n, k, H200)(Profile(name="t", curves={"gemm.fp8_block": truth}),
                                                             np.arange(len(m)))
    table = Table("gemm_perf", "gemm", "0", Path("synthetic"))
    rows = opdb_ops._ruled_rows("gemm.fp8_block", table, "fp8_block", "synthetic", (RULE, 32.0), m, n, k, sec, H200)
    start = dataclasses.replace(rows.start, z_half=0.0, work_half=0.0, sharpness=1.0, tiles_half=0.0)  # as truth's
    rows = dataclasses.replace(rows, configs=1, start=start, free=("eff_max", "x_half", "y_half", "pad_cost"))
    fit, prof = fit_class(rows, Profile(name="t"))
    assert fit.mape_held < 0.5
    got = {c.rule_group: c for c in prof.curves["gemm.fp8_block"]}
    for c in truth:
        assert got[c.rule_group].eff_max == pytest.approx(c.eff_max, rel=0.02)
        assert got[c.rule_group].pad_cost == pytest.approx(c.pad_cost, rel=0.1)
