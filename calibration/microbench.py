"""Measure the local device: matmul FLOP/s, copy bandwidth, and the host cost of one small op.

One thread per rank on CPU (the executor's setting), CUDA events on GPU. Medians of repeats after
a warm-up, because the machine is shared. torch is imported inside the functions only.
"""
from __future__ import annotations

import statistics
import time

MATMUL_N = 1024  # square fp32 (CPU) / bf16 (GPU) matmul
COPY_BYTES = 64 * 2**20  # 64 MiB: far beyond the caches


def _timeit(fn, device: str, repeats: int) -> float:
    """Median seconds of fn() over `repeats` runs after two warm-ups."""
    import torch

    for _ in range(2):
        fn()
    out = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def measure(device: str = "cpu", threads: int = 1, repeats: int = 7) -> dict[str, float]:
    """{'peak_flops', 'copy_bw' (bytes moved once per second), 'launch_s'} of this device."""
    import torch

    if device == "cpu":
        torch.set_num_threads(threads)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    a = torch.randn(MATMUL_N, MATMUL_N, dtype=dtype, device=device)
    b = torch.randn(MATMUL_N, MATMUL_N, dtype=dtype, device=device)
    t_mm = _timeit(lambda: torch.mm(a, b), device, repeats)
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    t_cp = _timeit(lambda: dst.copy_(src), device, repeats)
    x = torch.ones(8, device=device)
    t_small = _timeit(lambda: [x.add_(1.0) for _ in range(100)], device, repeats) / 100
    return {"peak_flops": 2.0 * MATMUL_N**3 / t_mm, "copy_bw": COPY_BYTES / t_cp, "launch_s": t_small,
            "dtype": "fp32" if device == "cpu" else "bf16", "threads": threads}


def hardware_yaml(meas: dict, base, date: str) -> tuple[object, str]:
    """A HardwareSpec with measured peak FLOP/s and bandwidth (topology kept from `base`), and a
    header comment saying how it was measured."""
    import dataclasses

    hw = dataclasses.replace(base, hbm_bw=float(meas["copy_bw"]), peak_flops={meas["dtype"]: float(meas["peak_flops"])},
                             source=f"measured by `rackplan calibrate --microbench` on {date}")
    header = (f"# {base.name}: measured {date} by `rackplan calibrate --microbench` "
              f"({meas['threads']} thread(s) per rank).\n"
              f"# {MATMUL_N}^3 {meas['dtype']} matmul: {meas['peak_flops'] / 1e9:.1f} GFLOP/s; "
              f"{COPY_BYTES >> 20} MiB copy: {meas['copy_bw'] / 1e9:.1f} GB/s counted once per byte "
              f"(read + write = 2x); small-op host cost {meas['launch_s'] * 1e6:.2f} us.\n"
              "# Interconnect fields are kept from the previous file; the all-to-all fit prices them.\n")
    return hw, header
