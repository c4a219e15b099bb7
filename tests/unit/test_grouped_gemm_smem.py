"""The grouped GEMM's autotune configs are filtered by the device's shared-memory limit."""
from types import SimpleNamespace

import pytest
import torch

from rackplan.executor.kernels import grouped_gemm as gg

pytestmark = pytest.mark.unit
H100_OPTIN = 232_448  # bytes per block, compute capability 9.0 (CUDA C Programming Guide)


def test_smem_estimate_by_hand():
    cfg = dict(BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=3)
    assert gg.smem_bytes(cfg, 128, 4) == 2 * (128 * 128 + 128 * 128) * 4 == 262_144  # the config
    assert gg.smem_bytes(cfg, 128, 2) == 131_072
    assert gg.smem_bytes(dict(cfg, num_stages=1), 16, 2) == (16 * 128 + 128 * 128) * 2


def test_configs_filtered_by_fake_limits(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    every = gg._configs(128, 4, None)
    assert len(every) == len(gg.CONFIGS)
    fp32 = gg._configs(128, 4, H100_OPTIN)
    assert dict(BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=3) not in fp32
    assert all(gg.smem_bytes(c, 128, 4) <= H100_OPTIN for c in fp32) and len(fp32) == len(every) - 1
    assert len(gg._configs(128, 2, H100_OPTIN)) == len(every)  # bf16 halves every tile: all fit
    small = gg._configs(128, 4, 101_376)  # an sm86 card's 99 KB opt-in
    assert small and all(gg.smem_bytes(c, 128, 4) <= 101_376 for c in small) and len(small) < len(fp32)
    with pytest.raises(ValueError, match="shared memory"):
        gg._configs(128, 4, 1024)


def test_smem_limit_reads_the_device_properties(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda dev: SimpleNamespace(shared_memory_per_block_optin=H100_OPTIN))
    assert gg.smem_limit("cuda:0") == H100_OPTIN
    assert gg.smem_limit("cpu") is None
