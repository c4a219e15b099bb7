"""The KV room vLLM logs against the one sim/cost/memory.py gives: "Available KV cache memory" and "Model loading
took" from published vLLM startup logs, beside the model's figures for the same layout, and the three terms between
them (issue 35, mechanisms 7/8; benchmarks/RESULTS.md "2026-12-07 session 20, kvroom").

vLLM's worker sizes its KV cache as (vllm/v1/worker/gpu_worker.py determine_available_memory)
    available = gpu_memory_utilization x total - (weights + profile-run torch peak increase + non-torch increase)
where total is torch.cuda.mem_get_info()'s total. sim/cost/memory.py prices
    available = memory_fraction x hbm_bytes - resident weights - max_tokens_per_step x hidden x 32 B.
Each log row splits the difference into those three terms:
- total: the engine's total (GiB the CUDA driver reports) against HardwareSpec.hbm_bytes (the datasheet's GB);
- weights: "Model loading took" against weight_bytes_per_rank, and the bytes of the engine's MXFP4 expert layout
  (`mxfp4_loaded_bytes`: the checkpoint's tensors with the kernel's padding, and what the Triton path keeps
  twice, read from vLLM's mxfp4.py);
- working memory: what is left, gpu_memory_utilization x total - logged weights - logged available, against the
  model's activation term.
Nothing here changes the simulator: the terms are readings, to be landed together (each alone moves figures the
wrong way, RESULTS.md session 20 kvmem).

Run:  python benchmarks/investigations/kv_room_logs.py [--json]
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

from rackplan.sim.cost.memory import ACTIVATION_BYTES_PER_TOKEN_HIDDEN, memory_fraction, resident_bytes
from rackplan.specs import load_hardware, load_model
from rackplan.specs.layout import Layout
from rackplan.specs.model import ModelSpec

GIB = 2.0**30


@dataclass(frozen=True)
class LogReading:
    """One published vLLM startup: its settings and what it logged (GiB; None where the log does not say)."""

    source: str  # URL of the log
    version: str  # vLLM version the log names
    model: str  # configs/models name
    hardware: str  # configs/hardware name
    tp: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    max_num_seqs: int
    total_gib: float  # torch.cuda.mem_get_info() total on that GPU type, and where that figure is from
    total_source: str
    mxfp4_backend: str  # "marlin" / "triton" / "" (not MXFP4)
    loaded_gib: float | None  # "Model loading took X GiB"
    available_gib: float | None  # "Available KV cache memory: X GiB"


# H100 80GB HBM3: PyTorch's OOM message "GPU 0 has a total capacity of 79.11 GiB" (vllm-project/vllm issue 27508),
# the cudaMemGetInfo total vLLM's budget multiplies.
H100_TOTAL_GIB = 79.11
LOGS = (
    # vLLM 0.10.1, default args (`non-default args: {'model_tag': 'openai/gpt-oss-120b', ...}`), "Chunked prefill is
    # enabled with max_num_batched_tokens=8192", "Overriding max cuda graph capture size to 1024" (max_num_seqs 1024
    # [inferred: the capture size follows max_num_seqs]), marlin_utils_fp4.py "Weight-only FP4 compression will be
    # used leveraging the Marlin kernel", "Model loading took 65.9651 GiB", "Available KV cache memory: -2.14 GiB".
    LogReading("https://github.com/vllm-project/vllm/issues/23278", "0.10.1", "gpt-oss-120b", "h100-sxm", 1, 0.9,
               8192, 1024, H100_TOTAL_GIB, "vllm issue 27508 (same GPU type)", "marlin", 65.9651, -2.14),
    # `vllm serve openai/gpt-oss-120b --gpu-memory-utilization 0.95 --max-num-batched-tokens 1024` (2025-10-31, version
    # not in the excerpt read: v0.11.x [inferred from the date]), "Available KV cache memory: 1.71 GiB"; loading
    # figure and backend not in the excerpt read.
    LogReading("https://github.com/vllm-project/vllm/issues/27508", "0.11.x [inferred]", "gpt-oss-120b", "h100-sxm",
               1, 0.95, 1024, 1024, H100_TOTAL_GIB, "the same issue's OOM message", "", None, 1.71),
    # vLLM 0.14.1, "mxfp4.py:165 Using Triton backend", "Model loading took 64.38 GiB memory".
    LogReading("https://github.com/vllm-project/vllm/issues/33155", "0.14.1", "gpt-oss-120b", "h100-sxm", 1, 0.9,
               8192, 1024, H100_TOTAL_GIB, "vllm issue 27508 (same GPU type)", "triton", 64.38, None),
    # vLLM 0.8.5, Qwen/Qwen3-30B-A3B (BF16) on 4 x A10, TP4: "Model loading took 14.2474 GiB" on each rank (a weights
    # check for a BF16 MoE; the A10 is no configs/hardware GPU, so no total / available row).
    LogReading("https://github.com/vllm-project/vllm/issues/17469", "0.8.5", "qwen3-30b-a3b", "h100-sxm", 4, 0.9,
               8192, 256, math.nan, "A10: not modelled", "", 14.2474, None),
)


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


# Padding of the MXFP4 experts' dims in vLLM's Mxfp4MoEMethod.create_weights
# (vllm/model_executor/layers/quantization/mxfp4.py, read at commit 007d50058a06dec0f82472d63c819244d460c40d):
# Marlin "requires that for each linear n % 256 == 0 and k % 128 == 0": intermediate round_up(., 128), hidden
# round_up(., 256); the SM100 FlashInfer TRT-LLM / BF16 backends 256 and 256; the CUTLASS / SM90 FlashInfer BF16
# backends 128 and 128; the Triton (triton_kernels) backend rounds the intermediate to 64 and keeps the hidden size
# (its swizzle in process_weights_after_loading, mxfp4_utils._swizzle_mxfp4, may pad further: not read).
MXFP4_PAD = {"marlin": (256, 128), "flashinfer_trtllm": (256, 256), "flashinfer_cutlass": (128, 128),
             "triton": (1, 64)}  # backend -> (hidden alignment, intermediate alignment)
MXFP4_BLOCK = 32  # one uint8 E8M0 scale per 32 weights (create_weights: `hidden_size // mxfp4_block`)


def mxfp4_expert_bytes(model: ModelSpec, backend: str, tp: int = 1) -> float:
    """Bytes of one rank's routed experts as vLLM allocates them for MXFP4 on `backend` (TP-sharded intermediate, no
    EP): per expert and layer, w13 [2 I', H'/2] + scales [2 I', H'/32] + BF16 bias [2 I'] and w2 [H', I'/2] + scales
    [H', I'/32] + BF16 bias [H'] (create_weights' shapes), I' and H' padded to the backend's alignment."""
    ha, ia = MXFP4_PAD[backend]
    h = _round_up(model.hidden_size, ha)
    i = _round_up(model.moe.expert_intermediate // tp, ia)
    per_expert = (2 * i * h + h * i) * (0.5 + 1.0 / MXFP4_BLOCK) + (2 * i + h) * 2.0
    return per_expert * model.moe.num_experts * model.num_moe_layers


def mxfp4_loaded_bytes(model: ModelSpec, backend: str, tp: int = 1) -> float:
    """Bytes of one rank's routed experts after vLLM's process_weights_after_loading: the allocated layout
    (`mxfp4_expert_bytes`), and on Triton also what that backend keeps twice. Its branch (mxfp4.py, same commit)
    swizzles the values and scales (`_swizzle_mxfp4`), deletes and replaces layer.w13_weight / w2_weight, but
    keeps layer.w13_weight_scale / w2_weight_scale while the swizzled scales live in w13/w2_precision_config:
    a second copy of every scale (its swizzle padding not counted here); the biases become float32 copies
    (`layer.w13_bias.to(torch.float32)`): 4 B in place of 2 B each."""
    total = mxfp4_expert_bytes(model, backend, tp)
    if backend != "triton":
        return total
    ha, ia = MXFP4_PAD[backend]
    h = _round_up(model.hidden_size, ha)
    i = _round_up(model.moe.expert_intermediate // tp, ia)
    per_expert = 3 * i * h / MXFP4_BLOCK + (2 * i + h) * 2.0  # the kept scales + the biases' extra 2 B
    return total + per_expert * model.moe.num_experts * model.num_moe_layers


def checkpoint_expert_bytes(model: ModelSpec) -> float:
    """The same tensors unpadded (the checkpoint's own shapes), for the padding's share."""
    h, i = model.hidden_size, model.moe.expert_intermediate
    return ((3 * i * h) * (0.5 + 1.0 / MXFP4_BLOCK) + (2 * i + h) * 2.0) * model.moe.num_experts * model.num_moe_layers


# Bytes per element of the live tensors at the peak of vLLM's dummy sampler run (gpu_model_runner.py
# `_dummy_sampler_run`, v0.10-era: logits of min(max_num_seqs, max_num_batched_tokens) dummy requests, temperature 0.5,
# top_k = vocab - 1, top_p = 0.9, no logprobs, no penalties) on the PyTorch-native top-k/top-p path
# (vllm/v1/sample/ops/topk_topp_sampler.py `apply_top_k_top_p`: `logits.sort`, top-k mask, `softmax` + in-place
# `cumsum`, top-p mask, `scatter_` back), read in the vLLM source index [secondary: not read at the v0.10.1 tag]:
# the model's BF16 logits (2 B, still referenced by the caller) + their float32 copy (Sampler.forward
# `logits.to(torch.float32)`, 4 B) + the sorted values (4 B) + the sort's int64 indices (8 B) + the top-k bool mask
# (1 B: `top_k_mask = logits_sort < top_k_mask` stays bound to the end of the function) + the top-p softmax (4 B,
# its cumsum written in place) + the top-p bool mask (1 B) = 24 B per (request, vocab) element. Later,
# q = exponential_ of a float32 probs copy holds less (2 + 4 + 4 + 4 = 14 B).
SAMPLER_PEAK_BYTES_PER_LOGIT = 2 + 4 + 4 + 8 + 1 + 4 + 1


def sampler_peak_bytes(model: ModelSpec, max_num_seqs: int, max_num_batched_tokens: int) -> float:
    """The dummy sampler run's peak (bytes): SAMPLER_PEAK_BYTES_PER_LOGIT x its requests x the vocabulary."""
    return SAMPLER_PEAK_BYTES_PER_LOGIT * min(max_num_seqs, max_num_batched_tokens) * model.vocab_size


def row(log: LogReading) -> dict:
    """The log's figures beside the model's (GiB), and each term's gap."""
    model, hw = load_model(log.model), load_hardware(log.hardware)
    lay = Layout(role="both", dp=1, tp=log.tp, expert_parallel=False, max_tokens_per_step=log.max_num_batched_tokens,
                 max_batch_per_rank=log.max_num_seqs, gpu_memory_utilization=log.gpu_memory_utilization)
    frac = memory_fraction(lay)
    weights = resident_bytes(model, lay) / GIB
    act = log.max_num_batched_tokens * model.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN / GIB
    model_total = hw.hbm_bytes / GIB
    out = {"source": log.source, "version": log.version, "model": log.model, "tp": log.tp,
           "gpu_memory_utilization": frac, "max_num_batched_tokens": log.max_num_batched_tokens,
           "model_total_gib": model_total, "engine_total_gib": log.total_gib,
           "model_weights_gib": weights, "logged_weights_gib": log.loaded_gib,
           "model_activations_gib": act, "model_available_gib": frac * model_total - weights - act,
           "sampler_peak_gib": sampler_peak_bytes(model, log.max_num_seqs, log.max_num_batched_tokens) / GIB,
           "logged_available_gib": log.available_gib}
    if log.mxfp4_backend:
        experts_model = checkpoint_expert_bytes(model) / GIB
        engine = mxfp4_loaded_bytes(model, log.mxfp4_backend, log.tp) / GIB
        out["engine_layout_weights_gib"] = weights - experts_model + engine
    if "engine_layout_weights_gib" in out and not math.isnan(log.total_gib):
        # the three readings together (forward activations and the sampler's peak do not overlap: the larger)
        out["readings_available_gib"] = (frac * log.total_gib - out["engine_layout_weights_gib"]
                                         - max(act, out["sampler_peak_gib"]))
    if log.loaded_gib is not None and log.available_gib is not None and not math.isnan(log.total_gib):
        # what the profile run took beyond the weights: fraction x total - weights - available
        out["logged_working_gib"] = frac * log.total_gib - log.loaded_gib - log.available_gib
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kv_room_logs.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="rows as JSON")
    args = p.parse_args(argv)
    rows = [row(g) for g in LOGS]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0

    def f(v):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"

    print(f"{'log':8} {'model':14} {'tp':>2} {'frac':>4} {'tokens':>6} | {'total GiB model/engine':>22} | "
          f"{'weights GiB model/layout/logged':>31} | {'working GiB model/sampler/logged':>32} | "
          f"{'available GiB model/readings/logged':>35}")
    for r in rows:
        tag = r["source"].rsplit("/", 1)[-1]
        print(f"{tag:8} {r['model']:14} {r['tp']:2d} {r['gpu_memory_utilization']:4.2f} "
              f"{r['max_num_batched_tokens']:6d} | "
              f"{f(r['model_total_gib']):>10} / {f(r['engine_total_gib']):>9} | "
              f"{f(r['model_weights_gib']):>9} / {f(r.get('engine_layout_weights_gib')):>8} / "
              f"{f(r['logged_weights_gib']):>8} | {f(r['model_activations_gib']):>11} / "
              f"{f(r['sampler_peak_gib']):>8} / {f(r.get('logged_working_gib')):>9} | "
              f"{f(r['model_available_gib']):>12} / {f(r.get('readings_available_gib')):>9} / "
              f"{f(r['logged_available_gib']):>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
