"""Curve regimes (a kernel the engine dispatches by size, a working set in or out of L2) and the shapes
the op-database importer prices the MoE table's balanced rows with; expected values derived by hand.
No pyarrow needed: these are the pieces the synthetic-table tests of test_opdb.py build on."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rackplan.calibration.opdb_ops import MIB, allreduce_regimes, balanced_routing
from rackplan.sim.cost import efficiency
from rackplan.sim.cost.collective import allreduce_seconds
from rackplan.specs import Curve, Profile, SpecError, load_hardware

pytestmark = pytest.mark.unit
SIZES = 256.0 * 2.0 ** np.arange(23)  # the all-reduce table's messages: 128 .. 2^29 BF16 elements, in bytes


def test_a_curve_prices_only_its_regime_of_work():
    """Two regimes split at 1000: below, eff 0.5 (no half terms); from 1000 up, eff 0.8; scalars and
    arrays alike."""
    cs = (Curve(eff_max=0.5, work_max=1000.0), Curve(eff_max=0.8, work_min=1000.0))
    assert efficiency.evaluate(cs, 10.0, work=10.0) == 0.5
    assert efficiency.evaluate(cs, 10.0, work=1000.0) == 0.8
    assert efficiency.evaluate(cs, 10.0, work=np.array([999.0, 1000.0, 1e9])) == pytest.approx([0.5, 0.8, 0.8])


def test_regime_bounds_are_checked():
    with pytest.raises(SpecError, match="work_max"):
        Curve(eff_max=0.5, work_min=10.0, work_max=10.0)
    assert Curve(eff_max=0.5, work_min=10.0).work_max == 0.0  # no upper bound
    with pytest.raises(SpecError, match="eff_max"):
        Curve(eff_max=1.5)  # above the peak: only a bounded regime (a working set in L2) may
    assert Curve(eff_max=1.5, work_max=50e6).eff_max == 1.5


def test_allreduce_regimes_follow_vllm_dispatch():
    """B200 (SM 10.0), 8 GPUs: one-shot below 256 KiB, two-shot to the custom kernel's 1 MiB, symmetric
    memory to 128 MiB, NCCL above; the two-shot range holds only the 256 and 512 KiB rows (< 3), so it
    joins the one-shot range. H200 (SM 9.0), 8 GPUs: the custom kernel stops at 256 KiB, where one-shot
    ends too; symmetric memory to 64 MiB. 16 GPUs: beyond the custom kernel, one range."""
    assert allreduce_regimes("b200", 8, SIZES) == ((0.0, 1 * MIB), (1 * MIB, 128 * MIB), (128 * MIB, math.inf))
    assert allreduce_regimes("h200-sxm", 8, SIZES) == ((0.0, MIB / 4), (MIB / 4, 64 * MIB), (64 * MIB, math.inf))
    assert allreduce_regimes("gb300-nvl72", 16, SIZES) == ((0.0, math.inf),)
    assert allreduce_regimes("cpu-local", 4, SIZES) == ((0.0, math.inf),)


def test_allreduce_seconds_under_regimes_by_hand():
    """2 MiB over 8 B200 GPUs in the regime from 1 MiB (eff 0.25): ring bytes 2 x 7/8 x 2 MiB over
    0.25 of the scale-up bandwidth, plus the profile's fixed 2 us; 512 KiB takes the 0.5 curve."""
    hw = load_hardware("b200")
    prof = Profile(name="t", curves={"allreduce.tp8": (Curve(eff_max=0.5, work_max=MIB),
                                                       Curve(eff_max=0.25, work_min=MIB))})
    big, small = 2 * MIB, MIB / 2
    assert allreduce_seconds(hw, prof, big, 8) == pytest.approx(2 * 7 / 8 * big / (hw.scaleup_bw * 0.25) + 2e-6)
    assert allreduce_seconds(hw, prof, small, 8) == pytest.approx(2 * 7 / 8 * small / (hw.scaleup_bw * 0.5) + 2e-6)


@pytest.mark.parametrize("tokens, ep, want", [
    (1, 64, (1, 1)),  # token 0 picks experts 0, 32, ..., 224; the rank holds 0-3: expert 0
    (32, 8, (32, 32)),  # T = stride 32: every expert once; the rank's 32 each get one token
    (4096, 8, (4096, 32)),  # T k / ep pairs on all 32 of the rank's experts
    (16, 1, (128, 128)),  # T < stride: picks 2 i + 32 j, 128 experts once each
    (16, 8, (16, 16)),  # of those, 2 i < 32 (j = 0) on rank 0
])
def test_balanced_routing_of_the_moe_table_by_hand(tokens, ep, want):
    """DeepSeek-V3's 256 experts, top-8 (stride 32), as aiconfigurator's collector routes "balanced"."""
    assert balanced_routing(tokens, 256, 8, ep) == want


def test_balanced_rows_hit_more_experts_than_random_routing():
    """At T k = E every expert gets one token under the table's balanced routing; random routing
    (what serving sees, sim/cost/moe.py) leaves (1 - 8/256)^32 = 36% of them idle."""
    from rackplan.sim.cost.moe import distinct_experts_per_rank
    from rackplan.specs import Layout, load_model

    random = distinct_experts_per_rank(load_model("deepseek-v3"), Layout(role="decode", dp=1), 32.0)
    assert balanced_routing(32, 256, 8, 1)[1] == 256
    assert random == pytest.approx(256 * (1 - (1 - 8 / 256) ** 32), rel=0.02)


def test_quantize_takes_an_l2_regime_where_the_hardware_says_its_size():
    from rackplan.calibration.opdb_fit import ClassRows
    from rackplan.calibration.opdb_ops import STREAM_START, _in_l2

    rows = ClassRows("quantize.fp8", None, np.ones(4), None, STREAM_START, ("eff_max",), "quant_dtype fp8")
    h100, b200 = load_hardware("h100-sxm"), load_hardware("b200")
    assert h100.l2_bytes == 50e6 and b200.l2_bytes == 0.0
    got = _in_l2(rows, h100)
    assert got.regimes == ((0.0, 50e6), (50e6, math.inf)) and got.bounds["eff_max"][1] == 2.0
    assert [c.work_max for _, _, c, _ in got.parts()] == [50e6, 0.0]  # 0: no upper bound
    assert _in_l2(rows, b200) is rows


def test_a2a_floor_kept_only_where_it_fits_better():
    """opdb_import._floor_helps: a group's floored fit replaces its linear fit only where its MAPE on the
    group's fit rows is lower (the rows fit_a2a records both errors on)."""
    from rackplan.calibration.opdb_import import _floor_helps
    from rackplan.specs import A2AParams

    e = A2AParams(kernel="low_latency", link="nvlink", alpha_s=2e-5, bw_eff=0.6, ep=8, phase="dispatch")
    rows = [{"kernel": "low_latency", "phase": "dispatch", "ep": 8, "err_linear": 0.05, "err_floor": -0.5},
            {"kernel": "low_latency", "phase": "dispatch", "ep": 8, "err_linear": -0.05, "err_floor": 0.3},
            {"kernel": "low_latency", "phase": "combine", "ep": 8, "err_linear": 0.9, "err_floor": 0.0}]
    assert not _floor_helps(rows, e)
    better = [dict(r, err_floor=0.01) for r in rows[:2]]
    assert _floor_helps(better, e) and not _floor_helps([], e)
