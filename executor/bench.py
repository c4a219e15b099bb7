"""Kernel benchmarks for the GPU check: Triton grouped GEMM vs one torch matmul of the same
FLOPs, and a decode-shaped MoE (few tokens per expert: weight-read bound) in bytes/s against a
large device-to-device copy. `python -m rackplan.executor.bench --out DIR` writes DIR/bench.json; without
CUDA it prints what it would run and exits 0 (dry run).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

# (name, experts on the rank, tokens per expert, hidden, expert width): DeepSeek-V3 shapes
CASES = [("v3-prefill-dep2", 128, 256, 7168, 2048), ("v3-decode-dep8", 32, 16, 7168, 2048),
         ("v3-decode-dep72", 4, 16, 7168, 2048), ("v41-decode-dep32", 12, 16, 5120, 2304)]


def bench(fn, reps: int = 20) -> float:
    """Seconds per call: warm-up, then CUDA events around `reps` calls, L2 flushed before each."""
    import torch
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return sorted(times)[len(times) // 2]


def run_case(name, experts, per_expert, hidden, inter) -> dict:
    import torch

    from .kernels.grouped_gemm import grouped_gemm
    dt = torch.bfloat16
    counts = torch.full((experts,), per_expert)
    x = torch.randn(experts * per_expert, hidden, device="cuda", dtype=dt)
    w = torch.randn(experts, hidden, 2 * inter, device="cuda", dtype=dt) * hidden ** -0.5
    dense_b = torch.randn(hidden, 2 * inter, device="cuda", dtype=dt)
    t_tri = bench(lambda: grouped_gemm(x, w, counts, impl="triton"))
    t_ref = bench(lambda: x @ dense_b)  # same FLOPs in one matmul
    flops = 2.0 * x.shape[0] * hidden * 2 * inter
    nbytes = w.numel() * w.element_size() + x.numel() * 2 + x.shape[0] * 2 * inter * 2
    return {"case": name, "rows": x.shape[0], "triton_s": t_tri, "torch_same_flops_s": t_ref,
            "triton_tflops": flops / t_tri / 1e12, "torch_tflops": flops / t_ref / 1e12,
            "triton_bytes_per_s": nbytes / t_tri}


def copy_bandwidth() -> float:
    import torch
    a = torch.empty(2 * 2**30, dtype=torch.int8, device="cuda")
    b = torch.empty_like(a)
    return 2 * a.numel() / bench(lambda: b.copy_(a), reps=10)  # read + write bytes/s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        for case in CASES:
            print(f"dry run (no CUDA): would bench grouped GEMM {case}")
        print("dry run (no CUDA): would bench a 2 GiB device copy")
        return 0
    res = {"device": torch.cuda.get_device_name(), "copy_bytes_per_s": copy_bandwidth(),
           "cases": [run_case(*c) for c in CASES]}
    for c in res["cases"]:
        c["fraction_of_copy_bw"] = c["triton_bytes_per_s"] / res["copy_bytes_per_s"]
        print(json.dumps(c))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
