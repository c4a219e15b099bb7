"""Sanity check against one published deployment: LMSYS, DeepSeek-V3 with PD disaggregation and
large-scale EP on 96 H100 (2025-05-05; ../shared/reference/public_case_sglang_96xH100.md).

Prints predicted vs published tokens/s per GPU side by side, with the datasheet profile (no
calibration): prefill EP32 at 16,384 tokens per device for prompts of 1K/2K/4K, and decode EP72 at
batch 256 per device, KV length 2000, with and without two-batch overlap (TBO = our DBO).
Run: python benchmarks/public_case.py
"""
from __future__ import annotations

from rackplan.sim.cost.step import CostContext, decode_step, prefill_step
from rackplan.specs import EPLBConfig, Layout, load_hardware, load_model, load_profile

PUBLISHED_PREFILL = {1024: 57_674 / 8, 2048: 54_543 / 8, 4096: 50_302 / 8}  # tok/s per GPU (per node / 8)
PUBLISHED_DECODE = 22_282 / 8  # tok/s per GPU, EP72, batch 256, KV 2000, TBO on


def main() -> None:
    prof = load_profile("datasheet")
    model, hw = load_model("deepseek-v3"), load_hardware("h100-sxm")
    print(f"{'case':<42}{'published':>11}{'predicted':>11}{'ratio':>8}")
    for isl, pub in PUBLISHED_PREFILL.items():
        lay = Layout(role="prefill", dp=32, dbo=True, max_tokens_per_step=16384)
        step = prefill_step(CostContext(model, hw, lay, prof), [isl] * (16384 // isl))
        pred = 16384 / step.seconds
        print(f"{f'prefill EP32, ISL {isl}, 16k tok/dev, TBO':<42}{pub:>11,.0f}{pred:>11,.0f}{pred / pub:>8.2f}")
    eplb = EPLBConfig(redundant_experts=32, policy="hierarchical")
    for dbo in (True, False):
        lay = Layout(role="decode", dp=72, dbo=dbo, max_batch_per_rank=256, eplb=eplb)
        pred = 256 / decode_step(CostContext(model, hw, lay, prof), 256, 256 * 2000).seconds
        pub = PUBLISHED_DECODE if dbo else float("nan")
        print(f"{f'decode EP72, batch 256, KV 2000, TBO {dbo}':<42}{pub:>11,.0f}{pred:>11,.0f}{pred / pub:>8.2f}")


if __name__ == "__main__":
    main()
