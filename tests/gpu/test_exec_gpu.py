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


def test_fp8_weights_on_gpu():
    from rackplan.executor.fp8 import FP8Weight, supported
    if not supported("cuda:0"):
        pytest.skip("FP8 GEMMs need compute capability 8.9+")
    x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16) / 512 ** 0.5
    y, want = (x @ FP8Weight(w)).float(), (x @ w).float()
    assert ((y - want).norm() / want.norm()).item() < 0.06


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_replay_measures_all_to_all_between_gpus(tmp_path):
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(ROOT / "configs/plans/tiny-cpu-replay.yaml"),
           "--device", "cuda", "--ranks", "2", "--steps", "2", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    from rackplan.executor.schema import read_measurements
    comm = [r for r in read_measurements(tmp_path) if r["op"] in ("moe.dispatch", "moe.combine")]
    assert comm and {r["source"] for r in comm} == {"measured"}


@pytest.mark.skipif(torch.cuda.device_count() < 3, reason="needs 3 GPUs")
def test_disaggregated_serving_on_gpus(tmp_path):
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", "tiny-disagg", "--device", "cuda",
           "--workload", "tiny-chat", "--requests", "6", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    from rackplan.executor.schema import read_measurements
    reqs = [r for r in read_measurements(tmp_path) if r["op"] == "request"]
    assert len(reqs) == 6 and all(r["kv_checksum_sent"] == r["kv_checksum_recv"] for r in reqs)
    assert all(len(r["output_tokens"]) == r["osl"] for r in reqs)
