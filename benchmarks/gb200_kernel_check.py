"""GB200 kernel prices against the kernels the published runs ran (issue 35, benchmarks/RESULTS.md session 18 gb200).

Part 1: the vLLM GB200 post's single-kernel charts (benchmarks/cases/vllm-gb200-dsr1.yaml, the
vllm-gb200-kernel-* rows) beside the same kernels in that post's own prefill run and rackplan's price of them.
The run: the recipe the post links (vllm-project/vllm issue 33583 -> github.com/minosfuture/vllm branch
pd_gb200_0114, runs/DS-R1/fp4/report/prefill-2000in/prefill-master-pd.log), a torch profile of DP rank 0 over one
step `execute_new_32_cached_0` (32 prompts of 2,000 tokens a rank, DEP2, allgather_reducescatter: each rank's MoE
takes both ranks' 128,000 tokens on its 128 experts). Per layer (61 attention layers, 58 MoE layers):
  MLA prefill  fmhaSm100aKernel_QkvBfloat16OBfloat16HQk192HV128 (TRT-LLM ragged)  300.486 ms / 61 = 4,926 us
  NVFP4 MoE    bmm_E2m1 (FC1) 508.602 + bmm_Bfloat16_E2m1 (FC2) 228.802 + finalize 94.571 + routingMain 21.654
               + routingIndices 1.108 + quantize_with_block_size 22.611 ms, / 58 = 15,127 us
The charts at the run's work: MLA 6,715 us at 65,536 tokens of 2,048, times (64,000 x 2,000) / (65,536 x 2,048)
(causal attention's work: tokens x sequence); MoE 28,296 us at 131,072 tokens on all 256 experts (1,048,576
token-expert pairs), times the run's 512,000 local pairs (128,000 x 8 / 2).

Part 2: FP8 block-scaled routed experts behind DeepEP, the SGLang GB200 part II high-precision runs
(sglang-gb200-p2-*-bf16attn-fp8): rackplan's moe.route + moe.experts (the case's engine, sglang: the profile's
experts.fp8_block.deepgemm, fitted on the table below, benchmarks/RESULTS.md session 19 moekernel; and, as "vLLM
class", the same layout under vLLM, the profile's experts.fp8_block, fitted on vLLM 0.24.0's FlashInfer TRT-LLM FP8
block-scale MoE) beside aiconfigurator-core's SGLang 0.5.10
wideep_context_moe_perf rows (kernel_source deepepmoe: SGLang's DeepEP MoE, DeepGEMM's grouped GEMM; uniform
routing). The table's num_tokens are the tokens of all EP ranks together (per rank they would exceed the FP8
peak: EP 4 at 16,384 a rank would be 131,072 pairs x 88 MFLOP in 1.77 ms = 6.5 PFLOP/s against 5). Needs the
opdb extra (pip install -e ".[opdb]") for part 2's table; part 1 needs nothing.

Run:  python benchmarks/gb200_kernel_check.py
"""
from __future__ import annotations

import dataclasses
import sys

from rackplan.accuracy.cases import load_cases, resolve
from rackplan.accuracy.predict import prefill_chunks
from rackplan.calibration import opdb
from rackplan.sim.cost.step import CostContext, op_layers, prefill_step
from rackplan.specs import SpecError, load_profile
from rackplan.specs.reading import read_parquet

RUN_MLA_US = 300.486e3 / 61  # the run's profile (module docstring)
RUN_MOE_US = (508.602 + 228.802 + 94.571 + 21.654 + 1.108 + 22.611) * 1e3 / 58
CHART_MLA_US = 6715.0 * (64000 * 2000) / (65536 * 2048)
CHART_MOE_US = 28296.0 * (128000 * 8 / 2) / (131072 * 8)
WIDEEP_TABLE = ("gb200", "moe", "sglang", "0.5.10", "wideep_context_moe_perf.parquet")


def per_layer_us(case, ops: tuple[str, ...], **layout) -> float:
    """Per-layer microseconds of `ops` in the case's prefill step under its hardware's default profile, with
    `layout` fields replaced (tokens per rank follows max_tokens_per_step when that is replaced)."""
    sc = resolve(case)
    lay = dataclasses.replace(sc.instance, **layout)
    if "max_tokens_per_step" in layout:
        sc = dataclasses.replace(sc, tokens_per_rank=layout["max_tokens_per_step"])
    cx = CostContext(sc.model, sc.hw, lay, load_profile(sc.hw.default_profile), 0.0)
    step = prefill_step(cx, prefill_chunks(case, sc))
    return sum(op.seconds / op_layers(sc.model, op.name) for op in step.ops if op.name in ops) * 1e6


def wideep_rows() -> dict[tuple[int, int], float] | None:
    """{(ep, num_tokens): microseconds} of the SGLang DeepEP MoE table (uniform routing), or None without it."""
    try:
        path = opdb.data_root().joinpath(*WIDEEP_TABLE)
    except SpecError:
        return None
    if not path.is_file():
        return None
    cols = ("moe_ep_size", "num_tokens", "distribution", "hidden_size", "inter_size", "num_experts", "latency")
    t = read_parquet(path, cols).to_pydict()
    return {(ep, n): ms * 1e3 for ep, n, d, h, i, e, ms in zip(*(t[c] for c in cols))
            if d == "uniform" and (h, i, e) == (7168, 2048, 256)}


def main() -> int:
    cases = {c.id: c for c in load_cases()}
    dep2 = cases["vllm-gb200-prefill-dep2"]
    print("Part 1: vLLM GB200 post, DEP2 prefill at 32 x 2,000 tokens a rank, per layer (us)")
    print(f"{'kernel':34s} {'chart at the run':>16s} {'the run':>9s} {'rackplan':>9s}")
    for label, chart, run, ops in (("MLA prefill core (attn.core)", CHART_MLA_US, RUN_MLA_US, ("attn.core",)),
                                   ("NVFP4 MoE (moe.route+moe.experts)", CHART_MOE_US, RUN_MOE_US,
                                    ("moe.route", "moe.experts"))):
        print(f"{label:34s} {chart:16,.0f} {run:9,.0f} {per_layer_us(dep2, ops):9,.0f}")
    print("\nPart 2: FP8 block-scaled routed experts behind DeepEP (SGLang GB200 part II, BF16 attention),"
          " per layer (us)")
    table = wideep_rows()
    hp = cases["sglang-gb200-p2-prefill-bf16attn-fp8"]
    print(f"{'shape':36s} {'SGLang deepepmoe':>16s} {'rackplan':>9s} {'ratio':>6s} {'vLLM class':>10s} {'ratio':>6s}")
    for dp, per_rank in ((4, 16384), (2, 8192)):
        ours = per_layer_us(hp, ("moe.route", "moe.experts"), dp=dp, max_tokens_per_step=per_rank)
        vllm = per_layer_us(hp, ("moe.route", "moe.experts"), dp=dp, max_tokens_per_step=per_rank, engine=None)
        ref = table.get((dp, dp * per_rank)) if table else None
        ref_s = f"{ref:16,.0f}" if ref else f"{'(no table)':>16s}"
        ratio = f"{ours / ref:6.2f}" if ref else ""
        ratio_v = f"{vllm / ref:6.2f}" if ref else ""
        print(f"{f'DEP{dp}, {per_rank:,} tokens a rank':36s} {ref_s} {ours:9,.0f} {ratio} {vllm:10,.0f} {ratio_v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
