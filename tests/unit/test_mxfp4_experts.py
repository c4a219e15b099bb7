"""DeepSeek-V4 / V4.1's MXFP4 routed experts priced on the kernel vLLM runs for them: FlashInfer's TRT-LLM
MXFP4 MoE (TrtLlmMxfp4ExpertsModular), measured as the tables' w4a8_mxfp4_mxfp8 rows (experts.mxfp4), not
the NVFP4 kernel's experts.fp4 (efficiency.KERNEL_FORMATS, its sources in the comment there).
Worked by hand from the shipped gb300 profile's curve parameters; no pyarrow."""
from __future__ import annotations

import math

import pytest

from rackplan.sim.cost import efficiency
from rackplan.sim.cost.moe import distinct_experts_busiest, expert_work
from rackplan.sim.cost.step import CostContext, StepModel
from rackplan.specs import Curve, Layout, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit


def test_mxfp4_weights_take_the_mxfp4_kernel_curves():
    """MXFP4 weights computed in the fp4 family run the MXFP4 kernel; NVFP4 weights the fp4 (NVFP4) one."""
    assert efficiency.kernel_dtype("mxfp4", "fp4") == "mxfp4"
    assert efficiency.kernel_dtype("nvfp4", "fp4") == "fp4"
    assert efficiency.kernel_dtype("mxfp4", "bf16") == "bf16"  # W4A16 (Marlin): not the MXFP4 x MXFP8 kernel
    for name in ("deepseek-v4-flash", "deepseek-v4.1-flash"):
        d = load_model(name).dtypes
        assert efficiency.kernel_dtype(d.expert_weights, d.expert_compute_dtype) == "mxfp4"


def _eff_by_hand(c: Curve, rows: float, n: float, k: float, flops: float) -> float:
    """rackplan.specs.Curve's efficiency written out: eff_max / ((1 + (x_half/rows)^q + (y_half/n +
    z_half/k)^q)^(1/q) + work_half/flops) x tiles / (tiles + tiles_half), tiles of 128 x 128 over rows x n."""
    q = c.sharpness
    base = (1.0 + (c.x_half / rows) ** q + (c.y_half / n + c.z_half / k) ** q) ** (1.0 / q)
    eff = c.eff_max / (base + c.work_half / flops)
    tiles = max(math.ceil(rows / 128), 1) * max(math.ceil(n / 128), 1)
    return eff * tiles / (tiles + c.tiles_half) if c.tiles_half else eff


def _in_load(c: Curve, load: float) -> bool:
    return c.load_min < load <= (c.load_max or math.inf)


@pytest.mark.parametrize("t_rank, load, ratio", [
    (64.0, 8.0, 0.975),    # DEP8 (48 experts a rank): 64 x 6 / 48 = 8, FlashInfer's tile 8
    (384.0, 48.0, 1.557),  # 384 x 6 / 48 = 48, tile 32: the measured MXFP4 x MXFP8 kernel is slower there
])
@pytest.mark.profile_data
def test_v41_step_reads_its_experts_from_the_mxfp4_curve(t_rank, load, ratio):
    """A V4.1-Flash DEP8 low-latency decode step on gb300 (shipped gb300-nvl72-vllm profile): the experts'
    seconds are the roofline of expert_work under the experts.mxfp4 pair of its load's range, evaluated here
    by hand from the curves' parameters at the fp4 peak, vs the experts.fp4 (NVFP4) pair before."""
    model, hw, lay = load_model("deepseek-v4.1-flash"), load_hardware("gb300-nvl72"), Layout(role="decode", dp=8)
    prof = load_profile("gb300-nvl72-vllm")
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    t_exp = sm._price_moe(8 * t_rank, t_rank, 1, "low_latency", "decode", 0.0)[1]
    assert t_rank * model.moe.top_k / (model.moe.num_experts / 8) == load
    busiest = 8 * t_rank * model.moe.top_k / 8 * sm.imbalance_at(8 * t_rank, 1)
    flops, nbytes, rows, n, k = expert_work(model, busiest, max(distinct_experts_busiest(model, lay, 8 * t_rank), 1.0))
    assert (n, k) == (2 * 2304, 5120)  # gate/up of one V4.1 expert: [rows, 5120] x [5120, 2 x 2304]
    peak = hw.peak_flops["fp4"]
    t_mem = nbytes / (hw.hbm_bw * efficiency.memory(prof, nbytes))

    def seconds(curves) -> float:
        eff = max(_eff_by_hand(c, rows, n, k, flops) for c in curves)
        return max(flops / (peak * eff), t_mem) + prof.op_fixed_s

    mx = [c for c in prof.curves["experts.mxfp4"] if _in_load(c, load)]
    assert len(mx) == 2  # the range's two configurations
    assert t_exp == pytest.approx(seconds(mx), rel=1e-9)
    before = seconds(prof.curves["experts.fp4"])
    assert t_exp / before == pytest.approx(ratio, abs=0.002)
