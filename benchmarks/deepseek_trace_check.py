"""DeepSeek's own H800 decode profile, op class by op class, beside rackplan's price of the same shape (issue 35).

The run (github.com/deepseek-ai/profile-data README, "Decoding"): DeepSeek-V3/R1, EP128, TP1, prompt 4K, 128
requests per GPU, two micro-batches overlapping computation with the all-to-all; "the all-to-all communication
during decoding does not occupy GPU SMs"; "we simulate an absolutely balanced MoE routing strategy".

The traces themselves (decode.json, prefill.json) are not readable here: the repository snapshot the project can
fetch leaves out files of 4 MiB and more, and both traces are larger (train.json, 3.1 MB, is the only one present).
The per-kernel times below are therefore a third-party reading of decode.json, the "h800 ds prof" column of
https://zdszero.github.io/Computer/Artificial_Intelligence/deepseek_profile.html (microseconds a kernel takes in
one layer of one micro-batch; the page's kernel names are its own B200 run's, the H800 column is DeepSeek's
trace) [secondary]. Only what that page shows is used: its shared-expert and later rows, the gaps between
kernels and sampling are not in the part read, and are printed as "n/a".

The trace's shape, read from the kernels' own published rates (not from the trace's shape fields, which are not
readable here): a micro-batch is 64 sequences x 2 query tokens (MTP 1) at context 4,096.
  - attention core: 2 x 64 x 2 x 128 heads x 4,096 x (576 + 512) = 146.0 GFLOP in 255 us = 573 TFLOP/s, FlashMLA's
    published compute-bound figure at the time (README, Feb 2025: "580 TFLOPS in computation-bound configuration
    on H800 SXM5, using CUDA 12.6"); at one query token it would be 287 TFLOP/s while reading the BF16 latent
    cache (302 MB) at 1.2 TB/s, far from both of FlashMLA's bounds (580 TFLOP/s, 3,000 GB/s).
  - routed experts: 128 tokens x 8 x 128 ranks / 256 experts = 512 tokens on each of a rank's 2 experts, DeepGEMM's
    masked-layout README row "2 groups, M 512 per group" (1,040 TFLOP/s for N 4096 K 7168, 916 for N 7168
    K 2048); the trace's 81 + 39 us is 742 / 771 TFLOP/s.

rackplan's side: `decode_step` (sim/cost/step.py) of one micro-batch (64 sequences, MTP 1, context 4,096, DEP128
on h800 without DBO), each op's seconds over the layers that run it. Profiles: datasheet (h800's default),
h100-sxm-vllm (the closest measured one: H800 is H100 SXM compute and HBM, configs/hardware/h800.yaml) and
h200-sxm-vllm. A ratio is rackplan / trace: above 1, rackplan prices the op slower than DeepSeek ran it.

The prefill trace (EP32, 16,384 tokens a GPU of 4K prompts, two micro-batches) has no per-kernel reading the
project could find, so its part prints rackplan's per-layer price of that step (DEP32, four 4,096-token prompts a
rank, h800) with each compute op's FLOP rate, beside the rate its kernel publishes for that shape (DeepGEMM README,
Feb 2025: contiguous grouped GEMM 4 groups x M 8192, 1,297 / 1,099 TFLOP/s for N4096 K7168 / N7168 K2048; normal
GEMM at M 4096, the MLA projections' own rows). No dense MHA prefill rate on Hopper is published by DeepSeek.

Run:  python benchmarks/deepseek_trace_check.py
"""
from __future__ import annotations

import sys

from rackplan.sim.cost.step import CostContext, decode_step, op_layers, prefill_step
from rackplan.specs import load_hardware, load_model, load_profile
from rackplan.specs.layout import Layout, Speculation

SOURCE = "https://zdszero.github.io/Computer/Artificial_Intelligence/deepseek_profile.html (h800 ds prof)"
SEQS, QUERIES, CONTEXT, EP = 64, 2, 4096, 128  # one micro-batch of the trace (module docstring)
PROFILES = ("datasheet", "h100-sxm-vllm", "h200-sxm-vllm")
CLOSEST = "h100-sxm-vllm"  # H800 = H100 SXM compute and HBM
FLASHMLA_TFLOPS = 580.0  # FlashMLA README at release (Feb 2025, CUDA 12.6), dense decode, H800, compute-bound
DEEPGEMM_MASKED_TFLOPS = (1040.0, 916.0)  # DeepGEMM README masked layout, 2 groups x M 512: (N4096 K7168, N7168 K2048)
DEEPGEMM_CONTIGUOUS_TFLOPS = (1297.0, 1099.0)  # DeepGEMM README contiguous layout, 4 groups x M 8192: the same two
PREFILL_EP, PREFILL_PROMPTS, PREFILL_ISL = 32, 4, 4096  # the prefill trace: EP32, 16,384 tokens a GPU of 4K prompts

# The trace's kernels per layer and micro-batch (us), grouped as rackplan's op classes. None: not in the reading.
TRACE_US: dict[str, tuple[float | None, str]] = {
    "attn.core": (255.0, "FlashMLA decode"),
    "attn.proj": (13.0 + 19.0 + 16.0 + 15.0 + 50.0, "q_a/kv_a 13, q_b 19, absorbed bmm 16 + 15, o_proj 50 (DeepGEMM)"),
    "norm": (4.0 + 2.0 + 3.0, "input norm 4, latent norm 2, post-attention norm 3"),
    "rope": (7.0, "rotary 7"),
    "quantize": (2.0 + 5.0, "per-token-group FP8 quant before q_b 2 and o_proj 5"),
    "router": (6.0 + 2.0 + 8.0, "gate GEMM 6 + split-K reduce 2 + top-k 8"),
    "moe.experts": (81.0 + 8.0 + 39.0, "DeepGEMM masked up/gate 81, SiLU-and-mul 8, down 39"),
    "moe.dispatch": (187.0, "DeepEP LL dispatch kernel span"),
    "moe.combine": (394.0, "DeepEP LL combine kernel span"),
    "shared_expert": (None, "not in the part of the reading seen"),
    "sample": (None, "not in the reading"),
    "gaps": (None, "not in the reading"),
}
# rackplan ops folded into a trace class (rackplan prices the top-k apart from the gate GEMM)
FOLD = {"router": ("router", "moe.route")}
TRACE_LAYERS_MS = 87.32  # the same reading: the 61 layers of one step (both micro-batches), ms


def shape_context(profile: str, dbo: bool = False) -> CostContext:
    """DeepSeek-V3 decode DEP128 with MTP 1 on h800 under `profile` (the trace's layout)."""
    lay = Layout(role="decode", dp=EP, dbo=dbo, speculation=Speculation(1, 1.8))
    return CostContext(load_model("deepseek-v3"), load_hardware("h800"), lay, load_profile(profile), 0.0)


def per_layer_us(profile: str) -> dict[str, tuple[float, float]]:
    """{op: (us per layer, FLOPs per layer)} of one trace micro-batch priced under `profile`."""
    cx = shape_context(profile)
    step = decode_step(cx, SEQS, SEQS * CONTEXT)
    out: dict[str, tuple[float, float]] = {}
    for op in step.ops:
        n = op_layers(cx.model, op.name)
        out[op.name] = (op.seconds / n * 1e6, op.flops / n)
    return out


def trace_class_us(priced: dict[str, tuple[float, float]], name: str) -> float:
    """rackplan's us per layer of trace class `name` (FOLD sums several ops into one class)."""
    return sum(priced.get(op, (0.0, 0.0))[0] for op in FOLD.get(name, (name,)))


def attention_flops() -> float:
    """FLOPs of one layer's attention core in one trace micro-batch: 2 x seqs x queries x heads x ctx x (qk + v)."""
    return 2.0 * SEQS * QUERIES * 128 * CONTEXT * (576 + 512)


def expert_flops() -> tuple[float, float]:
    """(up/gate, down) FLOPs of one rank's routed experts in one micro-batch: 2 experts x 512 tokens each."""
    tokens = SEQS * QUERIES * 8 * EP / 256 * 2  # 512 tokens on each of the rank's 256 / 128 = 2 experts
    return 2.0 * tokens * 7168 * 4096, 2.0 * tokens * 2048 * 7168


def up_down_rate(up_down_tflops: tuple[float, float]) -> float:
    """One rate for an expert's up/gate GEMM then its down GEMM (FLOPs 2 : 1) from each GEMM's own rate."""
    up, down = up_down_tflops
    return 3.0 / (2.0 / up + 1.0 / down)


def prefill_per_layer(profile: str) -> dict[str, tuple[float, float]]:
    """{op: (us per layer, FLOPs per layer)} of the prefill trace's step on one rank under `profile` (both
    micro-batches, priced as one step without DBO: the ops' own work)."""
    lay = Layout(role="prefill", dp=PREFILL_EP, max_tokens_per_step=PREFILL_PROMPTS * PREFILL_ISL)
    cx = CostContext(load_model("deepseek-v3"), load_hardware("h800"), lay, load_profile(profile), 0.0)
    step = prefill_step(cx, [float(PREFILL_ISL)] * PREFILL_PROMPTS)
    return {op.name: (op.seconds / op_layers(cx.model, op.name) * 1e6, op.flops / op_layers(cx.model, op.name))
            for op in step.ops}


def main() -> int:
    priced = {p: per_layer_us(p) for p in PROFILES}
    print(f"DeepSeek H800 decode trace ({SOURCE}), one micro-batch of {SEQS} x {QUERIES} queries at context "
          f"{CONTEXT:,}, DEP{EP}; us per layer; ratio = rackplan / trace")
    print(f"{'op class':14s} {'trace':>7s} " + " ".join(f"{p:>22s}" for p in PROFILES) + "   trace kernels")
    for name, (us, kernels) in TRACE_US.items():
        cells = []
        for p in PROFILES:
            ours = trace_class_us(priced[p], name) if name != "gaps" else 0.0
            cells.append(f"{ours:9.1f} ({ours / us:5.2f}x)" if us else f"{ours:9.1f}   (n/a)")
        print(f"{name:14s} {us if us else 'n/a':>7} " + " ".join(f"{c:>22s}" for c in cells) + f"   {kernels}")
    fl = attention_flops()
    up, down = expert_flops()
    print(f"\nattention core: {fl / 1e9:.1f} GFLOP a layer; trace {fl / 255e-6 / 1e12:.0f} TFLOP/s (FlashMLA README "
          f"{FLASHMLA_TFLOPS:.0f}); " + ", ".join(
              f"{p} {fl / (priced[p]['attn.core'][0] * 1e-6) / 1e12:.0f}" for p in PROFILES))
    print(f"routed experts: up/gate {up / 1e9:.1f} + down {down / 1e9:.1f} GFLOP; trace {up / 81e-6 / 1e12:.0f} / "
          f"{down / 39e-6 / 1e12:.0f} TFLOP/s (DeepGEMM masked README {DEEPGEMM_MASKED_TFLOPS[0]:.0f} / "
          f"{DEEPGEMM_MASKED_TFLOPS[1]:.0f}); rackplan both GEMMs and the activation at "
          + ", ".join(f"{p} {(up + down) / (priced[p]['moe.experts'][0] * 1e-6) / 1e12:.0f}" for p in PROFILES))
    print(f"\nwhole step, 128 sequences a GPU with DBO: trace's 61 layers {TRACE_LAYERS_MS:.2f} ms (same reading)")
    for p in PROFILES:
        s = decode_step(shape_context(p, dbo=True), 2 * SEQS, 2 * SEQS * CONTEXT)
        bd = s.breakdown()
        layers = sum(v for k, v in bd.items() if k not in ("lm_head", "sample", "draft", "host.exposed"))
        print(f"  {p:14s} step {s.seconds * 1e3:7.2f} ms, its layers {layers * 1e3:7.2f} ms "
              f"({layers * 1e3 / TRACE_LAYERS_MS:.2f}x; DBO hides {-bd.get('dbo.overlap', 0.0) * 1e3:.2f} ms)")
    print(f"\nprefill trace's step ({PREFILL_PROMPTS} x {PREFILL_ISL:,}-token prompts a rank, DEP{PREFILL_EP}, both "
          "micro-batches): us per layer (TFLOP/s)")
    pre = {p: prefill_per_layer(p) for p in PROFILES}
    names = sorted(pre[CLOSEST], key=lambda n: -pre[CLOSEST][n][0])
    for name in names:
        cells = []
        for p in PROFILES:
            us, fl = pre[p].get(name, (0.0, 0.0))
            cells.append(f"{us:9.1f}" + (f" ({fl / (us * 1e-6) / 1e12:5.0f})" if fl and us else " " * 8))
        print(f"{name:14s} " + " ".join(f"{c:>22s}" for c in cells))
    print("routed experts' kernel (DeepGEMM contiguous README): "
          f"{up_down_rate(DEEPGEMM_CONTIGUOUS_TFLOPS):.0f} TFLOP/s for up/gate + down; decode's masked: "
          f"{up_down_rate(DEEPGEMM_MASKED_TFLOPS):.0f} (the trace's "
          f"{sum(expert_flops()) / 120e-6 / 1e12:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
