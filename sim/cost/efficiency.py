"""Kernel efficiency over shape: the fraction of a datasheet peak one op reaches.

These functions are the only readers of a profile's efficiency parameters. A measured profile
(`rackplan calibrate --op-database`, configs/profiles/*-vllm.yaml) holds per op class one `Curve`
or a few (kernel configurations: the class runs at the best of them, or, where the curves carry x
ranges, at the one its dispatch picks for that x), fitted from per-op kernel
tables (calibration/opdb.md); an op class without curves uses the ones its profile's
`fallbacks` names, then the dtype family's curve (fp8_block -> fp8, nvfp4/mxfp4 -> fp4), then the
scalar datasheet form (gemm_eff_max, gemm_m_half, attn_eff, mem_eff, mem_bytes_half). Arguments are
floats or numpy arrays of one shape; every function is pure.

What a curve's x, y, z and work are, per op class (formula in rackplan.specs.Curve):

  op class                     x                y            z     work             fraction of
  gemm.<dtype>                 rows m           n            k     2 m n k          peak FLOP/s
  experts.<dtype>              rows per expert  n            k     FLOPs on rank    peak FLOP/s   (load: below)
  moe.route.<dtype>            tokens in        hidden       -     bytes read       HBM B/s
  attn.<phase>.<kind>.<dtype>  context          FLOPs/seq    FLOPs/(seq x head)  FLOPs  peak FLOP/s
  allreduce.tp<N>              bytes reduced    -            -     bytes reduced    scale-up B/s
  quantize.<dtype>, mhc.<part> rows             columns      -     bytes moved      HBM B/s

A compute curve is fitted so that the roofline, max(FLOPs / (peak x eff), bytes / (HBM x mem_eff)),
reproduces the measured time; where a kernel runs below its bandwidth bound too (small decode
attention) the compute curve carries that. A weight GEMM's curve is the whole kernel
(roofline.price_gemm): its x-term is the GEMM's own weight read, its y- and z-terms its activation
traffic, fitted on whole-kernel times, so the generic streaming side (mem_eff) is not applied to it.
The attention curve's y-term is a cost per sequence, its z-term a cost per (sequence, query head) on
the rank (FlashAttention-style kernels run a thread block per sequence, head and query tile) and its
work term a fixed cost per kernel, all in FLOP units of the same peak. A curve bounded to a range of x
(Curve.x_min / x_max), of y (y_min / y_max), of z (z_min / z_max), of work (work_min / work_max) or of
load (load_min / load_max: the routed experts' average rows per local expert as the MoE kernel's tile
heuristic computes it, every token entering the rank times top-k over the rank's experts, sim/cost/moe.py
`tile_load`) prices only ops inside it (`in_ranges`, the one range check): a dispatch's kernel
configurations, e.g. vLLM's FP8 GEMM tiles by m (and by n on SM90, by k on SM100), FlashInfer's MoE tile_N
by load, the kernels vLLM's all-reduce picks by message size (one-shot, two-shot, symmetric memory, NCCL),
a streaming op's working set in or out of L2 (its efficiency, a fraction of HBM, may then exceed 1).
A weight GEMM curve may also name a tile rule (Curve.tile_rule, sim/cost/deepgemm.py: DeepGEMM's SM90
configuration choice), which needs the GPU's SM count (`sms`, HardwareSpec.num_sms; without it, an error):

  field        meaning
  tile_rule    the rule's padded work over m and n (the tiles it picks for (m, n, k)) is the pad term
  rule_group   the curve holds only the shapes the rule puts in this configuration group (0: every group)

A curve's row term (Curve.row_half, chunk_half per z_chunk of z) is work each row of x does whatever y, beside the
y- and z-terms (a weight GEMM: seconds per row of m at every n; vLLM's per-tensor FP8 linear, calibration/opdb_ops.py
FP8_ROW_CHUNK); it is worked out once per op in `bind`, 0 for a curve without it.

A GEMM of a dtype whose own curves hold only some shapes (ranges, a rule_group) and which none of them holds is
priced by the dtype family's curves (`family_curve`: gemm.fp8_block on SM90 at m < 32 by gemm.fp8).
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from rackplan.specs import Curve, Profile, SpecError
from rackplan.specs.hardware import DTYPE_FAMILY

from .deepgemm import rule_at

# Without a measured curve: ring/one-shot all-reduce bus bandwidth of NCCL and vLLM's custom
# all-reduce is typically ~70% of NVLink at large messages, latency-bound below ~1 MB (typical
# figures, as in configs/profiles/datasheet.yaml; a measured profile replaces them).
ALLREDUCE_DATASHEET = (Curve(eff_max=0.7, work_half=1.0e6),)
TILE = 128.0  # output tile edge (rows, columns) the occupancy term counts in
# Weight formats whose kernel is its own, measured apart from the compute dtype's (experts.<format> for routed
# experts, gemm.<format> for dense GEMMs; a profile without that class prices by the family's). Experts: vLLM
# runs a block-scaled FP8 checkpoint (DeepSeek-V3/R1/V3.2: 128x128 weight scales, README_WEIGHTS.md)
# with Fp8MoEMethod's block-quantised kernel, which the per-op tables time as moe_dtype fp8_block;
# their moe_dtype fp8 rows are a different kernel (ModelOpt per-tensor FP8), 4-5x slower at decode
# sizes on H200 (benchmarks/RESULTS.md, 2026-12-01 "why the measured profiles price decode slowly").
# vLLM runs MXFP4 experts (DeepSeek-V4/V4.1: expert_dtype "fp4", MXFP4 with UE8M0 scales) with
# Mxfp4MoEMethod (vllm model_executor/models/deepseek_v4.py, DeepseekV4FP8Config.get_quant_method); on SM100
# its oracle (fused_moe/oracle/mxfp4.py, select_mxfp4_moe_backend) picks FlashInfer's TRT-LLM MXFP4 MoE, and
# V4's routing (sqrtsoftplus, hash layers: not Renormalize) takes its modular form, TrtLlmMxfp4ExpertsModular
# (fused_moe/experts/trtllm_mxfp4_moe.py: trtllm_fp4_block_scale_routed_moe), the kernel the tables time as
# moe_dtype w4a8_mxfp4_mxfp8 (experts.mxfp4, on V4-Flash's expert shape), with MXFP8 activations; the fp4
# rows (experts.fp4) are the NVFP4 x NVFP4 kernel. The peak stays the fp4 family's (hw.flops_for), as fitted.
# Dense GEMMs: vLLM's block-FP8 linear runs DeepGEMM's fp8_gemm_nt on SM100 and on SM90 at m >= 32 (gemm.fp8_block,
# measured from the graph-timed SGLang table: calibration/opdb_import.py GRAPH_TIMED_SOURCE; on SM90 through
# DeepGEMM's configuration choice, sim/cost/deepgemm.py), not the per-tensor CUTLASS kernel.
KERNEL_FORMATS = {"fp8_block": "fp8", "mxfp4": "fp4"}  # weight format -> the compute dtype it runs in
# Weight-only kernels: 4-bit weights dequantised in the kernel and computed in BF16, timed apart from the BF16 kernel
# (experts.<key>; a profile without that class prices them by the compute dtype's curve at the format's bytes, as
# before). gpt-oss's MXFP4 experts on Hopper: vLLM runs OpenAI's Triton matmul_ogs MoE (vLLM blog 2025-08-05 "vLLM
# Now Supports gpt-oss": "Hopper GPUs (e.g., H100, H200): Triton matmul_ogs"), which the op tables time as moe_dtype
# w4a16_mxfp4 (kernel vllm_gptossmxfp4moe_triton_oaitritonmxfp4experts..., gpt-oss's own expert shapes); at 8 to
# 2,048 tokens it runs 2-3x faster than the BF16 kernel's curve at MXFP4 bytes (benchmarks/gpustack_steps.py).
WEIGHT_ONLY_KERNELS = {("mxfp4", "bf16"): "mxfp4_bf16"}
# MoE backends (Layout.moe_backend, else the layout's engine's default, ENGINE_BACKEND): a routed-experts kernel other
# than the one a measured profile's experts.<dtype> class times (vLLM's), priced by experts.<dtype>.<class> (and
# moe.route.<dtype>.<class>) per all-to-all kernel, where the profile measures that class; elsewhere (no such class, a
# datasheet profile, no DeepEP exchange) the dtype's class prices it, as before.
# deepgemm: DeepGEMM's FP8 grouped GEMMs behind DeepEP (SGLang's DeepEPMoE, sglang srt/layers/moe/ep_moe/layer.py:
# m_grouped_fp8_gemm_nt_contiguous after the normal dispatch, m_grouped_fp8_gemm_nt_masked after the low-latency one),
# for block-scaled FP8 weights, fitted on SGLang's wideep MoE tables (calibration/opdb_ops.py DEEPEP_TABLES).
# marlin: vLLM's fused_marlin_moe on MXFP4 weights computed in BF16 (weight-only), without DeepEP (the "" kernel: a
# TP / all-gather MoE), fitted on that kernel's rows of vLLM's moe_perf table (calibration/opdb_ops.py
# VLLM_BACKEND_KERNELS). vLLM 0.10.2 (the wheel's model_executor/layers/quantization/mxfp4.py get_mxfp4_backend) runs it
# for MXFP4 experts on SM90 unless `triton_kernels` imports ("if ... not has_triton_kernels() ...: Using Marlin
# backend"; FlashInfer's SM90 MXFP4 path only under VLLM_USE_FLASHINFER_MOE_MXFP4_BF16, default 0, envs.py); vLLM's
# wheel did not ship or require triton_kernels before it was vendored (vLLM PR #28788, 2025-11-18; PR #27370,
# 2025-10-22: "users have to install triton_kernels manually to access this code-path").
# triton_default: the Triton fused_moe kernel at its untuned default configuration, where the engine ships no tuned
# config file for the layout's expert shape and GPU (vLLM 0.11.0 BF16: 64 x 64 x 32 tiles once the step's tokens exceed
# the experts; calibration/opdb_ops.py SGLANG_TUNED_BF16 says where the rows come from), with or without an all-to-all
# ("" : none), fitted on SGLang's moe_perf rows at shapes it ships no config for (opdb_ops.triton_default_expert_rows).
BACKENDS = {"deepgemm": {"fp8_block": {"high_throughput": "deepgemm", "low_latency": "deepgemm_masked"}},
            "marlin": {"mxfp4_bf16": {"": "marlin"}},
            "triton_default": {"bf16": dict.fromkeys(("", "high_throughput", "low_latency"), "triton_default")}}
# Each engine's default MoE backend behind DeepEP (documented defaults, not fitted). SGLang: DeepEPMoE takes DeepGEMM's
# path for FP8 block weights when DeepGEMM's JIT is on (sglang srt/layers/deep_gemm_wrapper/configurer.py
# ENABLE_JIT_DEEPGEMM: SM90 or newer with deep_gemm installed, SGLANG_ENABLE_JIT_DEEPGEMM default on). vLLM: none here
# (its FP8 block MoE kernel is the profile's own experts.fp8_block class, fitted on vLLM's tables), except on Hopper.
ENGINE_BACKEND = {"sglang": "deepgemm"}
# Engine defaults by compute capability. vLLM 0.11.0 on SM90 behind DeepEP (quantization/fp8.py): Fp8MoEMethod sets
# allow_deep_gemm for block-quantised weights where VLLM_USE_DEEP_GEMM (default "1", envs.py) and deep_gemm imports
# (llm-d's images install it; its wide-EP manifests also set VLLM_USE_DEEP_GEMM=1) and the GPU is SM90 / SM100
# (utils/deep_gemm.py is_deep_gemm_supported); `select_gemm_impl` then returns BatchedTritonOrDeepGemmExperts
# (DeepGEMM's masked grouped GEMM) after the low-latency dispatch and TritonOrDeepGemmExperts (the contiguous one)
# after the high-throughput dispatch (VLLM_USE_FLASHINFER_MOE_FP8 default "0"). SM100 is left out: the Blackwell
# vLLM cases run later releases, whose FlashInfer MoE paths this source does not settle.
ENGINE_HW_BACKEND = {("vllm", 9): "deepgemm"}


def _engine(layout) -> str:
    """The layout's serving engine (Layout.engine; None: vllm)."""
    return layout.engine or "vllm"


def _family(hw) -> int:
    """`hw`'s compute-capability family, the major version (9: Hopper SM90; 10: Blackwell SM100 / SM103; 0: not
    stated): the key of the ENGINE_*_BACKEND tables."""
    return hw.compute_capability // 10


def expert_backend(layout, hw=None) -> str | None:
    """The layout's MoE backend: its `moe_backend`, else its engine's default (ENGINE_BACKEND, then ENGINE_HW_BACKEND
    on `hw`'s compute-capability family; None: the engine runs the kernel the profile's experts.<dtype> class
    times)."""
    if layout.moe_backend:
        return layout.moe_backend
    engine = _engine(layout)
    if engine in ENGINE_BACKEND:
        return ENGINE_BACKEND[engine]
    return ENGINE_HW_BACKEND.get((engine, _family(hw))) if hw is not None else None


def check_backend(layout, model, field: str) -> None:
    """A layout's explicit `moe_backend` must run the model's routed experts where the layout puts them: a SpecError
    naming `field` where it does not (a backend for another weight format, or without DeepEP's exchange)."""
    dt = model.dtypes
    w, c = dt.expert_weights, dt.expert_compute_dtype
    kd = WEIGHT_ONLY_KERNELS.get((w, c)) or kernel_dtype(w, c)  # (a weight-only kernel's key whatever the profile)
    runs = BACKENDS[layout.moe_backend]
    if kd not in runs:
        raise SpecError("", field, f"unset for experts of kernel dtype {kd} ({layout.moe_backend} runs "
                        f"{', '.join(runs)} experts)", layout.moe_backend)
    if "" not in runs[kd] and not layout.deepep:
        raise SpecError("", field, f"unset without DeepEP's exchange ({layout.moe_backend} runs behind DeepEP's "
                        "dispatch: ep > 1 over DP ranks, all2all deepep)", layout.moe_backend)
    if layout.deepep and not runs[kd].keys() - {""}:
        raise SpecError("", field, f"unset behind DeepEP's exchange ({layout.moe_backend} is priced without an "
                        "all-to-all: a TP or all-gather MoE)", layout.moe_backend)


def backend_dtype(prof: Profile, dtype: str, backend: str | None, a2a_kernel: str) -> str:
    """The curve dtype of the routed experts of kernel dtype `dtype` behind the all-to-all kernel `a2a_kernel`
    (high_throughput / low_latency; "" without DeepEP): `dtype`.<class> where `backend` runs that dtype there
    (BACKENDS) and `prof` measures its experts curve, else `dtype`."""
    cls = BACKENDS.get(backend or "", {}).get(dtype, {}).get(a2a_kernel)
    if cls is not None and prof.curves.get(f"experts.{dtype}.{cls}") is not None:
        return f"{dtype}.{cls}"
    return dtype


# Attention backends: the dense MLA decode core's kernel where the layout's engine runs one other than the kernel the
# measured profiles' attn.decode.mla curve times (aiconfigurator's vLLM 0.24 module table on Hopper, kernel
# FLASH_ATTN_MLA: FA3's MLA path, also SGLang's Hopper default, sglang model_runner: "if is_hopper_with_cuda_12_3():
# server_args.attention_backend = "fa3""), priced at the kernel's published compute rate as a share of the test GPU's
# dense BF16 peak (a flat efficiency in place of the curve or the datasheet attn_eff; memory as the profile's).
# flashmla: FlashMLA's dense decode kernel, "up to 660 TFlops on NVIDIA H800 SXM5" (deepseek-ai/FlashMLA README,
# performance update 2025.04.22, the kernel for q heads x q tokens >= 64; H800 SXM5 989 TFLOP/s dense BF16,
# configs/hardware/h800.yaml). vLLM 0.11.0's wheel ships it (vllm/_flashmla_C.abi3.so holds sm90
# run_flash_splitkv_mla_kernel beside the Sept 2025 sparse kernels, so the post-April dense kernel).
ATTENTION_BACKEND_EFF = {"flashmla": 660.0 / 989.0}
# Each engine's dense MLA decode backend by compute capability (documented defaults, not fitted). vLLM 0.11.0
# (vllm/platforms/cuda.py): with VLLM_ATTENTION_BACKEND unset, `check_and_update_config` sets "use_flashmla = True"
# on every non-Blackwell GPU and forces block_size 64, and `get_attn_backend_cls` returns FlashMLABackend before
# FlashAttnMLABackend whenever `is_flashmla_supported()` (capability 9 and _flashmla_C built). SGLang: FA3 on Hopper,
# the curve's own kernel (no entry).
ENGINE_ATTENTION_BACKEND = {("vllm", 9): "flashmla"}


def attention_backend(layout, hw, kind: str) -> str | None:
    """The dense MLA decode kernel the layout's engine (None: vllm) runs on `hw` where it is not the one the
    profile's attn.decode curve times (ENGINE_ATTENTION_BACKEND), else None; None for other attention kinds."""
    if kind != "mla":
        return None
    return ENGINE_ATTENTION_BACKEND.get((_engine(layout), _family(hw)))


# Each engine's dense MLA prefill path by compute-capability family (major version) where it differs from the one the
# profile's attn.prefill curve times (SGLang's TRT-LLM ragged kernel, aiconfigurator context_mla_perf). vLLM v0.14.1
# (the wheel's vllm/v1/attention/backends/mla/common.py): `use_flashinfer_prefill()` is true on
# `is_device_capability_family(100)` (B200 / GB200 10.0, B300 / GB300 10.3) unless a config flag turns it off
# (disable_flashinfer_prefill, use_cudnn_prefill, use_trtllm_ragged_deepseek_prefill: all False by default,
# config/attention.py), and runs `BatchPrefillWithRaggedKVCacheWrapper(..., backend="cutlass")`, FlashInfer's
# CUTLASS FMHA. No published rate of that kernel at the (192, 128) head dims was found, so the kernel stays at the
# curve; what the path adds and prices (sim/cost/attention.py prefill_copies) is its per-layer memory traffic:
# `_forward_prefill` materialises K per head (`_concat_k_nope_k_pe`: k_nope [T, H, 128] and the broadcast k_pe
# [T, 1, 64] copied into a fresh [T, H, 192]) and copies the kernel's output into the layer's (`output.copy_`).
ENGINE_PREFILL_BACKEND = {("vllm", 10): "flashinfer_cutlass"}


def prefill_backend(layout, hw, kind: str) -> str | None:
    """The dense MLA prefill path the layout's engine (None: vllm) runs on `hw`'s compute-capability family where it
    is not the one the profile's attn.prefill curve times (ENGINE_PREFILL_BACKEND), else None; None for other kinds."""
    if kind != "mla" or hw is None:
        return None
    return ENGINE_PREFILL_BACKEND.get((_engine(layout), _family(hw)))


def curve(prof: Profile, key: str) -> tuple[Curve, ...] | None:
    """The profile's curves for op class `key`, or those its `fallbacks` names (None: neither)."""
    c = prof.curves.get(key)
    if c is None and key in prof.fallbacks:
        c = prof.curves.get(prof.fallbacks[key])
    return c


def dtype_curve(prof: Profile, op_class: str, dtype: str) -> tuple[Curve, ...] | None:
    """Curve of `op_class` in `dtype`, else in its dtype family (fp8_block -> fp8, mxfp4 -> fp4)."""
    if not prof.curves:
        return None
    c = curve(prof, f"{op_class}.{dtype}")
    if c is None and dtype in DTYPE_FAMILY:
        c = curve(prof, f"{op_class}.{DTYPE_FAMILY[dtype]}")
    return c


def _term(half: float, v):
    """half / v where v > 0, else 0 (an unknown or empty shape drops its term)."""
    if not half:
        return 0.0
    if v.__class__ is float or isinstance(v, (int, float)):  # (the first: the common case, without a tuple check)
        return half / v if v > 0 else 0.0
    v = np.asarray(v, float)
    return np.divide(half, v, out=np.zeros(v.shape), where=v > 0)


def _tiles(v):
    """Output tiles along one edge, at least one."""
    if v.__class__ is float or isinstance(v, (int, float)):
        return max(math.ceil(v / TILE), 1)
    return np.maximum(np.ceil(np.asarray(v, float) / TILE), 1.0)


def evaluate(cs: tuple[Curve, ...], x, y=0.0, z=0.0, work=0.0):
    """Efficiency of an op class at shape (x, y, z) and work: the best of its curves (kernel
    configurations; the engine runs the faster) among those whose x and work ranges hold the op."""
    return evaluate_bound(bind(cs, y, z), x, work)


def bind(cs: tuple[Curve, ...], y=0.0, z=0.0, sms: int = 0) -> tuple:
    """The curves of an op class with the terms of an op's fixed dimensions y, z worked out: for
    `evaluate_bound` (a weight GEMM's n and k, an elementwise op's columns are fixed per op); `sms`: the GPU's SM
    count, which a curve with a tile_rule needs (0: unknown, an error for such a curve)."""
    return tuple([(c, _fixed_terms(c, y, z, sms)) for c in cs])  # (a list first: faster than a generator)


def evaluate_bound(bound: tuple, x, work=0.0, load=0.0):
    """`evaluate` of bound curves (`bind`) at x, work and load (0: unknown, no load range applies)."""
    eff = None
    for c, fixed in bound:
        other = _one(c, fixed, x, work, load)
        if eff is None:
            eff = other
        elif eff.__class__ is float and other.__class__ is float:  # max(eff, other), without the call
            eff = other if other > eff else eff
        else:
            eff = max(eff, other) if isinstance(eff, float) and isinstance(other, float) else np.maximum(eff, other)
    return eff


def _fixed_terms(c: Curve, y, z, sms: int = 0) -> tuple:
    """(y and z terms, output tiles along y, y, z, ranges, sms, row term) of curve c: the parts of _one that x and
    work leave alone; ranges: 0 (c has none), 1 (it has, y and z scalars), 2 (it has, y or z an array)."""
    if c.tile_rule and not sms:
        raise SpecError("hardware", "num_sms", f"the GPU's SM count (a curve with tile_rule {c.tile_rule!r} prices "
                        "by the configuration its kernel picks on that many SMs)", sms)
    ranges = (1 if isinstance(y, (int, float)) and isinstance(z, (int, float)) else 2) if _ranged(c) else 0
    return (_term(c.y_half, y) + _term(c.z_half, z), (_tiles(y) if c.tiles_half else 1), y, z, ranges, sms,
            _row_term(c, y, z))


def _row_term(c: Curve, y, z):
    """Curve c's row term at (y, z): (row_half + chunk_half x ceil(z / z_chunk)) / (y z), the work each row of x
    does whatever y, over the work y z a row does at the peak; 0 where c has none or y or z is unknown (0)."""
    if not (c.row_half or c.chunk_half):
        return 0.0
    if isinstance(y, (int, float)) and isinstance(z, (int, float)):
        if y <= 0 or z <= 0:
            return 0.0
        return (c.row_half + (c.chunk_half * math.ceil(z / c.z_chunk) if c.z_chunk else 0.0)) / (y * z)
    y, z = np.broadcast_arrays(np.asarray(y, float), np.asarray(z, float))
    row = c.row_half + (c.chunk_half * np.ceil(z / c.z_chunk) if c.z_chunk else 0.0)
    known = (y > 0) & (z > 0)
    return np.divide(row, y * z, out=np.zeros(y.shape), where=known)


def _ranged(c: Curve) -> bool:
    """Whether curve c holds only some ops (a range of x, y, z, work, load, or a tile rule's group)."""
    return bool(c.x_min or c.x_max or c.work_min or c.work_max or c.y_min or c.y_max or c.load_min or c.load_max
                or c.z_min or c.z_max or c.rule_group)


def _one(c: Curve, fixed: tuple, x, work, load=0.0):
    """One curve's efficiency at x, work and load, its y and z terms `fixed` (see rackplan.specs.Curve)."""
    b, tiles_y, y, z, ranged, sms, row = fixed
    if ranged != 2 and x.__class__ is float and work.__class__ is float and load.__class__ is float:
        return _one_scalar(c, b, tiles_y, y, z, ranged, sms, row, x, work, load)
    scalar = ranged == 1 and isinstance(x, (int, float)) and isinstance(work, (int, float)) \
        and isinstance(load, (int, float))
    if scalar and not in_ranges(c, x, work, y, load, z, sms):
        return 0.0  # (a scalar op outside the curve's ranges: not evaluated)
    a = _term(c.x_half, x)
    q = c.sharpness
    p = _pad(c.x_tile, x, c.pad_cost) if c.x_tile else (_rule_pad(c, x, y, z, sms) if c.tile_rule else 1.0)
    base = p + a + b if q == 1.0 else (p ** q + a ** q + b ** q) ** (1.0 / q)
    eff = c.eff_max / (base + _term(c.work_half, work) + row)
    if c.tiles_half:
        tiles = _tiles(x) * tiles_y
        eff = eff * tiles / (tiles + c.tiles_half)
    if ranged and not scalar:
        eff = np.where(in_ranges(c, np.asarray(x, float), np.asarray(work, float), np.asarray(y, float),
                                 np.asarray(load, float), np.asarray(z, float), sms), eff, 0.0)
    return eff


def _one_scalar(c: Curve, b: float, tiles_y, y, z, ranged: int, sms: int, row, x: float, work: float,
                load: float) -> float:
    """_one at float x, work and load (y, z scalars): the same operations in the same order, without
    the array cases' type tests (_term, _pad and _tiles written out; per priced op of every new step)."""
    if ranged and not in_ranges(c, x, work, y, load, z, sms):
        return 0.0
    half = c.x_half
    a = (half / x if x > 0 else 0.0) if half else 0.0
    q = c.sharpness
    tile = c.x_tile
    if tile:
        if x <= 0:
            p = 1.0
        else:
            padded = math.ceil(x / tile) * tile
            p = (padded + c.pad_cost * (padded - x)) / x
    else:
        p = _rule_pad(c, x, y, z, sms) if c.tile_rule else 1.0
    base = p + a + b if q == 1.0 else (p ** q + a ** q + b ** q) ** (1.0 / q)
    half = c.work_half
    eff = c.eff_max / (base + ((half / work if work > 0 else 0.0) if half else 0.0) + row)
    if c.tiles_half:
        tiles = max(math.ceil(x / TILE), 1) * tiles_y
        eff = eff * tiles / (tiles + c.tiles_half)
    return eff


def _rule_pad(c: Curve, m, n, k, sms: int):
    """A tile rule's pad term at (m, n, k): 1 + pad_cost (work the chosen tiles do / useful work - 1)."""
    return 1.0 + c.pad_cost * (rule_at(c.tile_rule, m, n, k, sms)[1] - 1.0)


def _pad(tile: float, x, cost: float = 0.0):
    """x padded up to whole tiles of `tile`, each padded row costing 1 + `cost` real rows, over x: the
    compute the tiles do per useful row (1 for x <= 0)."""
    if isinstance(x, (int, float)):
        if x <= 0:
            return 1.0
        padded = math.ceil(x / tile) * tile
        return (padded + cost * (padded - x)) / x
    x = np.asarray(x, float)
    padded = np.ceil(x / tile) * tile
    return np.divide(padded + cost * (padded - x), x, out=np.ones(x.shape), where=x > 0)


def in_ranges(c: Curve, x, work, y=0.0, load=0.0, z=0.0, sms: int = 0):
    """Whether (x, work, y, load, z) lies in curve c's ranges: x_min < x <= x_max, y_min < y <= y_max, work_min
    <= work < work_max, load_min < load <= load_max and z_min <= z < z_max (a zero bound open; an unknown y,
    load or z, 0, in every range; each side as its dispatch compares, calibration/opdb_ops.py), and in its tile
    rule's group (rule_group; (x, y, z) = (m, n, k) on `sms` SMs; an unknown n or k in none), scalar or array."""
    ok = (x > c.x_min) if c.x_min else True
    if c.x_max:
        ok = ok & (x <= c.x_max)
    if c.y_min:
        ok = ok & ((y > c.y_min) | (y <= 0))
    if c.y_max:
        ok = ok & (y <= c.y_max)
    if c.work_min:
        ok = ok & (work >= c.work_min)
    if c.work_max:
        ok = ok & (work < c.work_max)
    if c.load_min:
        ok = ok & ((load > c.load_min) | (load <= 0))
    if c.load_max:
        ok = ok & ((load <= c.load_max) | (load <= 0))
    if c.z_min:
        ok = ok & ((z >= c.z_min) | (z <= 0))
    if c.z_max:
        ok = ok & (z < c.z_max)
    if c.rule_group and ok is not False:  # (a scalar outside the other ranges: the rule not asked)
        if not sms:
            raise SpecError("hardware", "num_sms", f"the GPU's SM count (tile_rule {c.tile_rule!r})", sms)
        ok = ok & (rule_at(c.tile_rule, x, y, z, sms)[0] == c.rule_group)
    return ok

def gemm(prof: Profile, dtype: str, m, n=0.0, k=0.0, sms: int = 0):
    """Weight GEMM [m, k] x [k, n] in `dtype`: saturating in the row count m (skinny decode GEMMs
    are weight-read bound); n = k = 0 (unknown) drops the terms that need them; `sms`: the GPU's SM count
    (HardwareSpec.num_sms), which a curve with a tile_rule needs (0: unknown, an error for such a curve)."""
    return gemm_at(prof, dtype, n, k, sms)(m)


def gemm_at(prof: Profile, dtype: str, n=0.0, k=0.0, sms: int = 0):
    """`gemm` of one weight GEMM shape as a function of m alone (its curve found and bound once;
    a partial, so a cost model that keeps it still pickles). Where the dtype's own curves hold only some
    shapes, an op none of them holds is priced by the dtype family's curves (`family_curve`)."""
    c = dtype_curve(prof, "gemm", dtype)
    if c is None:
        return partial(_gemm_datasheet, prof)
    family = family_curve(prof, "gemm", dtype, c)
    if family is None:
        return partial(_gemm_curve, bind(c, n, k, sms), n, k)
    return partial(_gemm_or_family, bind(c, n, k, sms), bind(family, n, k, sms), n, k)


def family_curve(prof: Profile, op_class: str, dtype: str, own: tuple[Curve, ...]) -> tuple[Curve, ...] | None:
    """The dtype family's curves of `op_class` (fp8_block -> fp8) where `own`, the dtype's, are ranged (some ops
    lie outside every one of them) and are not the family's already; else None. E.g. gemm.fp8_block on SM90
    holds m >= 32 only (vLLM runs DeepGEMM there and FlashInfer's fp8_blockscale_gemm_sm90 below, which no
    graph-timed table times; calibration/opdb_import.py): a GEMM of m < 32 reads weights of the same bytes as
    per-tensor FP8's and is weight-read bound, so gemm.fp8 prices it."""
    if dtype not in DTYPE_FAMILY or not any(_ranged(c) for c in own):
        return None
    family = curve(prof, f"{op_class}.{DTYPE_FAMILY[dtype]}")
    return family if family is not None and family is not own else None


def _gemm_curve(bound: tuple, n, k, m):
    return evaluate_bound(bound, m, 2.0 * m * n * k)


def _gemm_or_family(bound: tuple, family: tuple, n, k, m):
    """_gemm_curve of the dtype's curves where one holds the op, else of the family's (never 0 for a held op)."""
    eff = evaluate_bound(bound, m, 2.0 * m * n * k)
    if isinstance(eff, float):
        return eff if eff > 0.0 else evaluate_bound(family, m, 2.0 * m * n * k)
    held = eff > 0.0
    return eff if held.all() else np.where(held, eff, evaluate_bound(family, m, 2.0 * m * n * k))


def _gemm_datasheet(prof: Profile, m):
    return prof.gemm_eff_max * m / (m + prof.gemm_m_half)


def gemm_curve_streams(prof: Profile, dtype: str) -> bool:
    """Whether the GEMM curve of `dtype` carries the GEMM's own streaming (a measured curve: it was
    fitted on whole-kernel times without the roofline's memory side, roofline.price_gemm)."""
    return dtype_curve(prof, "gemm", dtype) is not None


def kernel_dtype(weights: str, compute: str, prof: Profile | None = None) -> str:
    """The dtype whose curves price a GEMM of `weights` computed in `compute` (routed experts, sim/cost/step.py;
    dense weight GEMMs, sim/cost/layer.py): the weights' format where its kernel is measured apart
    (KERNEL_FORMATS) and runs in `compute`, a weight-only kernel's key (WEIGHT_ONLY_KERNELS) where `prof` has its
    experts curve, else the compute dtype."""
    wo = WEIGHT_ONLY_KERNELS.get((weights, compute))
    if wo is not None and prof is not None and curve(prof, f"experts.{wo}") is not None:
        return wo
    return weights if KERNEL_FORMATS.get(weights) == compute else compute


def experts(prof: Profile, dtype: str, tokens_per_expert, n=0.0, k=0.0, flops=0.0, load=0.0, sms: int = 0):
    """Routed-expert grouped GEMM: rows per expert play the part of m (n, k: one expert's GEMM);
    `flops`: the whole op's FLOPs on the rank (0: unknown, the fixed-latency term drops); `load`: the
    kernel's average rows per local expert, tokens entering the rank x top-k / local experts
    (moe.tile_load; 0: unknown, no load range applies)."""
    return experts_at(prof, dtype, n, k, sms)(tokens_per_expert, flops, load)


def experts_at(prof: Profile, dtype: str, n=0.0, k=0.0, sms: int = 0):
    """`experts` of one expert GEMM shape (n, k) as a function of (rows per expert, flops, load) (its
    curves found and bound once, as gemm_at; `sms` for a GEMM curve with a tile_rule it may fall back to)."""
    c = dtype_curve(prof, "experts", dtype)
    if c is None:
        return partial(_experts_gemm, gemm_at(prof, dtype, n, k, sms))
    return partial(_experts_curve, bind(c, n, k))


def _experts_curve(bound: tuple, tokens_per_expert, flops=0.0, load=0.0):
    return evaluate_bound(bound, tokens_per_expert, flops, load)


def _experts_gemm(gemm_of_m, tokens_per_expert, flops=0.0, load=0.0):
    return gemm_of_m(tokens_per_expert)


def attention(prof: Profile, phase: str, kind: str, dtype: str, batch=1.0, ctx=1.0, flops=0.0, heads=0.0):
    """Attention core (prefill: FlashAttention/FlashMLA-style; decode: paged/absorbed reads) of
    `batch` sequences at context `ctx` doing `flops` over `heads` query heads per sequence (0:
    unknown, the fixed-latency and per-head terms drop)."""
    return attention_at(prof, phase, kind, dtype)(batch, ctx, flops, heads)


def attention_at(prof: Profile, phase: str, kind: str, dtype: str, backend: str | None = None):
    """`attention` of one phase, kind and dtype as a function of (batch, ctx, flops, heads) (its
    curves found once; a partial, as gemm_at); `backend` (attention_backend): the kernel's published rate in
    place of the curve (ATTENTION_BACKEND_EFF)."""
    if backend is not None:
        return partial(_attention_datasheet, ATTENTION_BACKEND_EFF[backend])
    c = curve(prof, f"attn.{phase}.{kind}.{dtype}") if prof.curves else None
    if c is None and prof.curves:
        c = curve(prof, f"attn.{phase}.{kind}.bf16")
    if c is None:
        return partial(_attention_datasheet, prof.attn_eff)
    return partial(_attention_curve, c)


def _attention_curve(cs: tuple[Curve, ...], batch, ctx, flops, heads=0.0):
    return evaluate(cs, ctx, _per(flops, batch), _per(flops, batch * heads), flops)


def _attention_datasheet(eff: float, batch, ctx, flops, heads=0.0):
    return eff


def _per(total, count):
    """total / count where count > 0 (FLOPs per sequence), else 0."""
    if (count.__class__ is float and total.__class__ is float) or (
            isinstance(count, (int, float)) and isinstance(total, (int, float))):
        return total / count if count > 0 else 0.0
    total, count = np.broadcast_arrays(np.asarray(total, float), np.asarray(count, float))
    return np.divide(total, count, out=np.zeros(total.shape), where=count > 0)


def memory(prof: Profile, nbytes):
    """Streaming bandwidth: small reads are latency bound."""
    return prof.mem_eff * nbytes / (nbytes + prof.mem_bytes_half)


def stream(prof: Profile, op_class: str, nbytes, rows=0.0, cols=0.0):
    """Bandwidth-bound elementwise op (activation quantize, mHC pre/post) moving `nbytes` over a
    [rows, cols] tensor: its curve, else plain streaming `memory`."""
    return stream_at(prof, op_class, cols)(nbytes, rows)


def stream_at(prof: Profile, op_class: str, cols=0.0):
    """`stream` of an op over `cols` columns as a function of (nbytes, rows) (its curve bound once)."""
    c = curve(prof, op_class) if prof.curves else None
    if c is None:
        return partial(_stream_datasheet, prof)
    return partial(_stream_curve, bind(c, cols, 0.0))


def _stream_curve(bound: tuple, nbytes, rows=0.0):
    return evaluate_bound(bound, rows, nbytes)


def _stream_datasheet(prof: Profile, nbytes, rows=0.0):
    return memory(prof, nbytes)


def allreduce(prof: Profile, num_gpus: int, nbytes):
    """All-reduce of `nbytes` over `num_gpus` GPUs of one NVLink domain: fraction of the scale-up
    bandwidth, from the curve of that group size, else the nearest fitted size, else datasheet."""
    c = curve(prof, f"allreduce.tp{num_gpus}") if prof.curves else None
    if c is None:
        sizes = [int(k[len("allreduce.tp"):]) for k in prof.curves if k.startswith("allreduce.tp")]
        if sizes:
            c = prof.curves[f"allreduce.tp{min(sizes, key=lambda s: abs(math.log(s / num_gpus)))}"]
    return evaluate(c or ALLREDUCE_DATASHEET, nbytes, 0.0, 0.0, nbytes)
