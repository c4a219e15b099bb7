"""The kit's comparison table: each kernel timing beside what the GPU's shipped profile prices the same
op at, the card's measured peaks beside its spec, the launch floors, and each replay's `rackplan validate`
summary.

Prices come from the simulator's own cost functions (sim/cost): a dense GEMM through roofline.price_gemm
(the profile's gemm.<dtype> curves), a rank's routed-expert FFN through the experts curves and `price`
as step.py prices moe.experts (FLOPs and bytes as moe.expert_work counts them). ratio = measured /
predicted: above 1, the executor's kernel ran slower than the profile says vLLM's kernels run.
Attention has no single-kernel price in the profile: it is compared within the replays' validate rows
(attn.core, attn.proj), and its kernel records stay in the archive.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from rackplan.sim.cost import efficiency
from rackplan.sim.cost.roofline import price, price_gemm
from rackplan.specs import load_hardware, resolve_profile

BYTES = {"bf16": 2, "fp32": 4, "fp8": 1}


def predict(rec: dict, hw, prof) -> float | None:
    """The profile's seconds for one gemm or experts record (None for other kinds)."""
    wb = BYTES[rec["dtype"]]
    ab = 2 if wb == 1 else wb  # activations: bf16 beside FP8 weights, else the weights' dtype
    if rec["kind"] == "gemm":
        m, n, k = rec["m"], rec["n"], rec["k"]
        flops, nbytes = 2.0 * m * n * k, float(m * k * ab + k * n * wb + m * n * ab)
        return price_gemm(flops, nbytes, hw.flops_for(rec["dtype"]), rec["dtype"], float(m), float(n), float(k),
                          hw, prof)
    if rec["kind"] == "experts":
        e, rows = rec["experts"], rec["rows_per_expert"]
        h, inter = rec["h"], rec["inter"]
        flops = 2.0 * e * rows * 3 * h * inter
        nbytes = float(e * 3 * h * inter * wb + e * rows * (2 * h + 3 * inter) * ab)
        eff = efficiency.experts_at(prof, rec["dtype"], 2.0 * inter, float(h), hw.num_sms)(float(rows), flops,
                                                                                          float(rows))
        return price(flops, nbytes, hw.flops_for(rec["dtype"]), float(eff), hw, prof)
    return None


def kernel_rows(records: list[dict], hw, prof) -> tuple[list[str], list[str]]:
    """(markdown lines of the kernel table, error lines)."""
    ratios: dict[tuple, list[float]] = {}
    peaks, floors, errors = [], {}, []
    for rec in records:
        if "error" in rec:
            errors.append(f"{rec['kind']} {rec.get('impl', rec.get('op', ''))}: {rec['error']}")
            continue
        if rec["kind"] in ("gemm", "experts"):
            p = predict(rec, hw, prof)
            ratios.setdefault((rec["kind"], rec.get("model"), rec["dtype"], rec["impl"], rec.get("phase", "")),
                              []).append(rec["seconds"] / p)
        elif rec["kind"] == "peak":
            peaks.append(rec)
        elif rec["kind"] == "floor":
            floors.setdefault((rec["model"], rec["batch"]), {})[rec["impl"]] = rec["seconds"]
    lines = ["| kernel | model | dtype | impl | phase | cases | measured / profile: median | min | max |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for (kind, model, dt, impl, phase), rs in sorted(ratios.items(), key=lambda kv: str(kv[0])):
        lines.append(f"| {kind} | {model} | {dt} | {impl} | {phase} | {len(rs)} | {statistics.median(rs):.2f} | "
                     f"{min(rs):.2f} | {max(rs):.2f} |")
    lines += ["", "| peak | measured | spec (hardware file) | fraction |", "| --- | ---: | ---: | ---: |"]
    for rec in peaks:
        if rec["op"] == "copy":
            bw = rec["bytes_moved"] / 2 / rec["seconds"]  # counted once per byte moved, as hbm_bw
            lines.append(f"| copy (B/s, once per byte) | {bw:.3e} | {hw.hbm_bw:.3e} | {bw / hw.hbm_bw:.2f} |")
        else:
            fl = rec["flops"] / rec["seconds"]
            spec = hw.flops_for(rec["dtype"])
            lines.append(f"| matmul {rec['dtype']} n={rec['n']} (FLOP/s) | {fl:.3e} | {spec:.3e} | {fl / spec:.2f} |")
    if floors:
        lines += ["", "| launch floor: decode attention | batch | eager s | CUDA graph s | eager - graph |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for (model, b), t in sorted(floors.items()):
            g = t.get("cuda_graph")
            gap = f"{t['eager'] - g:.2e}" if g is not None and "eager" in t else "n/a"
            lines.append(f"| {model} | {b} | {t.get('eager', float('nan')):.2e} | "
                         f"{'n/a (no CUDA)' if g is None else f'{g:.2e}'} | {gap} |")
    return lines, errors


def validate_rows(name: str, summary: dict) -> list[str]:
    """Markdown lines of one replay's `rackplan validate --json` summary: per-op and per-step MAPE."""
    lines = [f"| {name}: op | set | n | predicted s | measured s | MAPE % |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for op in summary.get("ops", []):
        lines.append(f"| {op['op']} | {op['set']} | {op['n']} | {op['predicted_s']:.3e} | {op['measured_s']:.3e} | "
                     f"{op['mape']:.1f} |")
    for st in summary.get("steps", []):
        lines.append(f"| step {st['role']} {st['size']} | {st['set']} | {st['repeats']} | {st['predicted_s']:.3e} | "
                     f"{st['measured_s']:.3e} | {100 * abs(st['err']):.1f} |")
    return lines


def table(kernels: Path, validations: dict[str, Path], hardware: str, profile: str) -> str:
    """The whole comparison as markdown."""
    hw = load_hardware(hardware)
    prof = resolve_profile(profile, None, hw)
    records = [json.loads(line) for line in kernels.read_text().splitlines()] if kernels.exists() else []
    out = [f"## Kernels against profile {prof.name} on {hw.name}", ""]
    if records:
        lines, errors = kernel_rows(records, hw, prof)
        out += lines
        if errors:
            out += ["", f"{len(errors)} kernel cases failed:"] + [f"- {e}" for e in errors]
    else:
        out.append("no kernel records")
    for name, path in validations.items():
        out += ["", f"## rackplan validate: {name} (profile {prof.name})", ""]
        try:
            out += validate_rows(name, json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            out.append(f"no validate summary ({exc})")
    return "\n".join(out) + "\n"
