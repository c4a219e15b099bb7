"""An MTP drafter pass is priced as the decoder layer it runs (sim/cost/prices.py mtp_passes): at one sequence,
three passes of V4-Flash's MTP module cost three times one layer of the plain (speculation-free) step at one
token, its LM head, and the module's BF16 input projection, derived here from the plain step's own ops."""
import dataclasses

import pytest

from rackplan.sim.cost.draft import drafter
from rackplan.sim.cost.roofline import price_gemm
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import load_hardware, load_model, load_plan, load_profile
from rackplan.specs.layout import Speculation

pytestmark = pytest.mark.unit
ONCE_A_STEP = ("lm_head", "sample")  # the plain step's ops that are not a layer's


@pytest.mark.parametrize("tp, ep", [(4, 1), (4, 4)])
def test_three_mtp_passes_at_batch_one_are_three_layers_by_hand(tp, ep):
    model, hw, prof = load_model("deepseek-v4-flash"), load_hardware("gb300-nvl72"), load_profile("datasheet")
    base = dataclasses.replace(load_plan("v41-flash-gb300-single-user").aggregated[0], tp=tp, ep=ep, speculation=None)
    ctx = 4096.0
    plain = decode_step(CostContext(model, hw, base, prof, 0.0), 1.0, ctx).breakdown()
    assert not any(name.startswith("host") and sec for name, sec in plain.items())  # no host time in the sums
    layer = sum(sec for name, sec in plain.items() if name not in ONCE_A_STEP) / model.num_layers
    h = model.hidden_size
    # eh_proj: [1, 2h] x [2h, h] in BF16 (2 bytes a weight), one token's 2h in and h out (BF16 activations)
    eh = price_gemm(2.0 * 2 * h * h, 2 * h * h * 2.0 + 3 * h * 2.0, hw.flops_for("bf16"), "bf16", 1.0, h, 2 * h,
                    hw, prof)
    spec = dataclasses.replace(base, speculation=Speculation(3, 2.0))
    draft = decode_step(CostContext(model, hw, spec, prof, 0.0), 1.0, ctx).breakdown()["draft"]
    assert draft == pytest.approx(3 * (layer + plain["lm_head"] + eh), rel=1e-9)


def test_a_block_drafter_keeps_its_own_pricing():
    # DSpark stages are not layers of the target (other widths, 128 experts): their roofline is unchanged
    plan = load_plan("v41-flash-gb300-single-user")
    model = load_model(plan.model)
    assert model.draft.kind == "draft_model"
    lay = plan.aggregated[0]
    assert not drafter(model, lay, model.draft.forward_passes, False).layer
