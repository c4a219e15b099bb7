"""Fits recover the profile that generated synthetic measurements; bad points are one-line errors."""
import dataclasses

import numpy as np
import pytest

from rackplan.calibration.fit import Fitter, fit_profile
from rackplan.calibration.robust import check_points, fit_relative
from rackplan.calibration.samples import split_holdout, step_samples
from rackplan.calibration.synthetic import synth_records
from rackplan.calibration.validate import compare_steps
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_profile

pytestmark = pytest.mark.unit
PLAN = load_plan("tiny-cpu")
BASE = load_profile("datasheet")
# what small ops look like on a CPU: a fixed cost per op per layer on top of roofline work
TRUE = dataclasses.replace(BASE, gemm_eff_max=0.3, gemm_m_half=8.0, op_fixed_s=0.0, attn_eff=0.2,
                           host=dataclasses.replace(BASE.host, prepare_step_s=1e-3, prepare_per_seq_s=5e-5,
                                                    sample_step_s=0.0, sample_per_seq_s=0.0, sample_per_draft_s=0.0),
                           op_fixed={"attn.proj": 1e-4, "attn.core/decode": 8e-5, "attn.core/prefill": 4e-5,
                                     "router": 6e-5, "moe.experts": 9e-5, "lm_head": 3e-5},
                           op_scale={"moe.experts": 2.0, "attn.core/prefill": 3.0})


@pytest.fixture(scope="module")
def fitted():
    recs = synth_records(PLAN, TRUE, decode_batches=(1, 2, 4, 8, 12, 16), repeats=3, noise=0.02)
    samples = step_samples(recs, PLAN)
    fit, held = split_holdout(samples, {"decode": {4, 12}})
    fx = Fitter(PLAN, load_model(PLAN.model), load_hardware(PLAN.hardware), fit)
    prof = fit_profile(fx, BASE, "synthetic")
    prof = dataclasses.replace(prof, provenance={"fit_sizes": {"decode": [1, 2, 8, 16],
                                                               "prefill": [32, 64, 128, 256]}})
    return prof, samples, held


def test_repeats_collapse_to_medians(fitted):
    _, samples, held = fitted
    assert len(samples) == 10 and all(s.repeats == 3 for s in samples)
    assert sorted(s.size for s in held) == [4, 12]


def test_fit_set_matches_generating_profile(fitted):
    prof, _, _ = fitted
    assert prof.op_fixed_s == 0.0 and set(prof.op_fixed) >= {"attn.proj/decode", "attn.core/prefill"}
    assert prof.host.prepare_step_s == pytest.approx(1e-3, rel=0.2)
    assert max(prof.fit_error.values()) < 3.0  # 2% lognormal noise


def test_held_out_mape_small(fitted):
    prof, samples, _ = fitted
    rep = compare_steps(PLAN, samples, prof)
    assert rep.held_sizes["decode"] == [4, 12]
    gated = rep.gated()
    assert "step" in gated and max(gated.values()) < 5.0


def test_op_fixed_adds_per_layer_where_the_op_runs():
    model, hw = load_model(PLAN.model), load_hardware(PLAN.hardware)
    lay = PLAN.decode[0]
    plain = decode_step(CostContext(model, hw, lay, BASE), 4, 256).breakdown()
    prof = dataclasses.replace(BASE, op_fixed={"attn.proj": 1e-3, "attn.core/decode": 2e-3, "attn.core": 5.0,
                                               "moe.experts": 1e-3, "dense_ffn/prefill": 9.0})
    got = decode_step(CostContext(model, hw, lay, prof), 4, 256).breakdown()
    n_dense, n_moe = model.layers_in("decode")
    assert got["attn.proj"] - plain["attn.proj"] == pytest.approx(1e-3 * (n_dense + n_moe))
    assert got["attn.core"] - plain["attn.core"] == pytest.approx(2e-3 * (n_dense + n_moe))  # phase key wins
    assert got["moe.experts"] - plain["moe.experts"] == pytest.approx(1e-3 * n_moe)
    assert got["dense_ffn"] == pytest.approx(plain["dense_ffn"])  # prefill-only key


@pytest.mark.parametrize("bad", [[1.0, float("nan"), 2.0], [1.0, -1.0, 2.0]])
def test_nan_or_negative_times_rejected(bad):
    with pytest.raises(SpecError, match="finite, positive"):
        check_points(np.array(bad), 2, "m", "op")


def test_too_few_points_rejected():
    with pytest.raises(SpecError, match="at least 2 points"):
        fit_relative(lambda p: p[0] + 0 * np.ones(1), [1.0, 1.0], [0, 0], [2, 2], [1.0], "m", "op")


def test_too_few_shapes_rejected():
    recs = synth_records(PLAN, TRUE, decode_batches=(4,), prefill_tokens=(64,), repeats=2)
    with pytest.raises(SpecError, match="distinct step shapes"):
        Fitter(PLAN, load_model(PLAN.model), load_hardware(PLAN.hardware), step_samples(recs, PLAN))
