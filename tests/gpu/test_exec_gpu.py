"""GPU checks of the executor (skipped without CUDA): compiled kernels vs references, a replay."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_gemm_and_permute_on_gpu(dtype):
    from rackplan.executor.kernels.grouped_gemm import grouped_gemm, grouped_gemm_ref
    from rackplan.executor.kernels.permute import permute, unpermute, unpermute_ref
    c = torch.tensor([33, 0, 7, 150])
    x = torch.randn(int(c.sum()), 512, device="cuda").to(dtype)
    w = (torch.randn(4, 512, 384, device="cuda") / 512 ** 0.5).to(dtype)
    tol = 1e-3 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(grouped_gemm(x, w, c, impl="triton").float(),
                               grouped_gemm_ref(x.float(), w.float(), c), rtol=tol, atol=tol)
    idx = torch.randint(0, x.shape[0], (300,), device="cuda")
    torch.testing.assert_close(permute(x, idx, impl="triton"), x[idx])
    pos, wt = torch.randint(0, x.shape[0], (50, 4), device="cuda"), torch.rand(50, 4, device="cuda")
    torch.testing.assert_close(unpermute(x, pos, wt, impl="triton").float(), unpermute_ref(x.float(), pos, wt),
                               rtol=tol, atol=tol)


def test_execute_tiny_on_one_gpu(tmp_path):
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(ROOT / "configs/plans/tiny-cpu.yaml"),
           "--device", "cuda", "--ranks", "1", "--steps", "2", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    from rackplan.executor.schema import read_measurements
    assert read_measurements(tmp_path)
