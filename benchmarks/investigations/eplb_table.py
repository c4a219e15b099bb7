"""Expert-load imbalance and EPLB in Wide-EP decode: DEP8..72, 0/32/64 redundant experts, 3 skews.

DeepSeek-V3 (256 experts, top-8), decode batch 128 per rank, context 2000 per sequence, datasheet
profile. DEP8-64 on h200-sxm (8 GPUs per node; DEP16+ spans nodes over scale-out), DEP72 on
gb200-nvl72 (one NVLink domain). Per cell: predicted max/mean expert load of the busiest rank
(sim/cost/imbalance.py), decode step time (sim.cost.step.decode_step) and tokens/s/GPU
(batch / step time). "none" = contiguous experts, no EPLB; "r=N" = global EPLB policy (DeepSeek's
choice for decode) with N redundant experts; "-" = 256 + N slots not divisible by the EP size.
Run: python benchmarks/investigations/eplb_table.py
"""
from __future__ import annotations

from rackplan.sim.cost.imbalance import imbalance_factor
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import EPLBConfig, Layout, SpecError, load_hardware, load_model, load_profile

SIZES = ((8, "h200-sxm"), (16, "h200-sxm"), (32, "h200-sxm"), (64, "h200-sxm"), (72, "gb200-nvl72"))
SKEWS = (0.0, 0.3, 0.6)  # power-law exponent of expert popularity (hot expert 1x / 3.8x / 12x mean)
CONFIGS = (("none", 0), ("global", 0), ("global", 32), ("global", 64))
BATCH = 128  # decode sequences per rank
CONTEXT = 2000  # tokens per sequence


def cell(model, hw, prof, ep: int, skew: float, policy: str, redundant: int) -> str:
    layout = Layout(role="decode", dp=ep, eplb=EPLBConfig(redundant, policy))
    cx = CostContext(model, hw, layout, prof, skew=skew)
    try:
        step = decode_step(cx, BATCH, BATCH * CONTEXT)
    except SpecError:
        return "-"
    factor = imbalance_factor(BATCH * ep, model.moe.top_k, model.moe.num_experts, ep, skew, redundant, policy)
    return f"{factor:.2f} / {step.seconds * 1e3:.1f} ms / {BATCH / step.seconds:,.0f}"


def main() -> None:
    model, prof = load_model("deepseek-v3"), load_profile("datasheet")
    head = ["layout", "hardware", "skew"] + [("none" if p == "none" else f"r={r}") for p, r in CONFIGS]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for ep, hw_name in SIZES:
        hw = load_hardware(hw_name)
        for skew in SKEWS:
            cells = [cell(model, hw, prof, ep, skew, p, r) for p, r in CONFIGS]
            print(f"| DEP{ep} | {hw_name} | {skew:.1f} | " + " | ".join(cells) + " |")
    print("\nCells: max/mean expert load / decode step time / tokens/s/GPU; batch 128 per rank, "
          "context 2000, DeepSeek-V3, datasheet profile.")


if __name__ == "__main__":
    main()
