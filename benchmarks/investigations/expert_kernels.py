"""Routed-expert seconds per MoE layer under two kernels' curves, side by side in one run: the curves a model's
experts take (efficiency.kernel_dtype: DeepSeek-V4.1's MXFP4 weights -> experts.mxfp4, the MXFP4 x MXFP8
FlashInfer kernel) against another dtype's (default fp4: the NVFP4 kernel's experts.fp4, what main priced
them with before 2026-12-02), at the seed plans' operating points.

Run:  python benchmarks/investigations/expert_kernels.py [--model deepseek-v4.1-flash] [--hardware gb300-nvl72]
      [--profile gb300-nvl72-vllm] [--other fp4]
Efficiency columns: FLOPs / (the compute dtype's peak x seconds); HBM share: the memory side's seconds over the
price (below 1: compute-bound).
"""
from __future__ import annotations

import argparse
import sys

from rackplan.sim.cost import efficiency
from rackplan.sim.cost.moe import distinct_experts_busiest, expert_work, tile_load
from rackplan.sim.cost.roofline import price
from rackplan.sim.cost.step import CostContext, StepModel
from rackplan.specs import Layout, SpecError, load_hardware, load_model, load_profile

# (label, layout, tokens entering each rank's step, DeepEP kernel): the seed plans' prefill and decode pools
POINTS = (("DEP2 prefill, 16,384 tok/rank", Layout(role="prefill", dp=2), 16384.0, "high_throughput"),
          ("DEP4 prefill, 16,384 tok/rank", Layout(role="prefill", dp=4), 16384.0, "high_throughput"),
          ("DEP32 decode, b512 MTP5 (3,072 rows/rank)", Layout(role="decode", dp=32), 3072.0, "low_latency"),
          ("DEP64 decode, b128 (128 rows/rank)", Layout(role="decode", dp=64), 128.0, "low_latency"))


def row(model, hw, prof, other: str, lay: Layout, t_rank: float, kernel: str) -> tuple:
    """(load, seconds under the model's expert curves, seconds under `other`'s, their efficiencies, HBM share)."""
    sm = StepModel(CostContext(model, hw, lay, prof, 0.0))
    t_global = lay.dp * t_rank
    t_exp = sm._price_moe(t_global, t_rank, 1, kernel, lay.role, 0.0)[1]
    busiest = t_global * model.moe.top_k / sm.ep_size * sm.imbalance_at(t_global, 1)
    flops, nbytes, rows, n, k = expert_work(model, busiest, max(distinct_experts_busiest(model, lay, t_global), 1.0))
    load = tile_load(sm._tokens_in(t_rank, busiest, kernel), model.moe.top_k, sm.local_experts)
    peak = hw.flops_for(model.dtypes.expert_compute_dtype)
    t_other = price(flops, nbytes, peak, efficiency.experts(prof, other, rows, n, k, flops, load, hw.num_sms), hw, prof)
    t_mem = nbytes / (hw.hbm_bw * efficiency.memory(prof, nbytes))
    return load, t_exp, t_other, flops / (peak * t_exp), flops / (peak * t_other), t_mem / t_exp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="deepseek-v4.1-flash")
    ap.add_argument("--hardware", default="gb300-nvl72")
    ap.add_argument("--profile", default="gb300-nvl72-vllm")
    ap.add_argument("--other", default="fp4", help="the dtype whose experts curves price the comparison column")
    a = ap.parse_args()
    try:
        model, hw, prof = load_model(a.model), load_hardware(a.hardware), load_profile(a.profile)
    except SpecError as e:
        print(f"expert_kernels.py: {e}", file=sys.stderr)
        sys.exit(2)
    mine = efficiency.kernel_dtype(model.dtypes.expert_weights, model.dtypes.expert_compute_dtype)
    print(f"{a.model} on {a.hardware}, profile {a.profile}: experts.{mine} against experts.{a.other}")
    print(f"| point | load | experts.{mine} us | experts.{a.other} us | ratio | eff {mine} | eff {a.other} "
          "| HBM share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, lay, t, kern in POINTS:
        load, t_mine, t_other, e_mine, e_other, mem = row(model, hw, prof, a.other, lay, t, kern)
        print(f"| {label} | {load:.0f} | {t_mine * 1e6:.0f} | {t_other * 1e6:.0f} | {t_mine / t_other:.2f} "
              f"| {e_mine:.3f} | {e_other:.3f} | {mem:.2f} |")


if __name__ == "__main__":
    main()
