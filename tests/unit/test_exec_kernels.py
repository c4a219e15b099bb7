"""Triton kernels equal their PyTorch references under the interpreter (fp32, fp16, bf16 widened).

triton.language decides interpreted vs compiled when it is first imported, so these run only in
a process started with TRITON_INTERPRET=1; test_exec_kernels_interp.py starts one."""
from __future__ import annotations

import pytest
import torch

from rackplan.executor.kernels import interpreting
from rackplan.executor.kernels.grouped_gemm import grouped_gemm, grouped_gemm_ref
from rackplan.executor.kernels.permute import permute, permute_ref, unpermute, unpermute_ref

pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(not interpreting(), reason="needs TRITON_INTERPRET=1 from process start")]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 3e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("counts", [[5, 0, 17, 3], [0, 0, 1], [40]])
def test_grouped_gemm_matches_reference(dtype, counts):
    gen = torch.Generator().manual_seed(len(counts))
    c = torch.tensor(counts)
    x = torch.randn(int(c.sum()), 48, generator=gen).to(dtype)
    w = torch.randn(len(counts), 48, 40, generator=gen).to(dtype)
    got = grouped_gemm(x, w, c, impl="triton")
    ref = grouped_gemm_ref(x.float(), w.float(), c)
    assert got.dtype == dtype
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.float(), ref, rtol=rtol, atol=atol * 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_permute_unpermute_match_reference(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(25, 300, generator=gen).to(dtype)  # H not a multiple of the block
    idx = torch.randint(0, 25, (40,), generator=gen)
    torch.testing.assert_close(permute(x, idx, impl="triton"), permute_ref(x, idx))
    pos = torch.randint(0, 25, (10, 3), generator=gen)
    w = torch.rand(10, 3, generator=gen)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(unpermute(x, pos, w, impl="triton").float(),
                               unpermute_ref(x.float(), pos, w), rtol=rtol, atol=atol)


def test_empty_inputs():
    x = torch.zeros(0, 8)
    assert grouped_gemm(x, torch.zeros(2, 8, 4), torch.tensor([0, 0]), impl="triton").shape == (0, 4)
    assert unpermute(torch.zeros(0, 8), torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, 2),
                     impl="triton").shape == (0, 8)
