"""DeepGEMM's SM90 configuration choice for fp8_gemm_nt (block-FP8 dense GEMMs on H100 / H200), as a tile rule a
GEMM curve can name (rackplan.specs.Curve.tile_rule): which (block_m, block_n, cluster) the kernel picks for
[m, k] x [k, n] on `sms` SMs, the configuration group that sets its speed, and the work its tiles pad to.

Source: deepseek-ai/DeepGEMM csrc/jit_kernels/heuristics/sm90.hpp (identical from 7f2a703 2026-04-17 to 54e2261
2026-06-23): SM90ArchSpec::get_layout_candidates (l. 16-118: block_m 64, 128, then 16 at m <= 16, 32 at m <= 32,
256 for a BF16 output; block_n 16..192 step 16 for the 1D2D kernel; the 1D2D unroll rule; not both > 128; stages
>= 3, >= 4 below 128 x 192; clusters 1x1, 1x2, 2x1), get_pipeline_config (l. 148-187: the stage count from
232,448 B of shared memory), get_layout_info (l. 201-238: L1/L2 cycles over the wave efficiency, multicast refused
at one wave, l. 233-235) and compare (l. 240-243: fewest modelled cycles; common.hpp get_best_config keeps the
first of equals). The SGLang 0.5.14 h200 / h100 tables run this cycle model, not the older common.hpp heuristic
(benchmarks/RESULTS.md, 2026-12-02 "DeepGEMM's SM90 configuration in the fp8_block fit").

Groups (chosen from the residuals by configuration, that section): 1 one CTA per cluster; 2 the same at one wave
with a tile of >= 128 x 192 (3-4 stages, the stage rule's boundary, l. 107); 3 a 2-CTA cluster (multicast).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

SMEM = 232448  # B, SM90ArchSpec::smem_capacity
BLOCK_K = 128  # 128 / element size (FP8)
BIG_TILE = 128 * 192  # block_m x block_n from which 3 stages suffice (get_layout_candidates l. 107)
GROUPS = (1, 2, 3)  # configuration groups (module docstring)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _stages(m_blk: int, n_blk: int, k: int) -> int:
    """get_pipeline_config for the 1D2D FP8 kernel with a BF16 output."""
    cd = _cdiv(m_blk * n_blk * 2, 1024) * 1024
    sfb = _cdiv(_cdiv(k, BLOCK_K) * 4 * (1 if BLOCK_K % n_blk == 0 else 2), 8) * 8
    per_stage = m_blk * BLOCK_K + n_blk * BLOCK_K + _cdiv(m_blk * 4, 128) * 128
    return min((SMEM - cd - 16 * 8 * 2 - sfb) // per_stage, 16)


@lru_cache(maxsize=None)
def _candidates(small: int, k: int) -> tuple[np.ndarray, ...]:
    """(cluster m, cluster n, block_m, block_n) of get_layout_candidates, in its order, as int64 arrays; small:
    2 for m <= 16 (block_m 16 and 32 allowed), 1 for m <= 32 (32), 0 above."""
    block_ms = [64, 128] + ([16] if small == 2 else []) + ([32] if small else []) + [256]
    out = []
    for cm, cn in ((1, 1), (1, 2), (2, 1)):
        for m_blk in block_ms:
            for n_blk in range(16, 193, 16):
                d = n_blk - BLOCK_K
                if d > 0 and n_blk % d and BLOCK_K % d or (m_blk > 128 and n_blk > 128):
                    continue
                st = _stages(m_blk, n_blk, k)
                if st >= 3 and (m_blk * n_blk >= BIG_TILE or st >= 4):
                    out.append((cm, cn, m_blk, n_blk))
    return tuple(np.array(col, np.int64) for col in zip(*out))


@lru_cache(maxsize=None)
def sm90_config(m: int, n: int, k: int, sms: int) -> tuple[int, int, int, int]:
    """(block_m, block_n, cluster CTAs, waves) DeepGEMM's SM90 fp8_gemm_nt picks for [m, k] x [k, n] on `sms`
    SMs (HardwareSpec.num_sms: 132 on H100 / H200 SXM5): the first of the fewest modelled cycles of
    get_layout_info (L1 and L2 cycles over the wave efficiency; a multi-CTA cluster refused at one wave), over
    every candidate at once (integer arithmetic as the C++ does it)."""
    cm, cn, mb, nb = _candidates(2 if m <= 16 else 1 if m <= 32 else 0, k)
    blocks = (-(-m // mb)) * (-(-n // nb))
    waves = -(-blocks // sms)
    l2 = (k * (mb // cn + nb // cm) + mb * nb * 2) * blocks // int(min(64.0 * sms, 8e6 / 1.3e3))
    l1 = (k * (mb + nb) + k * (np.maximum(64, mb) + nb) + mb * nb * 4) * blocks // (128 * sms)
    cycles = (np.maximum(l1, l2) / (blocks / (waves * sms))).astype(np.int64)
    cycles[(cm * cn > 1) & (waves <= 1)] = 2 ** 63 - 1
    best = int(np.argmin(cycles))  # (the first of equals, as compare keeps it)
    return int(mb[best]), int(nb[best]), int(cm[best] * cn[best]), int(waves[best])


@lru_cache(maxsize=None)
def sm90_group(m: int, n: int, k: int, sms: int) -> int:
    """The configuration group (GROUPS) of the configuration sm90_config picks."""
    m_blk, n_blk, ctas, waves = sm90_config(m, n, k, sms)
    if ctas > 1:
        return 3
    return 2 if waves == 1 and m_blk * n_blk >= BIG_TILE else 1


@lru_cache(maxsize=None)
def sm90_padded(m: int, n: int, k: int, sms: int) -> float:
    """Work the chosen tiles do over the useful work: ceil(m / block_m) block_m ceil(n / block_n) block_n / (m n)."""
    m_blk, n_blk, _, _ = sm90_config(m, n, k, sms)
    return _cdiv(m, m_blk) * m_blk * _cdiv(n, n_blk) * n_blk / (m * n)


# tile rules a Curve can name (Curve.tile_rule): name -> (group of (m, n, k, sms), padded work of (m, n, k, sms))
TILE_RULES = {"deepgemm_sm90": (sm90_group, sm90_padded)}


def rule_at(rule: str, m, n, k, sms: int):
    """(group, padded work) of tile rule `rule` at (m, n, k) on `sms` SMs, scalars or arrays of one shape; an
    unknown n or k (<= 0) or m <= 0 gives group 0 (no curve of the rule holds it) and padded work 1. A fractional
    size (an average of rows per rank) is rounded up: the kernel runs whole rows."""
    if isinstance(m, (int, float)) and isinstance(n, (int, float)) and isinstance(k, (int, float)):
        if m <= 0 or n <= 0 or k <= 0:
            return 0, 1.0
        group, padded = TILE_RULES[rule]
        s = (math.ceil(m), math.ceil(n), math.ceil(k), sms)
        return group(*s), padded(*s)
    m, n, k = np.broadcast_arrays(np.asarray(m, float), np.asarray(n, float), np.asarray(k, float))
    return _rule_rows(rule, m.tobytes(), n.tobytes(), k.tobytes(), m.shape, sms)


@lru_cache(maxsize=64)
def _rule_rows(rule: str, m: bytes, n: bytes, k: bytes, shape: tuple, sms: int):
    """rule_at over arrays, remembered by their bytes (a fit re-prices the same rows under every trial curve)."""
    cols = [np.frombuffer(b, float).reshape(shape) for b in (m, n, k)]
    out = [rule_at(rule, float(a), float(b), float(c), sms) for a, b, c in zip(*(x.ravel() for x in cols))]
    group = np.array([g for g, _ in out], float).reshape(shape)
    padded = np.array([p for _, p in out], float).reshape(shape)
    group.flags.writeable = padded.flags.writeable = False
    return group, padded
