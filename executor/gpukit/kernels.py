"""The kit's kernel sweep at DeepSeek-V3 / V4.1 per-rank shapes, one JSON line per timing.

    python -m rackplan.executor.gpukit.kernels --out kernels.jsonl [--tiny] [--device cpu]

What it times (each record says kind, impl, dtype, shape and seconds; a case that fails records its error):
- gemm: the model's attention projections and its expert GEMMs as dense GEMMs at m tokens, bf16
  (torch.matmul) and FP8 (the executor's FP8Weight: per-row activation quantisation included);
- experts: one rank's routed-expert FFN (w13, SwiGLU, w2) at the replay plans' per-rank shapes (experts
  E / DEP, rows per expert tokens x DEP x top_k / E) through the executor's Triton grouped GEMM,
  torch._grouped_mm, a per-expert loop (bf16) and the executor's FP8 per-slot path, each record with its
  output's relative error against the loop's;
- attention: the executor's attention (MLA for V3, csa for V4.1) decode at batch x context and prefill;
- floor: the same decode attention at batch 1-8, eager launches vs one CUDA-graph replay (the gap is the
  launch floor of many small kernels; CPU: eager only);
- peak: a large bf16 and FP8 matmul and a device-to-device copy.
--tiny: the rehearsal's shapes (plans.standin: tiny-moe sizes with each model's experts and attention
kind, small m), seconds on CPU under TRITON_INTERPRET=1. Timing: CUDA events around each call, L2 flushed
before it, median of the reps after a warm-up call; CPU: perf_counter, median.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from rackplan.specs import load_model

from . import plans

FULL = {"m": (1, 8, 64, 512, 4096), "decode_batch": (1, 8, 64), "ctx": 4096, "prefill": 4096,
        "floor_batch": (1, 2, 4, 8), "floor_ctx": 1024, "peak_n": 8192, "copy_bytes": 2 * 2**30, "reps": 10}
TINY = {"m": (1, 16), "decode_batch": (2,), "ctx": 32, "prefill": 32, "floor_batch": (1, 8),
        "floor_ctx": 16, "peak_n": 256, "copy_bytes": 16 * 2**20, "reps": 1}


class Clock:
    """Seconds per call: CUDA events (L2 flushed by a 256 MiB write before each call) or perf_counter."""

    def __init__(self, device: str, reps: int):
        self.cuda, self.reps = device.startswith("cuda"), reps
        self.flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device) if self.cuda else None

    def __call__(self, fn) -> tuple[float, object]:
        """(median seconds, the warm-up call's result)."""
        first = fn()  # warm-up (compiles, autotunes)
        times = []
        for _ in range(self.reps):
            if self.cuda:
                self.flush.zero_()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize()
                times.append(s.elapsed_time(e) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2], first


class Sweep:
    """Runs cases and appends their records to a JSON-lines file as they finish (a run cut short keeps
    what it measured)."""

    def __init__(self, out: Path, device: str, tiny: bool):
        self.out, self.device, self.tiny = out, device, tiny
        self.shapes = TINY if tiny else FULL
        self.clock = Clock(device, self.shapes["reps"])
        self.dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        self.dtype_name = "bf16" if self.dtype == torch.bfloat16 else "fp32"
        from rackplan.executor.fp8 import supported
        self.fp8 = supported(device) or not device.startswith("cuda")  # the CPU runs _scaled_mm (rehearsal)
        self.count = self.errors = 0

    def case(self, rec: dict, fn, ref=None) -> None:
        """Time fn into rec["seconds"]; `ref`: the output fn should give (its relative error is recorded)."""
        try:
            rec["seconds"], first = self.clock(fn)
            if ref is not None:
                rec["rel_err_vs_loop"] = float((first.float() - ref).norm() / ref.norm().clamp(min=1e-30))
        except Exception as exc:  # noqa: BLE001 - one failing case is a record, the sweep goes on
            rec["error"] = f"{type(exc).__name__}: {exc}"[:400]
            self.errors += 1
        self.count += 1
        with self.out.open("a") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)

    def randn(self, *shape, scale: float = 1.0):
        return torch.randn(*shape, device=self.device, dtype=torch.float32).mul_(scale).to(self.dtype)


def gemms(sw: Sweep, tag: str, spec) -> None:
    """Dense GEMMs: each attention projection and the expert GEMMs at every m."""
    from rackplan.executor.fp8 import FP8Weight
    h, i = spec.hidden_size, spec.moe.expert_intermediate
    shapes = [(name, fi, fo) for name, fi, fo in spec.attention.projections(h)] + [("w13", h, 2 * i), ("w2", i, h)]
    for name, k, n in shapes:
        w = sw.randn(k, n, scale=k ** -0.5)
        fw = FP8Weight(w) if sw.fp8 else None
        for m in sw.shapes["m"]:
            x = sw.randn(m, k)
            base = {"kind": "gemm", "model": tag, "op": name, "m": m, "n": n, "k": k}
            sw.case(dict(base, dtype=sw.dtype_name, impl="torch.matmul"),
                    lambda x=x, w=w: x @ w)
            if fw is not None:
                sw.case(dict(base, dtype="fp8", impl="executor FP8Weight (_scaled_mm, row-wise)"),
                        lambda x=x, fw=fw: x @ fw)


def _ffn(x, w13, w2, counts, gemm):
    gate, up = gemm(x, w13, counts).chunk(2, dim=-1)  # [N, I] each
    return gemm(F.silu(gate) * up, w2, counts)  # [N, H]


def _torch_grouped(x, w, counts):
    offs = torch.cumsum(counts, 0).to(device=x.device, dtype=torch.int32)
    return torch._grouped_mm(x, w, offs=offs)


def experts(sw: Sweep, tag: str, spec, dep: int) -> None:
    """One rank's routed-expert FFN of a DEP `dep` replay, prefill and decode, through four paths."""
    from rackplan.executor.fp8 import FP8Stack
    from rackplan.executor.kernels.grouped_gemm import grouped_gemm, grouped_gemm_ref
    e, k = spec.moe.num_experts, spec.moe.top_k
    h, i = spec.hidden_size, spec.moe.expert_intermediate
    local = e // dep
    w13, w2 = sw.randn(local, h, 2 * i, scale=h ** -0.5), sw.randn(local, i, h, scale=i ** -0.5)
    # _grouped_mm wants the second operand's last dim contiguous in memory as [G, N, K] transposed
    w13t, w2t = (w.transpose(-2, -1).contiguous().transpose(-2, -1) for w in (w13, w2))
    f13, f2 = (FP8Stack(w13), FP8Stack(w2)) if sw.fp8 else (None, None)
    tokens = {"prefill": plans.REHEARSAL["tokens"], "decode": plans.REHEARSAL["batch"]} if sw.tiny else \
        {"prefill": plans.PREFILL_TOKENS, "decode": plans.DECODE_BATCH}
    for phase, t in tokens.items():
        rows = max(1, t * dep * k // e)  # per expert: the global batch's token-expert pairs over E experts
        counts = torch.full((local,), rows)
        x = sw.randn(local * rows, h)
        base = {"kind": "experts", "model": tag, "phase": phase, "dep": dep, "experts": local,
                "rows_per_expert": rows, "h": h, "inter": i}
        dt = sw.dtype_name
        paths = [(dt, "executor triton grouped GEMM", w13, w2, lambda a, b, c: grouped_gemm(a, b, c, impl="triton")),
                 (dt, "torch._grouped_mm", w13t, w2t, _torch_grouped),
                 (dt, "per-expert loop", w13, w2, grouped_gemm_ref)]
        if f13 is not None:
            paths.append(("fp8", "executor FP8 per-slot _scaled_mm", f13, f2, lambda a, b, c: b.grouped(a, c)))
        ref = _ffn(x, w13, w2, counts, grouped_gemm_ref).float()  # the output each path must give
        for dtype, impl, a, b, gemm in paths:
            sw.case(dict(base, dtype=dtype, impl=impl),
                    lambda x=x, a=a, b=b, counts=counts, gemm=gemm: _ffn(x, a, b, counts, gemm), ref)


def attention(sw: Sweep, tag: str, spec) -> None:
    """The executor's attention of layer 0: decode at batch x context, prefill of one prompt; then the
    launch floor at batch 1-8 (eager vs a CUDA-graph replay of the same decode)."""
    from rackplan.executor.attention import Attention, KVCache
    from rackplan.executor.timing import NullTimer
    att = Attention(spec, 0, 0, sw.dtype, sw.device)
    kind, ctx = spec.attention.kind, sw.shapes["ctx"]

    def decoder(b: int, c: int):
        cache = KVCache(1, b, c + 1, att.entry_dim, sw.dtype, sw.device)
        cache.data[0].normal_()
        x, pos = sw.randn(b, spec.hidden_size), torch.full((b,), c, device=sw.device)
        return lambda: att.decode(x, pos, cache, 0, None, NullTimer(), (c, c))

    for b in sw.shapes["decode_batch"]:
        sw.case({"kind": "attention", "model": tag, "attn": kind, "phase": "decode", "batch": b, "ctx": ctx,
                 "dtype": sw.dtype_name, "impl": "executor"}, decoder(b, ctx))
    n = sw.shapes["prefill"]
    x, pos = sw.randn(n, spec.hidden_size), torch.arange(n, device=sw.device)
    sw.case({"kind": "attention", "model": tag, "attn": kind, "phase": "prefill", "tokens": n,
             "dtype": sw.dtype_name, "impl": "executor"},
            lambda: att.prefill(x, pos, [n], NullTimer()))
    for b in sw.shapes["floor_batch"]:
        step = decoder(b, sw.shapes["floor_ctx"])
        base = {"kind": "floor", "model": tag, "attn": kind, "batch": b, "ctx": sw.shapes["floor_ctx"]}
        sw.case(dict(base, impl="eager"), step)
        if sw.clock.cuda:
            sw.case(dict(base, impl="cuda_graph"), _graphed(step))


def _graphed(fn):
    """fn captured once in a CUDA graph; the returned callable replays it."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def peaks(sw: Sweep) -> None:
    """The card's (the CPU's) peaks: square bf16 and FP8 matmuls, a device-to-device copy."""
    n = sw.shapes["peak_n"]
    a, b = sw.randn(n, n), sw.randn(n, n)
    sw.case({"kind": "peak", "op": "matmul", "n": n, "dtype": sw.dtype_name,
             "flops": 2.0 * n ** 3}, lambda: a @ b)
    if sw.fp8 and hasattr(torch, "float8_e4m3fn"):
        a8 = a.to(torch.float8_e4m3fn)  # row-major
        b8 = b.t().contiguous().t().to(torch.float8_e4m3fn)  # column-major, as _scaled_mm's second operand
        one = torch.ones((), device=sw.device)
        sw.case({"kind": "peak", "op": "matmul", "n": n, "dtype": "fp8", "flops": 2.0 * n ** 3},
                lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    src = torch.empty(sw.shapes["copy_bytes"], dtype=torch.int8, device=sw.device)
    dst = torch.empty_like(src)
    sw.case({"kind": "peak", "op": "copy", "bytes_moved": 2 * src.numel()}, lambda: dst.copy_(src))


def sweep(out: Path, device: str, tiny: bool, hw: str) -> Sweep:
    """Every case, in order (cheapest first, so a run cut short still has the peaks and GEMMs); the
    expert cases at the DEP sizes of the kit's replay plans on `hw` (tiny: the rehearsal's stand-ins)."""
    import tempfile
    out.unlink(missing_ok=True)
    sw = Sweep(out, device, tiny)
    torch.manual_seed(0)
    peaks(sw)
    with tempfile.TemporaryDirectory() as tmp:
        replays, _ = plans.plan_replays(hw, Path(tmp), rehearse=tiny)
        specs = [load_model(plans.standin(name, Path(tmp))) if tiny else load_model(name) for name in plans.MODELS]
    for spec, r in zip(specs, replays, strict=True):
        gemms(sw, spec.name, spec)
        experts(sw, spec.name, spec, r.dep)
        attention(sw, spec.name, spec)
    return sw


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON-lines file the records are appended to (replaced)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--hardware", default="h100-sxm", help="the GPU's hardware spec (sizes the expert cases)")
    ap.add_argument("--tiny", action="store_true", help="rehearsal shapes")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpukit kernels: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    sw = sweep(Path(args.out), args.device, args.tiny, args.hardware)
    print(f"{sw.count} kernel cases, {sw.errors} failed -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
