"""Triton kernels for the MoE hot path, each with a plain-PyTorch reference beside it.

`impl="auto"` uses Triton on CUDA tensors and under TRITON_INTERPRET=1 (the CPU interpreter,
used by the tests), and the PyTorch reference otherwise.
"""
from __future__ import annotations

import os


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def use_triton(impl: str, tensor) -> bool:
    """Whether `impl` ('auto', 'triton', 'torch') runs the Triton kernel for `tensor`."""
    if impl == "torch":
        return False
    if impl == "triton":
        return True
    if not (tensor.is_cuda or interpreting()):
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


_JIT_CACHE: dict = {}


def jit(fn):
    """Compile `fn` with triton.jit on first use, separately for interpreted and compiled mode:
    triton decides at decoration time, and tests switch TRITON_INTERPRET at run time."""
    key = (fn.__module__, fn.__qualname__, interpreting())
    if key not in _JIT_CACHE:
        import triton
        _JIT_CACHE[key] = triton.jit(fn)
    return _JIT_CACHE[key]


def widen(*tensors):
    """The interpreter has no bf16 arithmetic: run bf16 in fp32 there (cast back by the caller)."""
    if not interpreting():
        return tensors
    import torch
    return tuple(t.float() if t.dtype == torch.bfloat16 else t for t in tensors)
