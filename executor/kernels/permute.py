"""Token permute (gather rows into expert order) and unpermute (weighted sum of each token's k
expert outputs), as Triton kernels with PyTorch references.

permute:   out[i] = x[idx[i]]                        x [T, H], idx [N] -> [N, H]
unpermute: out[t] = sum_j w[t, j] * y[pos[t, j]]     y [N, H], pos/w [T, k] -> [T, H]
"""
from __future__ import annotations

import torch

from . import jit, use_triton, widen

try:
    import triton.language as tl
except ImportError:  # kernels unavailable; the references still run
    tl = None

BLOCK_H = 256


def permute_ref(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x[idx]


def unpermute_ref(y: torch.Tensor, pos: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if pos.numel() == 0:
        return y.new_zeros(pos.shape[0], y.shape[1])
    return (y[pos].float() * w[..., None].float()).sum(1).to(y.dtype)  # [T, H]


def _permute_kernel(x_ptr, idx_ptr, out_ptr, H, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    src = tl.load(idx_ptr + row).to(tl.int64)
    vals = tl.load(x_ptr + src * H + cols, mask=cols < H)
    tl.store(out_ptr + row.to(tl.int64) * H + cols, vals, mask=cols < H)


def _unpermute_kernel(y_ptr, pos_ptr, w_ptr, out_ptr, H, K, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in range(0, K):
        r = tl.load(pos_ptr + t * K + j).to(tl.int64)
        wj = tl.load(w_ptr + t * K + j).to(tl.float32)
        acc += wj * tl.load(y_ptr + r * H + cols, mask=cols < H, other=0.0).to(tl.float32)
    tl.store(out_ptr + t.to(tl.int64) * H + cols, acc.to(out_ptr.dtype.element_ty), mask=cols < H)


def permute(x: torch.Tensor, idx: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """Rows of x [T, H] in the order idx [N] -> [N, H]."""
    if not use_triton(impl, x) or idx.numel() == 0:
        return permute_ref(x, idx)
    (xw,) = widen(x.contiguous())
    out = torch.empty(idx.numel(), x.shape[1], dtype=xw.dtype, device=x.device)
    grid = (idx.numel(), -(-x.shape[1] // BLOCK_H))
    jit(_permute_kernel)[grid](xw, idx.contiguous(), out, x.shape[1], BLOCK=BLOCK_H)
    return out.to(x.dtype)


def unpermute(y: torch.Tensor, pos: torch.Tensor, w: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """Weighted sum over each token's k rows of y [N, H]: pos/w [T, k] -> [T, H] (fp32 acc)."""
    if not use_triton(impl, y) or pos.numel() == 0:
        return unpermute_ref(y, pos, w)
    yw, ww = widen(y.contiguous(), w.float().contiguous())
    out = torch.empty(pos.shape[0], y.shape[1], dtype=yw.dtype, device=y.device)
    grid = (pos.shape[0], -(-y.shape[1] // BLOCK_H))
    jit(_unpermute_kernel)[grid](yw, pos.contiguous(), ww, out, y.shape[1], pos.shape[1], BLOCK=BLOCK_H)
    return out.to(y.dtype)
