"""Published deployments predicted by the step cost model, under several profiles side by side.

Cases (../shared/reference/public_case_sglang_96xH100.md and public_cases.md), each a steady-state
step on one instance, so the ratio isolates the cost model (no queueing):
- LMSYS, DeepSeek-V3 on 96 H100 (2025-05-05): prefill EP32 at 16,384 tokens per device for prompts of
  1K/2K/4K, and decode EP72 at batch 256 per device, KV 2000, two-batch overlap (our DBO) on.
- vLLM r1-h200-prefill-tp8: DeepSeek-R1 FP8 on 8 x H200, TP8 (MoE as EP8), ISL 2k, OSL 1; total
  tokens/s/GPU of a 16,384-token prefill step.
- vLLM v32-gb300-prefill-tp2: DeepSeek-V3.2 NVFP4 (experts FP4) on 2 x GB300, TP2, ISL 2k, OSL 1,
  --max-num-batched-tokens 20,480: a 20,480-token step.
Published tokens/s/GPU are read off charts where the source says so ([chart] in public_cases.md).

Run: python benchmarks/public_case.py [--profile datasheet --profile h100-sxm-vllm ...]
(default: datasheet and each case's hardware default profile, measured where shipped).
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Callable

from rackplan.sim.cost.step import CostContext, decode_step, prefill_step
from rackplan.specs import EPLBConfig, Layout, load_hardware, load_model, resolve_profile


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    hardware: str
    published: float  # tokens/s per GPU
    layout: Layout
    tokens_per_s: Callable  # (CostContext) -> tokens/s per GPU
    fp4_experts: bool = False


def _prefill(tokens: int, isl: int):
    return lambda cx: tokens / prefill_step(cx, [isl] * (tokens // isl)).seconds / cx.layout.tp


def _decode(batch: int, kv: int):
    return lambda cx: batch / decode_step(cx, batch, batch * kv).seconds


def cases() -> list[Case]:
    out = [Case(f"LMSYS prefill EP32, ISL {isl}, 16k tok/dev, TBO", "deepseek-v3", "h100-sxm", pub / 8,
                Layout(role="prefill", dp=32, dbo=True, max_tokens_per_step=16384), _prefill(16384, isl))
           for isl, pub in ((1024, 57_674), (2048, 54_543), (4096, 50_302))]
    eplb = EPLBConfig(redundant_experts=32, policy="hierarchical")
    out.append(Case("LMSYS decode EP72, batch 256, KV 2000, TBO", "deepseek-v3", "h100-sxm", 22_282 / 8,
                    Layout(role="decode", dp=72, dbo=True, max_batch_per_rank=256, eplb=eplb), _decode(256, 2000)))
    out.append(Case("vLLM R1 FP8 prefill TP8, ISL 2k (H200)", "deepseek-v3", "h200-sxm", 2_259,
                    Layout(role="prefill", dp=1, tp=8, max_tokens_per_step=16384), _prefill(16384, 2048)))
    out.append(Case("vLLM V3.2 NVFP4 prefill TP2, ISL 2k (GB300)", "deepseek-v3.2", "gb300-nvl72", 7_360,
                    Layout(role="prefill", dp=1, tp=2, max_tokens_per_step=20480), _prefill(20480, 2048),
                    fp4_experts=True))
    return out


def _model(case: Case):
    model = load_model(case.model)
    if case.fp4_experts:  # NVFP4 checkpoint: routed experts stored and run in FP4
        model = dataclasses.replace(model, dtypes=dataclasses.replace(model.dtypes, expert_weights="nvfp4",
                                                                      expert_compute="fp4"))
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", action="append", default=[],
                    help="profile to predict with (repeatable; 'default' = the hardware's default_profile)")
    args = ap.parse_args()
    names = args.profile or ["datasheet", "default"]
    print(f"{'case':<46}{'published':>10}" + "".join(f"{n[:18]:>20}" for n in names))
    for case in cases():
        hw = load_hardware(case.hardware)
        cells = []
        for n in names:
            prof = resolve_profile(None if n == "default" else n, None, hw)
            pred = case.tokens_per_s(CostContext(_model(case), hw, case.layout, prof))
            cells.append(f"{pred:>9,.0f} ({pred / case.published:4.2f}x)")
        print(f"{case.name:<46}{case.published:>10,.0f}" + "".join(f"{c:>20}" for c in cells))
    print("\n(x) = predicted / published tokens/s per GPU; 'default' = "
          + ", ".join(sorted({f"{c.hardware}: {load_hardware(c.hardware).default_profile}" for c in cases()})))


if __name__ == "__main__":
    main()
