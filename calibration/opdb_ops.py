"""Op-database rows -> ClassRows: which rows of each table make one op class, and how the cost
model prices one row (the functions a serving step is priced with: roofline.price with
efficiency.gemm / experts / attention, attention.py's components, moe.py's expert work,
collective.py, elementwise.py). Shapes that do not depend on the profile (FLOPs, bytes) are
computed once per row; the fit then re-prices every row under each trial curve.
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

import numpy as np

from rackplan.sim.cost import attention as attn
from rackplan.sim.cost import efficiency
from rackplan.sim.cost.collective import allreduce_seconds
from rackplan.sim.cost.deepgemm import GROUPS, rule_at
from rackplan.sim.cost.elementwise import mhc_bytes, quantize_bytes, rope_bytes, route_bytes, stream_seconds
from rackplan.sim.cost.moe import expert_work, tile_load
from rackplan.sim.cost.prices import experts_seconds, route_seconds
from rackplan.sim.cost.roofline import price, price_gemm
from rackplan.specs import DTYPE_BYTES, Curve, HardwareSpec, ModelSpec, Profile, load_model
from rackplan.specs.profile import REGIME_EFF_MAX

from .opdb import Table, most_rows, read
from .opdb_fit import ClassRows

# table dtype -> rackplan compute dtype (curve key) and the storage format its weights are read in
TABLE_DTYPE = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "fp4",
               "w4a8_mxfp4_mxfp8": "mxfp4", "w4a16_mxfp4": "mxfp4_bf16"}
WEIGHTS = {"bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "fp4": "nvfp4", "mxfp4": "mxfp4",
           "mxfp4_bf16": "mxfp4"}
COMPUTE = {"mxfp4_bf16": "bf16"}  # a weight-only kernel's compute dtype (sim/cost/efficiency.py WEIGHT_ONLY_KERNELS)
# per-rank (heads, KV heads) of the embedded GQA model (Qwen3-235B: 64 q, 4 KV heads) at TP 1, 2, 4, 8,
# encoded heads * 100 + kv_heads
GQA_SHAPES = (6404, 3202, 1601, 801)
MIN_WEIGHT_DIM = 256  # smallest weight-GEMM edge of the embedded models (the router: 256 experts)
GEMM_START = Curve(eff_max=0.7, x_half=300.0, y_half=100.0, z_half=100.0, work_half=1e9, sharpness=1.5,
                   tiles_half=10.0)
ATTN_START = Curve(eff_max=0.5, x_half=100.0, y_half=1e8, z_half=1e6, work_half=1e9, sharpness=1.5)
ATTN_FIELDS = ("eff_max", "x_half", "y_half", "z_half", "work_half", "sharpness")  # z_half: per (sequence, head)
STREAM_START = Curve(eff_max=0.6, x_half=10.0, y_half=100.0, work_half=1e6)
ALL_FIELDS = ("eff_max", "x_half", "y_half", "z_half", "work_half", "sharpness", "tiles_half")
SHAPELESS_FIELDS = tuple(f for f in ALL_FIELDS if f not in ("y_half", "z_half"))  # (a one-shape backend class)
# vLLM's per-tensor FP8 GEMM (the tables' kernel_source CutlassFP8ScaledMMLinearKernel: cutlass_scaled_mm)
# picks its CUTLASS configuration by m, on SM90 by n too and on SM100 by k at m = 64, per GPU architecture:
# (m_min, m_max, tile rows m is padded to[, n_min, n_max[, k_min, k_max]]), m_min < m <= m_max, n_min < n <=
# n_max and k_min <= k < k_max (as the dispatch compares k), 0 open. Tile rows = the tile's
# extent along m (its N side where the kernel swaps A and B) times the cluster's CTAs along m on SM90; on
# SM100 the 2-SM tile already spans its cluster pair.
# SM90 (H100, H200): vllm csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm90_fp8_dispatch.cuh
# (cutlass_gemm_sm90_fp8_dispatch, the n <= 1280 split inside m <= 16 and m in (16, 64]):
#   m <= 16, n <= 1280: sm90_fp8_config_M16_N1280, tile 64x16x256 swapped, cluster 1x2 (2 x 16 = 32 rows);
#   m <= 16, n > 1280: M16_N8192, 64x16x256 swapped, cluster 1x1 (16);
#   (16, 64], n <= 1280: M64_N1280, 64x16x256 swapped, cluster 1x4 (4 x 16 = 64);
#   (16, 64], n > 1280: M64_N8192, 64x64x256 swapped, cluster 1x1 (64);
#   (64, 128]: M128, 64x128x128, cluster 2x1 (128); above: default, 128x128x128, cluster 2x1 (256).
# SM100 (B200, GB200, GB300/B300 run the sm100f kernels, enable_sm100f_only): .../scaled_mm_sm100_fp8_dispatch.cuh
# (vllm main 487e7b0; the swap-AB dispatch of vllm PR 27284, merged 2025-10, before 0.24.0), cutlass_gemm_sm100_
# fp8_dispatch (m = a.size(0), k = a.size(1); n plays no part):
#   m <= 16: sm100_fp8_config_M16_swap_ab, tile 128x32x128 swapped, cluster 4x1x1 (along n) (32 rows);
#   (16, 64] unless m == 64 and k < 4096: sm100_fp8_config_M64_swap_ab, 128x64x256 swapped, cluster 4x1x1 (64);
#   m == 64 and k < 4096: sm100_fp8_config_M64, 64x64x128 not swapped, cluster 1x1x1 (64; "do not enable swap
#   AB in such case");
#   (64, 256]: sm100_fp8_config_M256, 128x128x128, cluster 2x1x1 (128); above: sm100_fp8_config_default,
#   256x128x128, cluster 2x2x1 (256).
# A curve's ranges are one box, so the swapped M64 configuration takes two: m in (16, 63] (integer m: every m of
# (16, 64] but 64) at every k, and m == 64 ((63, 64]) at k >= 4096, each fitted on its own rows; m == 64 at
# k < 4096 is the unswapped one's. (Splitting the swapped curve at k = 4096 for every m fits b200 better, 10.88%
# held out against 10.97, but the dispatch has no such split below m = 64: not done; benchmarks/RESULTS.md,
# 2026-12-02 "the SM100 fp8 dispatch in full".)
# A padded row is not free: in the table a GEMM whose last tile (cluster) is partly empty takes longer
# than the full one of the same tile count (h200, n 65536, k 7168, the m > 128 configuration, 2 x 128
# rows: m 129 302 us, 160 253, 192 215, 224 179, 256 171; m 257 656 us against 512's 295), so each
# configuration's curve fits `pad_cost` (Curve: what a padded row costs beyond a real one, in real rows)
# instead of pricing padded rows as real ones (pad_cost 0). The mechanism inside the kernel is not known
# here (benchmarks/RESULTS.md, 2026-12-01 "padded rows priced apart"); the tile sizes it pads to are sourced.
# m = 1 on SM100 has its own curve, (0, 1], beside the m <= 16 configuration's (1, 16]: measured, not a dispatch. On
# all four SM100 tables (b200, gb200, gb300, b300) an m = 1 row is slower than m = 2 at nearly every (n, k) by a
# near-constant amount, median 13.6 us on b200 (10-90%: 0.4-16.1), 16.1 on gb200 (14.3-18.3), 15.7 on gb300, 13.6
# on b300, where h200 and h100 show -0.3 and -0.2 (benchmarks/RESULTS.md, 2026-12-02 "the SM100 fp8 dispatch in
# full"); vLLM's CutlassFP8ScaledMMLinearKernel, _custom_ops.cutlass_scaled_mm, c3x/scaled_mm_helper.hpp and the
# SM100 dispatch send m = 1 and m = 2 to the same configuration (M16_swap_ab), so the mechanism is unsourced. One
# rule for every SM100 system; the priced m = 1 rows: 58-64% held-out MAPE as the m <= 16 curve's, 4-5% (b200 18%)
# on their own (benchmarks/RESULTS.md, 2026-12-06 "a per-row cost in vLLM's per-tensor FP8 linear").
SM90_FP8_N_SPLIT = 1280.0  # n <= 1280: the M16_N1280 / M64_N1280 configurations (scaled_mm_sm90_fp8_dispatch.cuh)
SM100_FP8_K_SPLIT = 4096.0  # m == 64 and k < 4096: sm100_fp8_config_M64, unswapped (scaled_mm_sm100_fp8_dispatch.cuh)
FP8_DISPATCH = {"sm90": ((0.0, 16.0, 32.0, 0.0, SM90_FP8_N_SPLIT), (0.0, 16.0, 16.0, SM90_FP8_N_SPLIT, 0.0),
                         (16.0, 64.0, 64.0, 0.0, SM90_FP8_N_SPLIT), (16.0, 64.0, 64.0, SM90_FP8_N_SPLIT, 0.0),
                         (64.0, 128.0, 128.0, 0.0, 0.0), (128.0, 0.0, 256.0, 0.0, 0.0)),
                "sm100": ((0.0, 1.0, 32.0, 0.0, 0.0, 0.0, 0.0), (1.0, 16.0, 32.0, 0.0, 0.0, 0.0, 0.0),
                          (16.0, 63.0, 64.0, 0.0, 0.0, 0.0, 0.0),
                          (63.0, 64.0, 64.0, 0.0, 0.0, SM100_FP8_K_SPLIT, 0.0),
                          (63.0, 64.0, 64.0, 0.0, 0.0, 0.0, SM100_FP8_K_SPLIT),
                          (64.0, 256.0, 128.0, 0.0, 0.0, 0.0, 0.0), (256.0, 0.0, 256.0, 0.0, 0.0, 0.0, 0.0))}
# A measurement-quality screen, the table's own consistency (never a row's error against a fit): in the
# m <= 16 configuration of FP8_DISPATCH every m from 2 to 16 at one (n, k) runs the same kernel, tiles and
# clusters over the same weights (SM100: one 32-row swapped tile; SM90: one 16-row tile or 32-row cluster),
# so those 15 rows should time alike. On the five systems other than b200 they do: a row over the median
# of its 14 neighbours is at most 1.22x (gb200), 1.16 (gb300), 1.11 (b300), 1.19 (h100), 99th percentiles
# 1.07-1.13, one h200 row at 2.13x; on b200 9.2% of them are 1.25-7.1x slow and none is below 0.89x
# (benchmarks/RESULTS.md, 2026-12-01 "the SM90 dispatch by n, and b200's outlier rows"). A row more than
# SCREEN_RATIO x that median is screened out of the fit and of the held-out score (the seeded split is
# drawn over every row first, so no other row changes side); m = 1 is left alone (on Blackwell every m = 1
# row is slower than m = 2 by a near-constant 14-16 us: a step, not scatter, priced by its own curve above).
# A per-row cost in every per-tensor FP8 table (the whole linear the collector times: vLLM's static activation
# quantisation, then cutlass_scaled_mm; aiconfigurator collector/vllm/collect_gemm.py, RowParallelLinear.forward
# in a CUDA graph): at n = 256 the time grows in m at a slope (ns per row, m >= 4096, fitted by least squares)
# that is flat from k = 256 to 2048 and steps up after every 2048 of k, 6.2 / 10.0 / 13.8 / 17.5 / 21.2 / 24.9 /
# 32.1 / 93 / 118 ns at ceil(k / 2048) = 1, 2, 3, 4, 5, 6, 8, 25, 32 on gb200 (2.4 + 3.7 x ceil(k / 2048)); the
# same steps between k = 2048 | 2560, 4096 | 5120 and 6144 | 7168 on b200, gb300, b300 and h200 (h200: 7.3 ns at
# k <= 2048); the BF16 table (torch's linear) has 0.1 ns per row there and the NVFP4 one 0.6. A GEMM's own
# terms (Curve x_half: n k, y_half: m k, z_half: m n) have nothing linear in m alone, so the fitted curves priced
# those rows 20-50% fast at small k and small n and 5-20% slow at large n (gb200 held-out MAPE 9.51% at
# m > 256: 10.5%). Each configuration's curve fits a row term, row_half + chunk_half x ceil(k / FP8_ROW_CHUNK)
# per row (rackplan.specs.Curve). The mechanism is unsourced: the step width is not the static quantisation
# kernel's (csrc/quantization/w8a8/fp8/common.cu, static_scaled_fp8_quant: a block of 256 threads per row, 16
# elements each, 4096 a loop), and the op database's own timing of that kernel (scale_matrix_perf, 0.24.0) has
# no steps and 0.6-1.3 ns per row, so FP8_ROW_CHUNK is the width measured on all six tables; 1024 and 4096
# fit worse (benchmarks/RESULTS.md, 2026-12-06 "a per-row cost in vLLM's per-tensor FP8 linear").
FP8_ROW_CHUNK = 2048.0  # k per step of the per-row cost: measured (above), unsourced
FP8_ROW_START = {"row_half": 1e6, "chunk_half": 1e6, "z_chunk": FP8_ROW_CHUNK}  # FLOPs per row at the peak
FP8_ROW_FIELDS = ("row_half", "chunk_half")
SCREEN_M = (2.0, 16.0)  # m range of same-configuration neighbours (FP8_DISPATCH's m <= 16 configuration)
SCREEN_RATIO = 1.25  # above every other system's largest ratio (1.22) but h200's one row
SCREEN_MIN_NEIGHBOURS = 8  # a median of at least half the configuration's 15 rows


def screen(m, n, k, seconds) -> np.ndarray:
    """[N] rows slower than SCREEN_RATIO x the median of their same-configuration neighbours (the other
    rows of m in SCREEN_M at the same (n, k)): a measurement outlier by the table's own consistency."""
    out = np.zeros(len(seconds), bool)
    sel = np.flatnonzero((m >= SCREEN_M[0]) & (m <= SCREEN_M[1]))
    order = sel[np.lexsort((k[sel], n[sel]))]
    edges = np.flatnonzero(np.diff(n[order]) != 0) + 1
    edges = np.union1d(edges, np.flatnonzero(np.diff(k[order]) != 0) + 1)
    for group in np.split(order, edges):
        if len(group) - 1 < SCREEN_MIN_NEIGHBOURS:
            continue
        t = seconds[group]
        others = np.array([np.median(np.delete(t, i)) for i in range(len(t))])
        out[group[t > SCREEN_RATIO * others]] = True
    return out


# vLLM's TrtLlmMxfp4ExpertsModular (kernel_source ..._trtllmmxfp4expertsmodular; vllm
# model_executor/layers/fused_moe/experts/trtllm_mxfp4_moe.py, apply(): the rank's hidden_states rows, topk and
# local_num_experts = w1.size(0)) calls FlashInfer's trtllm_fp4_block_scale_routed_moe under autotune(False)
# (its comment: until flashinfer issue 2023 is resolved), so the launcher takes its fallback tactic: tile_N
# = the smallest of computeSelectedTileN's candidates (FlashInfer csrc/trtllm_fused_moe_kernel_launcher.cu,
# v0.6.16 8da13a2: nextPowerOfTwo l. 120-137, computeSelectedTileN l. 139-175: tile = nextPowerOfTwo(ceil(
# num_tokens x top_k / num_local_experts)) clamped to the ladder, candidates it, the next two and the one
# before; selectDefaultTileN l. 177-183 returns *selected.begin(), the smallest; resolveMoeTileAndConfig
# l. 187-206 takes it when the tactic is -1; the FP4 launcher's ladder l. 1778-1800: 8, 16, 32, 64, then
# 128, 192, 256 with MXFP8 activations; trtllm_fp4_block_scale_moe l. 2496-2640 resolves with the local
# expert count). The tile so changes where that load (every token entering the rank x top-k over the
# rank's experts) crosses 16, 32, 64 and 128: tiles 8, 16, 32, 64, then 128 (192 where the ladder has it:
# the same rule from v0.6.8 to v0.6.18). One curve pair per range (lo, hi] of the load.
FLASHINFER_TILE_LOADS = ((0.0, 16.0), (16.0, 32.0), (32.0, 64.0), (64.0, 128.0), (128.0, math.inf))
LOAD_DISPATCHED_KERNELS = ("trtllmmxfp4expertsmodular",)  # kernel_source endings that take the fallback tile
# Kernel configurations a GEMM class's curves stand for, by the table's kernel_source (the class runs at the best of
# them; default 2). DeepGEMM's fp8_gemm_nt picks per shape among many layouts (SM100: block_m 32 / 64 / 128 by m,
# block_n 16 and 32..256, 1x1 or 2-CTA clusters, ordered by waves, multicast and last-wave use: DeepGEMM
# csrc/jit_kernels/heuristics/sm100.hpp, get_layout_candidates and compare); three curves reach 8.5-9.8% held out on
# the SM100 SGLang tables where two reach 9.0-10.6% (benchmarks/RESULTS.md, 2026-12-02 "gemm.fp8_block from the
# graph-timed DeepGEMM tables").
KERNEL_CONFIGS = {"sglang_deepgemm_gemm_nt_f8f8bf16": 3}
# A GEMM table of a kernel whose configuration choice is modelled as a tile rule (sim/cost/deepgemm.py), by
# (kernel_source, architecture): (rule, smallest m the curves price). DeepGEMM's fp8_gemm_nt on SM90 (the SGLang
# tables): one curve set (KERNEL_CONFIGS of them) per configuration group of its cycle model, each padding by the
# tiles it picks, fitted on the rows of m >= 32 only: vLLM 0.24.0 runs DeepGEMM there and FlashInfer's swap-AB
# fp8_blockscale_gemm_sm90 below (scaled_mm/flashinfer.py:152-158), which no graph-timed table times; the curves
# carry x_min = 31 and efficiency.family_curve prices m < 32 by gemm.fp8 (benchmarks/RESULTS.md, 2026-12-02
# "DeepGEMM's SM90 configuration in the fp8_block fit": 9.25% / 7.83% held out on h200 / h100).
TILE_RULE = {("sglang_deepgemm_gemm_nt_f8f8bf16", "sm90"): ("deepgemm_sm90", 32.0)}
# The MLA prefill backend vLLM 0.24.0 runs at each prompt length, by architecture: (isl_min, isl_max,
# kernel_source), isl_min < isl <= isl_max, 0 open. On SM90 the MLA backend is FLASH_ATTN_MLA, whose metadata
# builder sets reorder_batch_threshold = 512 ("process small prefills with decode pathway": vllm
# v1/attention/backends/mla/flashattn_mla.py, FlashAttnMLAMetadataBuilder), so a request of <= 512 new tokens
# runs the FLASH_ATTN_MLA decode kernel and a longer one the prefill backend, FLASH_ATTN (FA3 varlen); the
# collector labels each row with the backend that ran it (aiconfigurator collector/vllm/collect_mla_module.py
# _mla_backend_name: mla_layer.prefill_backend, or attn_backend where num_prefills == 0). The h100_sxm /
# h200_sxm tables hold FLASH_ATTN_MLA at isl 1-512 and FLASH_ATTN at 1024-32768, each shape timed once
# (benchmarks/RESULTS.md, 2026-12-02 "MLA prefill on Hopper: both backends vLLM runs"). One curve per range;
# a kernel's rows outside its range (a shape timed by a backend vLLM does not pick there) are dropped. Serving
# prices a prefill chunk at its longest context (sim/cost/attention.py), vLLM dispatches by its new tokens:
# the same for a prompt without a cached prefix. An architecture not listed keeps the kernel with most rows.
MLA_PREFILL_DISPATCH = {"sm90": ((0.0, 512.0, "FLASH_ATTN_MLA"), (512.0, 0.0, "FLASH_ATTN"))}
ARCH = {"h100-sxm": "sm90", "h200-sxm": "sm90", "h800": "sm90", "b200": "sm100", "b300": "sm100",
        "gb200-nvl72": "sm100", "gb300-nvl72": "sm100"}  # hardware -> CUDA architecture of its GPU


def _gemm_table(tables: dict[str, Table]):
    """Columns of the GEMM table restricted to weight-GEMM shapes (n, k >= MIN_WEIGHT_DIM)."""
    t = tables.get("gemm_perf")
    if t is None:
        return None, {}
    c = read(t)
    sel = (c["n"] >= MIN_WEIGHT_DIM) & (c["k"] >= MIN_WEIGHT_DIM)
    return t, {x: v[sel] for x, v in c.items()}


def _gemm_predict(dt: str, m, n, k, hw):
    flops = 2.0 * m * n * k
    nbytes = k * n * DTYPE_BYTES[WEIGHTS[dt]] + m * (k + n) * 2.0
    peak = hw.flops_for(dt)

    def predict(prof, i):
        return price_gemm(flops[i], nbytes[i], peak, dt, m[i], n[i], k[i], hw, prof)
    return predict


def memory_rows(tables: dict[str, Table], hw: HardwareSpec) -> list[ClassRows]:
    """memory: the profile's streaming efficiency (mem_eff, mem_bytes_half) from BF16 GEMMs of at
    most 8 rows over >= 32 MB of weights, which only stream their weights."""
    t, c = _gemm_table(tables)
    if t is None:
        return []
    sel = (c["gemm_dtype"] == "bfloat16") & (c["m"] <= 8) & (c["n"] * c["k"] * 2.0 >= 32e6)
    if sel.sum() < 8:
        return []
    m, n, k = (c[x][sel].astype(float) for x in "mnk")
    return [ClassRows("memory", t, c["seconds"][sel], _gemm_predict("bf16", m, n, k, hw), None, (),
                      "gemm_dtype bfloat16, m <= 8, weights >= 32 MB (weight streaming)",
                      scalars=(("mem_eff", 0.8, 0.05, 1.0), ("mem_bytes_half", 1e6, 0.0, 1e9)))]


def gemm_rows(tables: dict[str, Table], hw: HardwareSpec) -> list[ClassRows]:
    """gemm.<dtype>: weight GEMMs with n, k >= MIN_WEIGHT_DIM, priced as step.py's _gemm."""
    t, c = _gemm_table(tables)
    if t is None:
        return []
    out = []
    for tdt in sorted(set(c["gemm_dtype"].astype(str)) & set(TABLE_DTYPE)):
        dt = TABLE_DTYPE[tdt]
        sel = c["gemm_dtype"] == tdt
        m, n, k = (c[x][sel].astype(float) for x in "mnk")
        kernels = ", ".join(sorted(set(c["kernel_source"][sel].astype(str))))
        ranges = FP8_DISPATCH.get(ARCH.get(hw.name, ""), ()) if kernels == "CutlassFP8ScaledMMLinearKernel" else ()
        start, free = (dataclasses.replace(GEMM_START, pad_cost=1.0, **FP8_ROW_START), ALL_FIELDS + ("pad_cost",)
                       + FP8_ROW_FIELDS) if ranges else (GEMM_START, ALL_FIELDS)
        seconds = c["seconds"][sel]
        rule = TILE_RULE.get((kernels, ARCH.get(hw.name, "")))
        if rule is not None:
            out.append(_ruled_rows(f"gemm.{dt}", t, tdt, kernels, rule, m, n, k, seconds, hw))
            continue
        screened = screen(m, n, k, seconds) if ranges else None
        out.append(ClassRows(f"gemm.{dt}", t, seconds, _gemm_predict(dt, m, n, k, hw), start,
                             free, f"gemm_dtype {tdt}, n and k >= {MIN_WEIGHT_DIM}"
                             + (", one curve per cutlass_scaled_mm configuration by m (and n, k), padded rows"
                                f" priced apart; rows over {SCREEN_RATIO:g}x the median of their same-configuration"
                                f" neighbours (m {SCREEN_M[0]:g}-{SCREEN_M[1]:g}, same n, k) screened"
                                if ranges else ""),
                             kernels, configs=KERNEL_CONFIGS.get(kernels, 2), ranges=ranges, x=m, y=n, z=k,
                             screened=screened,
                             notes={"table_roughness_pct": roughness(m, n, k, c["seconds"][sel]),
                                    "fastest_row_us": round(float(c["seconds"][sel].min()) * 1e6, 1)}))
    return out


def _ruled_rows(key: str, t: Table, tdt: str, kernels: str, rule: tuple[str, float], m, n, k, seconds, hw):
    """A GEMM class whose kernel picks its configuration by a tile rule (TILE_RULE): its rows of m >= the rule's
    smallest m, one curve set per configuration group (ClassRows.load the group of each row, fitted as ranges
    (g - 1, g] into Curve.rule_group g), each curve's pad term the rule's padded work with pad_cost fitted."""
    name, m_min = rule
    keep = m >= m_min
    m, n, k, seconds = m[keep], n[keep], k[keep], seconds[keep]
    group = rule_at(name, m, n, k, hw.num_sms)[0]
    start = dataclasses.replace(GEMM_START, pad_cost=1.0, tile_rule=name, x_min=m_min - 1.0)
    return ClassRows(key, t, seconds, _gemm_predict(TABLE_DTYPE[tdt], m, n, k, hw), start, ALL_FIELDS + ("pad_cost",),
                     f"gemm_dtype {tdt}, n and k >= {MIN_WEIGHT_DIM}, m >= {m_min:g} (m < {m_min:g}: the dtype "
                     f"family's curve); {KERNEL_CONFIGS.get(kernels, 2)} curves per configuration group of tile rule "
                     f"{name} (sim/cost/deepgemm.py), padded by its tiles", kernels,
                     configs=KERNEL_CONFIGS.get(kernels, 2), x=m, y=n, z=k, load=group, rule=name,
                     load_ranges=tuple((g - 1.0, float(g)) for g in GROUPS if (group == g).any()),
                     notes={"table_roughness_pct": roughness(m, n, k, seconds),
                            "fastest_row_us": round(float(seconds.min()) * 1e6, 1)})


def roughness(m, n, k, seconds) -> float:
    """The table's own scatter: MAPE % of predicting each row from its two neighbours in m (same n, k)
    by log-log interpolation, a floor for a curve smooth in m; a kernel switch between two neighbours
    (a dispatch by m, FP8_DISPATCH) counts in it, so curves that follow the dispatch can beat it."""
    errs = []
    for nk in set(zip(n, k)):
        rows = np.flatnonzero((n == nk[0]) & (k == nk[1]))
        rows = rows[np.argsort(m[rows])]
        if len(rows) < 3:
            continue
        lm, lt = np.log(m[rows]), np.log(seconds[rows])
        w = (lm[1:-1] - lm[:-2]) / (lm[2:] - lm[:-2])
        errs.append(np.abs(np.exp(lt[:-2] * (1 - w) + lt[2:] * w - lt[1:-1]) - 1))
    return round(float(np.mean(np.concatenate(errs)) * 100), 2) if errs else float("nan")


@lru_cache(maxsize=None)
def _moe_model(h: int, inter: int, topk: int, experts: int, dt: str) -> ModelSpec:
    base = load_model("deepseek-v3")
    moe = dataclasses.replace(base.moe, num_experts=experts, top_k=topk, expert_intermediate=inter,
                              num_groups=1, topk_groups=1)
    dts = dataclasses.replace(base.dtypes, expert_weights=WEIGHTS[dt], expert_compute=COMPUTE.get(dt, dt))
    return dataclasses.replace(base, hidden_size=h, moe=moe, dtypes=dts)


def expert_rows(tables: dict[str, Table], hw: HardwareSpec, pick=most_rows, backend: str = "") -> list[ClassRows]:
    """experts.<dtype>: one EP rank's routed experts for balanced routing (no MoE TP), priced as
    step.py's moe.experts: T tokens enter, T top_k / ep pairs land on the rank's E / ep experts.
    `pick(kernel_sources) -> kernel_source` chooses the kernel whose rows a dtype's class takes (the one
    with most rows; benchmarks/investigations/opdb_dropped_kernels.py passes others, to price the rows left out).
    `backend` (a key of VLLM_BACKEND_KERNELS): experts.<dtype>.<backend> instead, from the rows of that backend's
    kernel alone (the dtypes it runs; `pick` unused)."""
    t = tables.get("moe_perf")
    if t is None:
        return []
    c = read(t)
    out = []
    base = (c["distribution"] == "balanced") & (c["moe_tp_size"] == 1)
    for tdt in sorted(set(c["moe_dtype"][base].astype(str)) & set(TABLE_DTYPE)):
        kernels = c["kernel_source"][base & (c["moe_dtype"] == tdt)]
        if backend:
            marker = VLLM_BACKEND_KERNELS.get(backend, {}).get(TABLE_DTYPE[tdt])
            found = sorted({str(k) for k in kernels if marker and marker in str(k)})
            if not found:
                continue
            kernel = most_rows(kernels[np.isin(kernels.astype(str), found)])
        else:
            kernel = pick(kernels)
        out.append(_expert_class(t, c, base & (c["moe_dtype"] == tdt) & (c["kernel_source"] == kernel), tdt,
                                 kernel, hw, backend))
    return out


def _expert_class(t: Table, c, sel, tdt: str, kernel, hw: HardwareSpec, backend: str = "") -> ClassRows:
    """experts.<dtype>[.<backend>] of the moe_perf rows `sel` (moe_dtype `tdt`, kernel_source `kernel`)."""
    base_dt = TABLE_DTYPE[tdt]
    dt = f"{base_dt}.{backend}" if backend else base_dt
    shape = np.array([_expert_shape(*r, base_dt) for r in zip(*(c[x][sel] for x in (
        "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size")))])  # [N, 5]
    # a row faster than moving its weights and activations at the HBM peak does not time the shape
    # it names (benchmarks/RESULTS.md, 2026-12-01 "vLLM's all-reduce dispatch and the L2 regime")
    physical = shape[:, 1] / hw.hbm_bw <= c["seconds"][sel]
    shape, rows = shape[physical], np.flatnonzero(sel)[physical]
    tokens, h = c["num_tokens"][rows].astype(float), c["hidden_size"][rows].astype(float)
    # the kernel's load: all num_tokens enter the rank, which holds E // ep experts (balanced_routing)
    local = (c["num_experts"][rows] // c["moe_ep_size"][rows]).astype(float)
    load = tile_load(tokens, c["topk"][rows].astype(float), local)
    route = f"moe.route.{dt}"
    predict = _expert_predict(dt, shape, tokens, h, hw, load, COMPUTE.get(base_dt, base_dt))
    dispatched = str(kernel).endswith(LOAD_DISPATCHED_KERNELS)
    start, free, note = GEMM_START, ALL_FIELDS, ""
    if backend and len({(n, k) for n, k in shape[:, 3:5]}) == 1:
        # a backend's rows at one expert shape (n, k) do not tell its y and z terms apart from eff_max: fitted free,
        # they extrapolate to another model's shape at will (the Marlin MXFP4 class's y_half 11,160 priced gpt-oss's
        # TP2 n = 2,880 at half its TP1 efficiency); held at 0, the class prices every shape at the efficiency the
        # kernel reaches at the measured one, for the same rows per expert and load
        start, free = dataclasses.replace(GEMM_START, y_half=0.0, z_half=0.0), SHAPELESS_FIELDS
        note = f"; one expert shape (n {shape[0, 3]:g}, k {shape[0, 4]:g}): y_half, z_half held at 0"
    return ClassRows(f"experts.{dt}", t, c["seconds"][rows], predict, start, free,
                     f"moe_dtype {tdt}, balanced, moe_tp_size 1, rows no faster than their bytes at "
                     f"the HBM peak ({int(np.sum(~physical))} dropped); fitted with {route} (routing, "
                     f"permute and quantisation of every token entering the rank){note}", kernel,
                     also=((route, Curve(eff_max=0.3), ("eff_max",)),), configs=2,
                     load_ranges=FLASHINFER_TILE_LOADS if dispatched else (), load=load)


def _expert_predict(dt: str, shape: np.ndarray, tokens, h, hw, load, compute: str = ""):
    """Seconds of the table's MoE rows: the moe.experts op priced by its function (sim/cost/prices.py
    experts_seconds), plus moe.route's (route_seconds) over the BF16 hidden states of every token entering
    the rank (its own curve; the table's kernel sees all num_tokens tokens, as step.py's moe.route does
    without an all-to-all). `compute`: the peak's dtype where the curve key `dt` is not one (a backend's class)."""
    flops, nbytes, rows_pe, n, k = shape.T
    in_bytes = route_bytes(tokens, h)
    compute = compute or dt

    def predict(prof, i):
        return (experts_seconds(hw, prof, dt, compute, flops[i], nbytes[i], rows_pe[i], n[i], k[i], load[i])
                + route_seconds(hw, prof, dt, in_bytes[i], tokens[i], h[i]))
    return predict


# SGLang's DeepEP MoE (sglang srt/layers/moe/ep_moe/layer.py DeepEPMoE): behind DeepEP's normal dispatch its FP8
# block-scaled experts run DeepGEMM's contiguous grouped GEMM (m_grouped_fp8_gemm_nt_contiguous, between ep_scatter and
# ep_gather), behind the low-latency dispatch DeepGEMM's masked grouped GEMM (m_grouped_fp8_gemm_nt_masked), where
# DeepGEMM's JIT is on (SGLANG_ENABLE_JIT_DEEPGEMM, default true on SM90 and SM100). aiconfigurator's collector
# (collector/sglang/collect_wideep_deepep_moe.py) times `run_moe_core` alone (no dispatch or combine) on one rank of
# `moe_ep_size` and logs num_tokens as every rank's tokens together (num_token x moe_ep_size); under its "uniform"
# distribution each of the rank's E / ep experts gets floor(num_tokens x top_k / E) rows (the context table's rank
# takes all num_tokens hidden rows in; the generation table's masked layout holds the rank's own share, and where that
# floor is 0 the first num_tokens x top_k / ep experts get one row each). Class key per backend: BACKEND_CLASS.
# vLLM MoE backends timed in the same moe_perf table beside the kernel vLLM picks by default (the class
# experts.<dtype>.<backend>, sim/cost/efficiency.py BACKENDS), by a substring of their kernel_source per kernel dtype.
# marlin: vLLM's fused_marlin_moe on MXFP4 weights (BF16 compute, weight-only), the MoE kernel vLLM <= 0.11.0 runs for
# MXFP4 experts on Hopper where `triton_kernels` does not import (vllm 0.10.2 mxfp4.py get_mxfp4_backend: "Using Marlin
# backend"). H100 / H200 time it as moe_dtype w4a16_mxfp4, kernel_source
# vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu (compressed-tensors MXFP4 weights, one shape:
# hidden 3584, inter 3072, 896 experts, top-16; the same fused_marlin_moe kernel gpt-oss's Mxfp4MoEMethod calls).
VLLM_BACKEND_KERNELS = {"marlin": {"mxfp4_bf16": "_marlin_"}}
DEEPEP_TABLES = (("wideep_context_moe_perf", "deepgemm"), ("wideep_generation_moe_perf", "deepgemm_masked"))


def deepep_uniform_routing(tokens, experts, topk, ep) -> tuple[np.ndarray, np.ndarray]:
    """([N] token-expert pairs, [N] experts holding them) on the timed rank of a wideep table's "uniform" row of
    `tokens` (every rank's together): floor(tokens x topk / experts) rows on each of its experts // ep experts, or,
    where that floor is 0, one row on each of the first tokens x topk // ep (the collector's masked_m; the context
    collector skips those rows: hit 0 where its floor is 0 is read as no row)."""
    tokens, experts, topk, ep = (np.asarray(v, np.int64) for v in (tokens, experts, topk, ep))
    local = experts // ep
    per_expert = tokens * topk // experts
    hit = np.where(per_expert > 0, local, np.minimum(tokens * topk // ep, local))
    return np.maximum(per_expert, 1) * hit, hit


def deepep_expert_rows(tables: dict[str, Table], hw: HardwareSpec) -> list[ClassRows]:
    """experts.fp8_block.<backend> (deepgemm: DeepEP normal mode; deepgemm_masked: low-latency mode) from SGLang's
    wideep MoE tables (DEEPEP_TABLES), uniform routing: one EP rank's pairs num_tokens x top_k / ep over its E / ep
    experts, priced as step.py's moe.experts and moe.route (route rows: every token the context rank takes in, the
    generation rank's own num_tokens / ep)."""
    out = []
    for name, backend in DEEPEP_TABLES:
        t = tables.get(name)
        if t is None:
            continue
        c = read(t)
        sel = np.flatnonzero((c["distribution"] == "uniform") & (c["moe_tp_size"] == 1)
                             & (c["moe_dtype"] == "fp8_block"))
        tok, h, inter, topk, experts, ep = (c[x][sel].astype(int) for x in (
            "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size"))
        local = experts // ep
        pairs, hit = deepep_uniform_routing(tok, experts, topk, ep)
        keep = hit > 0
        shape = np.array([expert_work(_moe_model(hh, ii, kk, ee, "fp8_block"), float(p), float(d))
                          for hh, ii, kk, ee, p, d in zip(h, inter, topk, experts, pairs, hit)]).reshape(-1, 5)
        physical = keep & (shape[:, 1] / hw.hbm_bw <= c["seconds"][sel])
        rows = sel[physical]
        routed = (tok if backend == "deepgemm" else tok / ep)[physical].astype(float)
        load = tile_load(routed, topk[physical].astype(float), local[physical].astype(float))
        dt, route = f"fp8_block.{backend}", f"moe.route.fp8_block.{backend}"
        predict = _expert_predict(dt, shape[physical], routed, h[physical].astype(float), hw, load, "fp8")
        out.append(ClassRows(f"experts.{dt}", t, c["seconds"][rows], predict, GEMM_START, ALL_FIELDS,
                             f"SGLang {t.version} {name}, moe_dtype fp8_block, uniform, moe_tp_size 1, num_tokens over "
                             f"all moe_ep_size ranks, rows no faster than their bytes at the HBM peak "
                             f"({int(np.sum(keep & ~physical))} dropped); fitted with {route}",
                             str(c["kernel_source"][sel][0]) if len(sel) else "",
                             also=((route, Curve(eff_max=0.3), ("eff_max",)),), configs=2, load=load))
    return out


# Triton fused_moe with its untuned default configuration (experts.bf16.triton_default): where the engine ships no
# tuned config file for the shape (E experts, N = intermediate columns a rank, the device, the dtype), vLLM 0.11.0
# (model_executor/layers/fused_moe/fused_moe.py get_default_config, lines 868-919 of the v0.11.0 wheel) runs BF16
# experts at BLOCK_SIZE_M/N/K 64/64/32, GROUP_SIZE_M 8 when M (the step's tokens) > E, else 16/32/64, GROUP_SIZE_M 1
# (Triton's default warps and stages); vLLM 0.19.0 and later replaced that with tiles that grow with M (128 x 128 x
# 64, 8 warps: the 0.24.0 tables the experts.bf16 class is fitted on). SGLang 0.5.10 and 0.5.14 keep vLLM's old
# branch verbatim (srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py and moe_runner/triton_utils/
# fused_moe_triton_config.py get_default_config, bf16 "else" branch), so their moe_perf rows at shapes without an
# H200 config file time the kernel a vLLM 0.11.0 run takes there. H200 BF16 config files (E, N) those wheels ship
# (any triton_* folder; sglang-0.5.10 and 0.5.14 from PyPI, listed by hand): a row at one of these ran tuned.
SGLANG_TUNED_BF16 = {"h200-sxm": frozenset({
    (8, 1792), (8, 2048), (8, 3584), (8, 4096), (8, 7168), (8, 14336), (16, 1024), (20, 1536), (64, 320), (64, 640),
    (64, 1280), (64, 2560), (128, 192), (128, 384), (128, 704), (128, 768), (129, 384), (161, 192), (512, 64),
    (512, 128), (512, 256)})}
TRITON_DEFAULT_KERNEL = "sglang_fused_moe_triton"


def untuned_rows(c: dict, tuned: frozenset) -> np.ndarray:
    """[N] bool: the SGLang moe_perf rows of the Triton kernel at BF16, balanced routing, one EP rank, whose
    (E, N = inter / moe_tp_size) has no tuned config in `tuned`: the rows that ran the default configuration."""
    base = ((c["moe_dtype"] == "bfloat16") & (c["distribution"] == "balanced") & (c["moe_ep_size"] == 1)
            & (c["kernel_source"] == TRITON_DEFAULT_KERNEL))
    pairs = zip(c["num_experts"].astype(int), c["inter_size"].astype(int) // c["moe_tp_size"].astype(int))
    return base & np.array([p not in tuned for p in pairs], dtype=bool)


def triton_default_expert_rows(tables: dict[str, Table], hw: HardwareSpec) -> list[ClassRows]:
    """experts.bf16.triton_default: the Triton fused_moe kernel at its untuned default configuration (SGLANG_TUNED_BF16)
    from the system's SGLang moe_perf table, every moe_tp_size (each expert's intermediate width sharded), priced as
    step.py's moe.experts (expert_work with moe_tp) and moe.route over every token entering the rank (no all-to-all);
    no rows where the hardware's tuned list is not known."""
    t = tables.get("moe_perf")
    tuned = SGLANG_TUNED_BF16.get(hw.name)
    if t is None or tuned is None:
        return []
    c = read(t)
    sel = np.flatnonzero(untuned_rows(c, tuned))
    tok, h, inter, topk, experts, tp = (c[x][sel].astype(int) for x in (
        "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"))
    shape = np.array([expert_work(_moe_model(hh, ii, kk, ee, "bf16"), *map(float, balanced_routing(tt, ee, kk, 1)), mt)
                      for tt, hh, ii, kk, ee, mt in zip(tok, h, inter, topk, experts, tp)]).reshape(-1, 5)  # [N, 5]
    physical = shape[:, 1] / hw.hbm_bw <= c["seconds"][sel]  # (as expert_rows: a row faster than its bytes is dropped)
    rows, dropped = sel[physical], int(np.sum(~physical))
    tokens = tok[physical].astype(float)
    load = tile_load(tokens, topk[physical].astype(float), experts[physical].astype(float))
    predict = _expert_predict("bf16.triton_default", shape[physical], tokens, h[physical].astype(float), hw, load,
                              "bf16")
    return [ClassRows("experts.bf16.triton_default", t, c["seconds"][rows], predict, GEMM_START, ALL_FIELDS,
                      f"SGLang {t.version} moe_perf, kernel {TRITON_DEFAULT_KERNEL}, moe_dtype bfloat16, balanced, "
                      "moe_ep_size 1, every moe_tp_size, (E, inter / tp) without a tuned H200 config file (the "
                      f"default configuration), rows no faster than their bytes at the HBM peak ({dropped} dropped); "
                      "fitted with moe.route.bf16.triton_default", TRITON_DEFAULT_KERNEL,
                      also=(("moe.route.bf16.triton_default", Curve(eff_max=0.3), ("eff_max",)),), configs=2,
                      load=load)]


def _expert_shape(tokens, h, inter, topk, experts, ep, dt):
    model = _moe_model(int(h), int(inter), int(topk), int(experts), dt)
    pairs, distinct = balanced_routing(int(tokens), int(experts), int(topk), int(ep))
    return expert_work(model, float(pairs), float(max(distinct, 1)))


@lru_cache(maxsize=None)
def balanced_routing(tokens: int, experts: int, topk: int, ep: int) -> tuple[int, int]:
    """(token-expert pairs, distinct experts) on the rank the table times under its "balanced"
    distribution: aiconfigurator's collector (collector/helper.py balanced_logits) sends token i's
    j-th pick to expert (i + j s) mod E, s = ceil(E / k), when T >= s, else to (i s / T + j s) mod E
    truncated, and the timed rank holds experts [0, E / ep) (vLLM determine_expert_map, rank 0). The
    picks are spread, not drawn at random: at T k = E every expert gets one token, where random routing
    (sim/cost/moe.py, what serving sees) leaves a third of them idle, so pricing the rows with the random
    expectation reads too few weights there (benchmarks/RESULTS.md, 2026-12-01 "vLLM's all-reduce dispatch
    and the L2 regime")."""
    stride = -(-experts // topk)
    i = np.arange(tokens, dtype=np.float32)[:, None]  # [T, 1] (the collector's picks are float32)
    j = np.arange(topk, dtype=np.float32)[None, :] * stride  # [1, k]
    picks = (i + j) % experts if tokens >= stride else (i * stride / tokens + j) % experts
    local = picks.astype(np.int64).ravel()
    local = local[local < experts // ep]
    return len(local), len(np.unique(local))


def _gqa(heads: int, kv_heads: int, head_dim: int, kv_bytes: float) -> tuple[ModelSpec, object]:
    base = load_model("qwen3-235b-a22b")
    comp = dataclasses.replace(base.attention.kv[0], entry_bytes=2.0 * kv_heads * head_dim * kv_bytes,
                               qk_dim=head_dim, v_dim=head_dim)
    att = dataclasses.replace(base.attention, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                              kv=(comp,))
    return dataclasses.replace(base, attention=att), comp


def _mla(kv_bytes: float) -> tuple[ModelSpec, object]:
    base = load_model("deepseek-v3")
    comp = dataclasses.replace(base.attention.kv[0], entry_bytes=576.0 * kv_bytes)
    return dataclasses.replace(base, attention=dataclasses.replace(base.attention, kv=(comp,))), comp


def attention_rows(tables: dict[str, Table], hw: HardwareSpec, prof: Profile) -> list[ClassRows]:
    """attn.<phase>.gqa.bf16 from the plain attention tables (head_dim 128, BF16 KV, no window) and
    attn.<phase>.mla.bf16 from the DeepSeek-V3 MLA module tables (BF16 everywhere), whose
    projections are priced with `prof`'s gemm curves and held fixed while the core is fitted."""
    out = []
    for phase, name in (("prefill", "context_attention_perf"), ("decode", "generation_attention_perf")):
        if name in tables:
            out.append(_gqa_rows(tables[name], phase, hw))
    for phase, name in (("prefill", "mla_context_module_perf"), ("decode", "mla_generation_module_perf")):
        if name in tables:
            out.append(_mla_rows(tables[name], phase, hw, prof))
    return [r for r in out if r is not None]


def _core_shapes(model, comp, phase: str, batch, ctx, tp: float, hw) -> np.ndarray:
    """[N, 5] per row: FLOPs, bytes, efficiency batch, context and heads, exactly as attention.py forms them."""
    ds = Profile(name="shape-only")
    heads = attn.kernel_heads(model, comp, tp, phase, hw)
    rows = []
    for b, s in zip(batch, ctx):
        if phase == "prefill":  # b sequences of s new tokens, nothing cached
            _, fl, by = attn.prefill_component(model, comp, ((float(b), float(s), 0.0),), tp, 1, hw, ds)
        else:  # b sequences at context s
            _, fl, by = attn.decode_component(model, comp, float(b), float(b) * s, 1.0, tp, 1, hw, ds)
        rows.append((float(fl), float(by), float(b), float(s), heads))
    return np.array(rows)


def _core_predict(kind: str, phase: str, shapes: np.ndarray, hw, fixed=None):
    flops, nbytes, batch, ctx, heads = shapes.T
    peak = hw.flops_for("bf16")

    def predict(prof, i):
        eff = efficiency.attention(prof, phase, kind, "bf16", batch[i], ctx[i], flops[i], heads[i])
        sec = price(flops[i], nbytes[i], peak, eff, hw, prof)
        return sec if fixed is None else sec + fixed[i]
    return predict


def _gqa_rows(t: Table, phase: str, hw) -> ClassRows | None:
    c = read(t)
    ctx_col = "isl" if phase == "prefill" else "step"
    base = ((c["head_dim"] == 128) & (c["window_size"] == 0) & (c["kv_cache_dtype"] == "bfloat16")
            & np.isin(np.asarray(c["num_heads"]) * 100 + np.asarray(c["num_key_value_heads"]), GQA_SHAPES))
    if not np.any(base):
        return None
    kernel = most_rows(c["kernel_source"][base])
    sel = base & (c["kernel_source"] == kernel)
    keys = list(zip(c["num_heads"][sel], c["num_key_value_heads"][sel]))
    shapes = np.empty((int(sel.sum()), 5))
    for hk in sorted(set(keys)):
        rows = np.array([key == hk for key in keys])
        model, comp = _gqa(int(hk[0]), int(hk[1]), 128, 2.0)
        shapes[rows] = _core_shapes(model, comp, phase, c["batch_size"][sel][rows], c[ctx_col][sel][rows], 1, hw)
    return ClassRows(f"attn.{phase}.gqa.bf16", t, c["seconds"][sel], _core_predict("gqa", phase, shapes, hw),
                     ATTN_START, ATTN_FIELDS,
                     "Qwen3-235B heads per rank at TP 1-8 (64/4, 32/2, 16/1, 8/1), head_dim 128, BF16 KV, no window",
                     kernel, configs=2, optional=("z_half",))


def _mla_rows(t: Table, phase: str, hw, prof: Profile) -> ClassRows | None:
    c = read(t)
    ctx_col = "isl" if phase == "prefill" else "step"
    if ctx_col not in c:
        return None
    base = ((c["model"] == "deepseek-ai/DeepSeek-V3") & (c["mla_dtype"] == "bfloat16") & (c["num_heads"] == 128)
            & (c["kv_cache_dtype"] == "bfloat16") & (c["gemm_type"] == "bfloat16"))
    if not np.any(base):
        return None
    dispatch = MLA_PREFILL_DISPATCH.get(ARCH.get(hw.name, ""), ()) if phase == "prefill" else ()
    sel, ranges, kernel = dispatched_rows(c["kernel_source"], c[ctx_col].astype(float), base, dispatch)
    model, comp = _mla(2.0)
    heads, batch, ctx = (c[x][sel].astype(float) for x in ("num_heads", "batch_size", ctx_col))
    shapes = np.empty((len(heads), 5))
    for h in sorted(set(heads)):
        rows = heads == h
        shapes[rows] = _core_shapes(model, comp, phase, batch[rows], ctx[rows], model.attention.num_heads / h, hw)
    tokens = batch * ctx if phase == "prefill" else batch
    tp = model.attention.num_heads / heads
    proj = projection_seconds(model, tokens, tp, "bf16", hw, prof) + module_elementwise_seconds(model, tokens, tp,
                                                                                                hw, prof)
    return ClassRows(f"attn.{phase}.mla.bf16", t, c["seconds"][sel], _core_predict("mla", phase, shapes, hw, proj),
                     ATTN_START, ATTN_FIELDS,
                     "DeepSeek-V3, all 128 heads on the rank (DP attention), BF16 MLA, KV and projections; "
                     "module = attn.proj (gemm curves) + latent norms + RoPE (as layer.py prices them) + attn.core"
                     + ("; one curve per backend vLLM runs by isl (" + ", ".join(
                         f"{k} ({lo:g}, {hi or math.inf:g}]" for lo, hi, k in dispatch) + ")" if ranges else ""),
                     kernel, configs=2, optional=("z_half",), ranges=ranges, x=ctx if ranges else None,
                     range_kernels=tuple(k for *_, k in dispatch) if ranges else ())


def mla_kernel_rows(t: Table, hw, kernel: str) -> ClassRows | None:
    """attn.prefill.mla.bf16 from a per-kernel MLA prefill table (context_mla_perf: the attention kernel alone,
    no projections, norms or RoPE): DeepSeek-V3's MLA with `num_heads` heads on the rank, BF16 math and KV,
    nothing cached; rows of `kernel` only. Priced as attention.prefill_component prices the core."""
    c = read(t)
    base = ((c["kernel_source"] == kernel) & (c["mla_dtype"] == "bfloat16") & (c["kv_cache_dtype"] == "bfloat16")
            & (c["step"] == 0))
    if not np.any(base):
        return None
    model, comp = _mla(2.0)
    heads, batch, isl = (c[x][base].astype(float) for x in ("num_heads", "batch_size", "isl"))
    shapes = np.empty((len(heads), 5))
    for h in sorted(set(heads)):
        rows = heads == h
        shapes[rows] = _core_shapes(model, comp, "prefill", batch[rows], isl[rows], model.attention.num_heads / h, hw)
    return ClassRows("attn.prefill.mla.bf16", t, c["seconds"][base], _core_predict("mla", "prefill", shapes, hw),
                     ATTN_START, ATTN_FIELDS,
                     f"DeepSeek-V3 MLA prefill kernel alone ({kernel}), 1-128 heads on the rank, BF16, no prefix",
                     kernel, configs=2, optional=("z_half",))


def dispatched_rows(kernels: np.ndarray, x: np.ndarray, base: np.ndarray, dispatch) -> tuple[np.ndarray, tuple, str]:
    """(row selection [N], ClassRows ranges, kernel names) of a table whose rows carry the kernel_source vLLM ran:
    under `dispatch` ((x_min, x_max, kernel_source) ranges, x_min < x <= x_max, 0 open) every `base` row of each
    range's kernel inside its range, one range (x_min, x_max, no tile) per kernel; without one, the kernel with
    most rows (most_rows) and no ranges."""
    kernels = np.asarray(kernels).astype(str)
    if not dispatch:
        kernel = most_rows(kernels[base])
        return base & (kernels == kernel), (), kernel
    sel = np.zeros(len(kernels), bool)
    for lo, hi, k in dispatch:
        sel |= base & (kernels == k) & (x > lo) & ((x <= hi) if hi else True)
    return sel, tuple((lo, hi, 0.0) for lo, hi, _ in dispatch), ", ".join(k for *_, k in dispatch)


def module_elementwise_seconds(model: ModelSpec, tokens, tp, hw, prof: Profile) -> np.ndarray:
    """Seconds per layer of the elementwise kernels vLLM's MLA module runs besides its projections and the
    attention kernel, priced as sim/cost/prices.py prices them in a step (so a module-table fit does not
    leave them in attn.core, which a step prices again beside its own `norm` and `rope`): the q_a and kv_a
    latent RMSNorms (DeepseekV2MLAAttention's q_a_layernorm, kv_a_layernorm: two kernels reading and writing
    [tokens, q_lora_rank + kv_lora_rank]; the latent share of elementwise.norm_bytes) and the rotary
    embedding (elementwise.rope_bytes) at `tokens` rows and TP `tp` (arrays)."""
    tokens, tp = np.asarray(tokens, float), np.asarray(tp, float)
    att, act = model.attention, model.dtypes.activation_bytes
    latent = 2.0 * tokens * act * ((att.q_lora_rank or 0) + (att.kv_lora_rank or 0))
    norms = stream_seconds(hw, prof, "norm", latent, tokens, model.hidden_size) + prof.op_fixed_s  # 2 kernels
    return norms + stream_seconds(hw, prof, "rope", rope_bytes(model, tokens, tp), tokens, model.hidden_size)


def projection_seconds(model: ModelSpec, tokens, tp, dtype: str, hw, prof: Profile) -> np.ndarray:
    """attn.proj seconds per layer for `tokens` rows at TP `tp` (arrays), as step.py's GEMM table
    forms them: every projection's output split by TP, weights in `dtype`."""
    tokens, tp = np.asarray(tokens, float), np.asarray(tp, float)
    total = np.zeros_like(tokens)
    for _, k, n in model.attention.projections(model.hidden_size):
        n_r = n / tp
        flops = 2.0 * tokens * k * n_r
        nbytes = k * n_r * DTYPE_BYTES[dtype] + tokens * (k + n_r) * 2.0
        total += price_gemm(flops, nbytes, hw.flops_for(dtype), dtype, tokens, n_r, k, hw, prof)
    return total


# vLLM's all-reduce dispatch (CudaCommunicator.all_reduce, which the collector calls through
# tensor_model_parallel_all_reduce inside a CUDA graph: aiconfigurator collector/collect_all_reduce.py):
# the custom all-reduce below its size limit, then symmetric memory below its own, then NCCL. Limits in
# bytes by compute capability and group size: vllm/distributed/device_communicators/all_reduce_utils.py
# (CUSTOM_ALL_REDUCE_MAX_SIZES, SYMM_MEM_ALL_REDUCE_MAX_SIZES; the custom kernel serves 2, 4, 6, 8 GPUs);
# inside the custom kernel one-shot (1-stage) below 512 KiB at <= 4 GPUs and 256 KiB at <= 8, two-shot
# above, always one-shot at 2 GPUs (csrc/custom_all_reduce.cuh). Compute capability per system: the
# tables' collection_meta.yaml (`compute_capability`).
MIB = 1024.0 * 1024.0
CUSTOM_AR_MAX = {"9.0": {2: 64 * MIB, 4: 32 * MIB, 6: MIB / 2, 8: MIB / 4},
                 "10.0": {2: 2 * MIB, 4: 2 * MIB, 6: 1 * MIB, 8: 1 * MIB},
                 "10.3": {2: 4 * MIB, 4: 4 * MIB, 6: 8 * MIB, 8: 4 * MIB}}
SYMM_MEM_MAX = {"9.0": {2: 64 * MIB, 4: 32 * MIB, 6: 64 * MIB, 8: 64 * MIB},
                "10.0": {2: 8 * MIB, 4: 32 * MIB, 6: 128 * MIB, 8: 128 * MIB},
                "10.3": {2: 4 * MIB, 4: 32 * MIB, 6: 32 * MIB, 8: 64 * MIB}}
COMPUTE_CAPABILITY = {"h100-sxm": "9.0", "h200-sxm": "9.0", "b200": "10.0", "gb200-nvl72": "10.0",
                      "gb300-nvl72": "10.3", "b300": "10.3"}
ALLREDUCE_MIN_ROWS = 3  # a regime with fewer table rows than this joins its neighbour


def allreduce_regimes(hw_name: str, gpus: int, nbytes) -> tuple[tuple[float, float], ...]:
    """[lo, hi) byte ranges of the kernels vLLM dispatches an all-reduce of `gpus` GPUs to, each holding
    at least ALLREDUCE_MIN_ROWS of the rows' sizes `nbytes`; one range for a system or group size the
    dispatch table does not list (NCCL only)."""
    cc = COMPUTE_CAPABILITY.get(hw_name)
    if cc is None or gpus not in CUSTOM_AR_MAX[cc]:
        return ((0.0, math.inf),)
    custom, symm = CUSTOM_AR_MAX[cc][gpus], max(SYMM_MEM_MAX[cc][gpus], CUSTOM_AR_MAX[cc][gpus])
    one_shot = custom if gpus == 2 else min(custom, 512 * 1024.0 if gpus <= 4 else 256 * 1024.0)
    edges = [0.0] + sorted({one_shot, custom, symm}) + [math.inf]
    nbytes = np.asarray(nbytes, float)
    kept = [0.0]
    for lo, hi in zip(edges[1:-1], edges[2:]):  # drop an edge whose range above holds too few rows
        if np.sum((nbytes >= lo) & (nbytes < hi)) >= ALLREDUCE_MIN_ROWS and \
                np.sum((nbytes >= kept[-1]) & (nbytes < lo)) >= ALLREDUCE_MIN_ROWS:
            kept.append(lo)
    bounds = kept + [math.inf]
    return tuple(zip(bounds[:-1], bounds[1:]))


def comm_rows(tables: dict[str, Table], hw: HardwareSpec) -> list[ClassRows]:
    """allreduce.tp<N>: vLLM's all-reduce inside a CUDA graph, group sizes within one domain; one curve
    per kernel regime of vLLM's dispatch by message size (allreduce_regimes), alpha-beta in each."""
    t = tables.get("custom_allreduce_perf")
    if t is None:
        return []
    c = read(t)
    out = []
    for gpus in sorted(set(int(g) for g in c["num_gpus"])):
        sel = (c["backend"] == "vllm_graph") & (c["num_gpus"] == gpus)
        if gpus > hw.domain_size or not np.any(sel):
            continue
        nbytes = c["message_size"][sel].astype(float) * 2.0  # BF16 elements

        def predict(prof, i, nbytes=nbytes, gpus=gpus):
            return allreduce_seconds(hw, prof, nbytes[i], gpus)

        regimes = allreduce_regimes(hw.name, gpus, nbytes)
        out.append(ClassRows(f"allreduce.tp{gpus}", t, c["seconds"][sel], predict,
                             Curve(eff_max=0.5, x_half=1e6, work_half=1e5, sharpness=2.0),
                             ("eff_max", "x_half", "work_half", "sharpness"),
                             f"backend vllm_graph, {gpus} GPUs, BF16 messages; regimes (bytes) "
                             + ", ".join(f"[{lo:g}, {hi:g})" for lo, hi in regimes), "vLLM_custom_graph",
                             regimes=regimes if len(regimes) > 1 else (), work=nbytes,
                             sparse_free=("eff_max", "work_half")))
    return out


def stream_rows(tables: dict[str, Table], hw: HardwareSpec) -> list[ClassRows]:
    """quantize.fp8 (dynamic per-token FP8) and mhc.pre / mhc.post: bytes moved over HBM."""
    out = []
    if "scale_matrix_perf" in tables:
        t = tables["scale_matrix_perf"]
        c = read(t)
        sel = c["quant_dtype"] == "fp8"
        m, k = c["m"][sel].astype(float), c["k"][sel].astype(float)
        q = _stream(t, "quantize.fp8", c["seconds"][sel], quantize_bytes(m, k, "fp8"), m, k, hw,
                    "quant_dtype fp8 (static scale)")
        out.append(_in_l2(q, hw))
    if "mhc_module_perf" in tables:
        t = tables["mhc_module_perf"]
        c = read(t)
        for part in ("pre", "post"):
            sel = c["op_name"] == part
            if not np.any(sel):
                continue
            tok, h, hc, sites = (c[x][sel].astype(float) for x in ("num_tokens", "hidden_size", "hc_mult",
                                                                    "num_sites"))
            # a row times all `sites` hyper-connection sites of a layer; the curve prices one (layer.py
            # runs two per layer: before attention and before the FFN)
            out.append(_stream(t, f"mhc.{part}", c["seconds"][sel] / sites, mhc_bytes(tok, h, hc, part), tok, h, hw,
                               f"op_name {part}, latency / num_sites (one site)"))
    return out


def _in_l2(rows: ClassRows, hw: HardwareSpec) -> ClassRows:
    """`rows` with two regimes of bytes moved, in and out of the L2 cache, where the hardware says its
    size: the collector replays one tensor, so a working set that fits L2 is read from it (on H100 the
    quantize rows of 20-40 MB run at 1.2-1.3x the HBM peak, those above 50 MB at 0.83; benchmarks/RESULTS.md
    2026-12-01 "vLLM's all-reduce dispatch and the L2 regime"); eff_max up to REGIME_EFF_MAX in L2."""
    if not hw.l2_bytes:
        return rows
    return dataclasses.replace(rows, regimes=((0.0, hw.l2_bytes), (hw.l2_bytes, math.inf)),
                               bounds={"eff_max": (1e-4, REGIME_EFF_MAX)},
                               selection=f"{rows.selection}; regimes in / out of L2 ({hw.l2_bytes / 1e6:g} MB moved)")


def _stream(t, key, seconds, nbytes, rows, cols, hw, selection) -> ClassRows:
    def predict(prof, i):
        return stream_seconds(hw, prof, key, nbytes[i], rows[i], cols[i])

    return ClassRows(key, t, seconds, predict, STREAM_START, ("eff_max", "x_half", "y_half", "work_half"),
                     selection, work=nbytes)
