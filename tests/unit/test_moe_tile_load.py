"""The routed experts' load range: FlashInfer's TRT-LLM MoE picks its tile_N by tokens entering the rank
x top-k over the rank's experts (calibration/opdb_ops.py FLASHINFER_TILE_LOADS), a Curve bounded to a
range of that load prices only ops inside it, and the step model hands the load to the experts' curves
under EP and TP. No pyarrow: synthetic curves and the embedded models."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rackplan.calibration.opdb_fit import ClassRows, _load_ranges
from rackplan.calibration.opdb_ops import FLASHINFER_TILE_LOADS
from rackplan.sim.cost import efficiency
from rackplan.sim.cost.moe import expert_work, tile_load
from rackplan.sim.cost.roofline import price
from rackplan.sim.cost.step import CostContext, StepModel
from rackplan.specs import Curve, Layout, Profile, SpecError, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit

# one curve per load range, far apart (and low, so the experts are compute bound) so a wrong range shows:
# eff_max 0.01, 0.02, ... 0.05
RANGED = tuple(Curve(eff_max=0.01 * (j + 1), x_half=20.0, load_min=lo, load_max=0.0 if math.isinf(hi) else hi)
               for j, (lo, hi) in enumerate(FLASHINFER_TILE_LOADS))


def _range_of(load: float) -> int:
    return next(j for j, (lo, hi) in enumerate(FLASHINFER_TILE_LOADS) if lo < load <= hi)


# (tokens entering the rank, top-k, EP size, experts) -> FlashInfer's fallback tile, worked by hand from
# computeSelectedTileN: avg = T k / (E / ep), tile = nextPowerOfTwo(ceil(avg)) clamped to the ladder
# 8 ... 256, candidates {tile, the next two, the one before}, the smallest taken
@pytest.mark.parametrize("tokens, k, ep, experts, load, tile", [
    (16, 6, 8, 256, 3.0, 8),  # avg 3 -> 4 -> clamped 8, no tile before it: 8
    (256, 6, 4, 384, 16.0, 8),  # avg exactly 16 -> 16, the one before: 8
    (320, 6, 4, 256, 30.0, 16),  # the table's jump: 30 -> 32 -> 16 (153 us) ...
    (384, 6, 4, 256, 36.0, 32),  # ... 36 -> 64 -> 32 (213 us)
    (160, 6, 8, 256, 30.0, 16),  # ep 8, T 160 -> 192: the same edge at half the tokens
    (192, 6, 8, 256, 36.0, 32),
    (4096, 6, 1, 256, 96.0, 64),  # 96 -> 128 -> 64
    (6144, 6, 1, 256, 144.0, 128),  # 144 -> 256 -> 128 (192 where the ladder has it)
])
def test_tile_choice_by_hand(tokens, k, ep, experts, load, tile):
    got = tile_load(tokens, k, experts / ep)
    assert got == load
    # the range holding the load is the tile's: tiles 8, 16, 32, 64, 128 in order
    assert (8, 16, 32, 64, 128)[_range_of(got)] == tile


def test_a_curve_prices_only_its_load_range():
    prof = Profile(name="p", curves={"experts.mxfp4": RANGED})
    for load, want in ((3.0, 0.01), (16.0, 0.01), (16.5, 0.02), (32.0, 0.02), (36.0, 0.03), (96.0, 0.04),
                       (144.0, 0.05), (5000.0, 0.05)):
        eff = efficiency.experts(prof, "mxfp4", 10.0, load=load)
        assert eff == pytest.approx(want * 10.0 / 30.0), load
    # a load of 0 is unknown: every range's curve may run, the best of them prices
    assert efficiency.experts(prof, "mxfp4", 10.0) == pytest.approx(0.05 * 10.0 / 30.0)
    bound = efficiency.experts_at(prof, "mxfp4")
    loads = np.array([3.0, 16.0, 16.5, 36.0, 144.0])
    assert np.allclose(bound(np.full(5, 10.0), 0.0, loads), [efficiency.experts(prof, "mxfp4", 10.0, load=x)
                                                            for x in loads])
    with pytest.raises(SpecError, match="load_max"):
        Curve(eff_max=0.5, load_min=32.0, load_max=16.0)
    with pytest.raises(SpecError, match="load_min"):
        Curve(eff_max=0.5, load_min=-1.0)


def test_thin_load_ranges_join_the_one_below():
    """A range with fewer fit rows than its curves' parameters (here 2 x 2) joins the one below; the first,
    with none below, takes the next in: 2 rows + 6 -> (0, 32], then 3 more join it -> (0, 64]."""
    rows = ClassRows("experts.mxfp4", None, None, None, Curve(eff_max=0.5), ("eff_max", "x_half"), "", configs=2,
                     load_ranges=FLASHINFER_TILE_LOADS)
    load = np.array([1.0, 2.0] + [20.0] * 6 + [40.0] * 3 + [100.0] * 5 + [200.0] * 4)
    assert _load_ranges(rows, load) == [(0.0, 64.0), (64.0, 128.0), (128.0, math.inf)]


def _mx_model():
    """DeepSeek-V4-Flash with its experts run by the MXFP4 x MXFP8 kernel (expert_compute mxfp4)."""
    m = load_model("deepseek-v4-flash")
    return dataclasses.replace(m, dtypes=dataclasses.replace(m.dtypes, expert_compute="mxfp4"))


@pytest.mark.parametrize("lay, t_global, t_max, kernel, tokens_in", [
    (Layout(role="decode", dp=8), 8 * 16.0, 16.0, "low_latency", 16.0),  # DEP8: its own 16 tokens, 32 experts
    (Layout(role="decode", dp=8), 8 * 300.0, 300.0, "high_throughput", None),  # the copies a dispatch delivers
    (Layout(role="decode", dp=1, tp=4, expert_parallel=False), 900.0, 900.0, "low_latency", 900.0),  # MoE TP
    (Layout(role="decode", dp=1, tp=4), 40.0, 40.0, "low_latency", 40.0),  # TP attention, EP 4: 64 experts
])
@pytest.mark.profile_data
def test_step_prices_experts_at_the_load_the_kernel_sees(lay, t_global, t_max, kernel, tokens_in):
    """StepModel's routed experts take the load tokens entering the rank x top-k / the rank's expert slots
    (moe.tile_load): the experts' seconds are the price under the curve of that load's range alone."""
    from rackplan.sim.cost.moe import distinct_experts_busiest

    model, hw = _mx_model(), load_hardware("gb200-nvl72")
    prof = dataclasses.replace(load_profile("datasheet"), curves={"experts.mxfp4": RANGED})  # (its a2a entries)
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    t_exp = sm._price_moe(t_global, t_max, 1, kernel, "decode", 0.0)[1]  # (n_moe, experts s, ...)
    busiest = t_global * model.moe.top_k / lay.ep_size * sm.imbalance_at(t_global, 1)
    if tokens_in is None:  # high-throughput: one copy per token and rank hit (step.py _tokens_in)
        tokens_in = busiest * sm.copies_per_pick
        assert tokens_in > t_max * 6 / 8  # more than the pairs a local expert's share would say
    load = tokens_in * model.moe.top_k / (model.moe.num_experts / lay.ep_size)  # V4-Flash: top-6 of 256
    flops, nbytes, rows, n, k = expert_work(model, busiest, max(distinct_experts_busiest(model, lay, t_global), 1.0),
                                            lay.moe_tp)

    def under(c: Curve) -> float:
        one = Profile(name="one", curves={"experts.mxfp4": (c,)})
        return price(flops, nbytes, hw.flops_for("mxfp4"), efficiency.experts(one, "mxfp4", rows, n, k, flops), hw,
                     one)

    j = _range_of(load)
    assert t_exp == pytest.approx(under(RANGED[j]), rel=1e-12)
    assert t_exp != pytest.approx(under(RANGED[(j + 1) % len(RANGED)]), rel=1e-3)  # the range matters here


@pytest.mark.profile_data
@pytest.mark.parametrize("t_rank", [5.0, 6.0])  # DEP8, 32 experts a rank: t x 16 = 80, 96 straddle the 16 edge
def test_gb200_profile_prices_experts_at_the_range_of_their_load(t_rank):
    """Under the shipped gb200 profile a DEP8 decode step of V4-Flash run by the MXFP4 kernel prices its
    experts with the curves of its load's range alone (the profile carries one pair per range)."""
    from rackplan.sim.cost.moe import distinct_experts_busiest

    model, hw, lay = _mx_model(), load_hardware("gb200-nvl72"), Layout(role="decode", dp=8)
    prof = load_profile("gb200-nvl72-vllm")
    ranges = {(c.load_min, c.load_max) for c in prof.curves["experts.mxfp4"]}
    assert ranges == {(lo, 0.0 if math.isinf(hi) else hi) for lo, hi in FLASHINFER_TILE_LOADS}
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    for t in (t_rank, 16 * t_rank, 64 * t_rank):  # loads t x 6 / 32: 0.9-1.1, 15-18, 60-72
        t_exp = sm._price_moe(8 * t, t, 1, "low_latency", "decode", 0.0)[1]
        load = t * 6 / 32
        busiest = 8 * t * 6 / 8 * sm.imbalance_at(8 * t, 1)
        flops, nbytes, rows, n, k = expert_work(model, busiest, max(distinct_experts_busiest(model, lay, 8 * t), 1.0))
        own = tuple(c for c in prof.curves["experts.mxfp4"] if c.load_min < load <= (c.load_max or math.inf))
        one = dataclasses.replace(prof, curves={**prof.curves, "experts.mxfp4": own})
        want = price(flops, nbytes, hw.flops_for("mxfp4"), efficiency.experts(one, "mxfp4", rows, n, k, flops), hw,
                     one)
        assert len(own) == 2 and t_exp == pytest.approx(want, rel=1e-12)
