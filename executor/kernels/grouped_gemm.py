"""Grouped expert GEMM: y[rows of group g] = x[rows of group g] @ w[g], one launch for all groups.

x [N, K] rows sorted by group, w [G, K, M], counts [G] (rows per group) -> y [N, M]. The host
builds a table of (group, first row, end row) per BLOCK_M tile, so tiles never straddle two
experts and empty experts cost nothing; BLOCK_M follows the mean rows per expert (16 for
decode, up to 128 for prefill), the rest is autotuned (one config under the interpreter).
"""
from __future__ import annotations

import torch

from . import interpreting, jit, use_triton, widen

try:
    import triton
    import triton.language as tl
    import triton.runtime.errors
except ImportError:  # kernels unavailable; the reference still runs
    triton = tl = None


def grouped_gemm_ref(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Reference: one matmul per group."""
    out = x.new_empty(x.shape[0], w.shape[2])
    start = 0
    for g, n in enumerate(counts.tolist()):
        if n:
            out[start:start + n] = x[start:start + n] @ w[g]
        start += n
    return out


def _kernel(x_ptr, w_ptr, y_ptr, table_ptr, K, M, s_wg, IEEE: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tile = tl.program_id(0)
    g = tl.load(table_ptr + tile * 3).to(tl.int64)
    m0 = tl.load(table_ptr + tile * 3 + 1).to(tl.int64)
    m_end = tl.load(table_ptr + tile * 3 + 2).to(tl.int64)
    rm = m0 + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < m_end) & (kk[None, :] < K),
                    other=0.0)
        b = tl.load(w_ptr + g * s_wg + kk[:, None] * M + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < M),
                    other=0.0)
        if IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    tl.store(y_ptr + rm[:, None] * M + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < m_end) & (rn[None, :] < M))


CONFIGS = ((128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 4), (256, 64, 8, 3), (64, 32, 4, 2))
# (BLOCK_N, BLOCK_K, warps, stages); the last is small enough for any CUDA device's shared memory


def smem_bytes(cfg: dict, block_m: int, elem_bytes: int) -> int:
    """Shared memory one program of a config holds: Triton's software pipeline keeps num_stages - 1
    (at least one) buffers of an A tile [BLOCK_M, BLOCK_K] and a B tile [BLOCK_K, BLOCK_N]. fp32 at
    BLOCK_M 128 with (128, 128, 8, 3): 2 x (128 x 128 + 128 x 128) x 4 = 262,144 B, above an H100's or
    H200's 232,448 B per block (CUDA C Programming Guide, compute capability 9.0: 227 KB opt-in)."""
    tiles = block_m * cfg["BLOCK_K"] + cfg["BLOCK_K"] * cfg["BLOCK_N"]
    return max(1, cfg["num_stages"] - 1) * tiles * elem_bytes


def smem_limit(device) -> int | None:
    """Bytes of shared memory a block may opt into on `device` (torch's device properties, else
    Triton's driver); None off CUDA."""
    import torch
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(dev)
    limit = getattr(props, "shared_memory_per_block_optin", None)
    if limit is None:
        limit = triton.runtime.driver.active.utils.get_device_properties(dev.index or 0)["max_shared_mem"]
    return int(limit)


def _configs(block_m: int = 128, elem_bytes: int = 2, limit: int | None = None) -> list[dict]:
    """Autotune space that fits `limit` bytes of shared memory (None: no limit); a single config
    under the interpreter."""
    if interpreting():
        return [dict(BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=1)]  # fewer interpreted programs
    cfgs = [dict(BLOCK_N=n, BLOCK_K=k, num_warps=w, num_stages=s) for n, k, w, s in CONFIGS]
    fit = [c for c in cfgs if limit is None or smem_bytes(c, block_m, elem_bytes) <= limit]
    if not fit:
        raise ValueError(f"no grouped-GEMM config fits {limit} B of shared memory at BLOCK_M {block_m}, "
                         f"{elem_bytes}-byte elements")
    return fit


def block_m_for(rows: int, groups: int) -> int:
    mean = rows / max(groups, 1)
    return 16 if mean <= 16 else 32 if mean <= 32 else 64 if mean <= 64 else 128


_TABLES: dict = {}


def tile_table(counts: list[int], block_m: int, device) -> torch.Tensor:
    """[tiles, 3] int32 rows of (group, first row, end row), one per BLOCK_M tile. Cached per
    counts, so a replayed step (fixed counts) builds it once and can be captured in a CUDA graph."""
    key = (tuple(counts), block_m, str(device))
    if key not in _TABLES:
        if len(_TABLES) > 256:
            _TABLES.clear()
        _TABLES[key] = _build_table(counts, block_m, device)
    return _TABLES[key]


def _build_table(counts: list[int], block_m: int, device) -> torch.Tensor:
    rows, start = [], 0
    for g, n in enumerate(counts):
        rows += [(g, m0, start + n) for m0 in range(start, start + n, block_m)]
        start += n
    return torch.tensor(rows, dtype=torch.int32, device=device).view(-1, 3)


_BEST: dict = {}


def grouped_gemm(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """x [N, K] grouped rows, w [G, K, M], counts [G] -> [N, M] (fp32 accumulation)."""
    if not use_triton(impl, x) or x.shape[0] == 0:
        return grouped_gemm_ref(x, w, counts)
    xw, ww = widen(x.contiguous(), w.contiguous())
    n_rows, k = xw.shape
    m = ww.shape[2]
    cnt = counts.tolist()
    block_m = block_m_for(n_rows, len(cnt))
    table = tile_table(cnt, block_m, x.device)
    y = torch.empty(n_rows, m, dtype=xw.dtype, device=x.device)
    key = (block_m, k, m, str(xw.dtype), interpreting())
    cfgs = [_BEST[key]] if key in _BEST else _configs(block_m, xw.element_size(), smem_limit(x.device))
    best, best_s = None, float("inf")
    for cfg in cfgs:
        launch = lambda c=cfg: _launch(xw, ww, y, table, k, m, block_m, c)
        try:
            sec = _time(launch) if len(cfgs) > 1 else (launch() or 0.0)
        except triton.runtime.errors.OutOfResources:  # the estimate above missed a compiler buffer
            if len(cfgs) == 1:
                raise
            continue
        if sec < best_s:
            best, best_s = cfg, sec
    if len(cfgs) > 1:
        _BEST[key] = best
        _launch(xw, ww, y, table, k, m, block_m, best)
    return y.to(x.dtype)


def _launch(x, w, y, table, k, m, block_m, cfg):
    meta = dict(cfg)
    grid = (table.shape[0], triton.cdiv(m, meta["BLOCK_N"]))
    jit(_kernel)[grid](x, w, y, table, k, m, w.stride(0), IEEE=x.dtype == torch.float32, BLOCK_M=block_m,
                       **meta)


def _time(fn, reps: int = 3) -> float:
    """Seconds per launch on CUDA (autotuning only runs on GPU)."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps
