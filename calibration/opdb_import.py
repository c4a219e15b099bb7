"""`rackplan calibrate --op-database SYSTEM`: a measured profile from the public per-op database.

Finds the tables (calibration/opdb.py, which also documents what each measures), fits one curve
per op class in dependency order (GEMMs first: the MLA module tables are priced as projections
plus attention core), fits DeepEP dispatch/combine entries through calibration/a2a.py, and says in
the profile's `fallbacks` where every op class it could not fit comes from. Returns the profile
and a summary; nothing is written here.
"""
from __future__ import annotations

import dataclasses
from importlib import metadata
from pathlib import Path

import numpy as np

from rackplan.specs import HardwareSpec, Profile, SpecError, load_model
from rackplan.specs.hardware import DTYPE_FAMILY

from . import opdb, opdb_ops
from .io import utc_date
from .opdb_fit import ClassFit, fit_class, split
from .robust import mape

# op classes the cost model asks for, and where they come from when the tables lack them
ATTN_FALLBACK = {  # V3.2 (MLA + indexer) runs kind mla; V4 csa: FlashMLA-sparse kernels, MLA-like
    "attn.prefill.csa.bf16": "attn.prefill.mla.bf16",
    "attn.decode.csa.bf16": "attn.decode.mla.bf16",
}
SCALAR_SOURCES = {
    "kv_transfer": "base profile kv_transfer_alpha_s / kv_transfer_bw_eff (no KV-connector table)",
    "host": "base profile's host block (the tables time kernels, not the engine loop)",
    "dbo": "base profile dbo_efficiency",
    # no table times these kernels (configs/profiles/*-vllm.yaml carry the same lines)
    "attn.window": ("no attention table has a window argument (their rows are full attention): a sliding-window "
                    "layer (gpt-oss) is priced by its kind's full-attention curve at its windowed work, decode read at "
                    "context min(context, window), prefill at the prompt length with the FLOPs of the windowed pairs "
                    "(sim/cost/attention.py curve_context)"),
}
# written only where the system's moe_perf table has no w4a16_mxfp4 rows (opdb_ops.TABLE_DTYPE: experts.mxfp4_bf16)
MXFP4_BF16_FALLBACK = ("MXFP4 experts computed in BF16 (gpt-oss; vLLM's default MXFP4 MoE, quantization/mxfp4.py "
                       "get_mxfp4_backend: triton_kernels or Marlin on SM90, FlashInfer MXFP4 x BF16 on SM100) have no "
                       "w4a16_mxfp4 rows here: the experts.bf16 curve at the BF16 peak, with the MXFP4 weight bytes "
                       "(4.25 bits per parameter)")
REJECT = 1.5  # a class whose held-out MAPE exceeds this multiple of its target is left out of the profile
# A GEMM table whose fastest row (a 256 x 256 GEMM at m = 1 is among them) is slower than this measures something
# besides the kernel: the per-tensor FP8 and BF16 tables of every system have their fastest rows at
# 4.6-5.3 us (launch latency), while gemm_dtype fp8_block is >= 55 us (Hopper) and >= 152-252 us
# (Blackwell, flat in shape) at every row, and the MLA decode module rows, whose projections are fp8_block
# GEMMs, take 156 us per layer in all (benchmarks/RESULTS.md, 2026-12-01 "GEMM curves that carry their
# own streaming"). Such a class is not written: its dtype family's curve prices it.
GEMM_FLOOR_MAX_S = 20e-6
# A class whose vLLM table the floor rule refuses is taken from the same system's table of another framework
# whose collector times, inside a CUDA graph, the kernel vLLM itself runs for it on that GPU architecture
# (opdb_ops.ARCH); the newest version of that framework present. One entry, gemm.fp8_block on SM100:
# - aiconfigurator's vLLM collector (collector/vllm/collect_gemm.py, run_gemm) times fp8_block eagerly,
#   `benchmark_with_power(..., use_cuda_graph=gemm_type != "fp8_block")`, hence its per-call floor (a later
#   version refuses to publish such rows: test_eager_or_unproven_result_is_not_published);
# - vLLM 0.24.0 runs 128x128 block-FP8 linears with the first supported of _POSSIBLE_FP8_BLOCK_KERNELS
#   (model_executor/kernels/linear/__init__.py:320-329): FlashInferFp8DeepGEMMDynamicBlockScaledKernel only
#   where FlashInfer's SM90 block-scale GEMM exists (utils/flashinfer.py:915-930, capability 90), then
#   DeepGemmFp8BlockScaledMMKernel where N % 64 == 0 and K % 128 == 0 (utils/deep_gemm.py:700-719), else
#   CUTLASS; so on SM100 DeepGEMM's fp8_gemm_nt with vLLM's per-token-group activation quantisation (the
#   vLLM table's kernel_source column agrees: DeepGemmFp8BlockScaledMMKernel at every aligned shape);
# - the SGLang 0.5.14 collector (collector/sglang/collect_gemm.py, run_gemm) times
#   sglang_per_token_group_quant_fp8 + deep_gemm_wrapper.gemm_nt_f8f8bf16 (DeepGEMM fp8_gemm_nt) through
#   benchmark_with_power's CUDA graph, with the UE8M0 weight scales packed at setup as serving does
#   (kernel_source sglang_deepgemm_gemm_nt_f8f8bf16; every shape aligned).
# On SM90 vLLM runs DeepGEMM at m >= 32 only and FlashInfer's fp8_blockscale_gemm_sm90 below (scaled_mm/
# flashinfer.py:152-158; the vLLM table says FlashInferFp8BlockScaledMMKernel at m 1-17), a kernel no graph-timed
# table times (SGLang's is DeepGEMM at every m, TRT-LLM's its own torch flow): SGLang's table gives the m >= 32
# curves, through DeepGEMM's SM90 configuration choice (opdb_ops.TILE_RULE), and NO_GRAPH_TIMED_SOURCE says
# where the rest comes from.
GRAPH_TIMED_SOURCE = {("gemm.fp8_block", "sm100"): "sglang", ("gemm.fp8_block", "sm90"): "sglang"}
NO_GRAPH_TIMED_SOURCE = {("gemm.fp8_block", "sm90"): (
    "m < 32: the gemm.fp8 curve (dtype family; efficiency.family_curve): there vLLM runs FlashInfer's "
    "fp8_blockscale_gemm_sm90, which no graph-timed table times (SGLang's times DeepGEMM at every m), a "
    "weight-read-bound GEMM whose weight bytes equal per-tensor FP8's")}
A2A_KERNEL = {"deepep_ll": "low_latency", "deepep_ht": "high_throughput"}
# DeepEP as vLLM runs it for DeepSeek-V3: low-latency dispatch in FP8 (with scales), combine and the
# high-throughput kernels in BF16 (the table's comm_dtype is "default")
A2A_DTYPE = {("low_latency", "dispatch"): "fp8"}


def import_profile(system: str, framework: str, version: str | None, hw: HardwareSpec, base: Profile,
                   name: str, root=None, progress=None) -> tuple[Profile, list[ClassFit]]:
    """Fit every op class the tables hold; (profile, fits). Raises SpecError on bad input."""
    tables = opdb.locate(opdb.data_root(root), system, framework, version)
    if not tables:
        raise SpecError(f"--op-database {system}", "tables", f"at least one of {', '.join(opdb.TABLES)}")
    prof = dataclasses.replace(base, name=name, hardware=hw.name, curves={}, fallbacks={}, fit_error={})
    fits: list[ClassFit] = []
    dropped: dict[str, ClassFit] = {}
    elsewhere: dict[str, str] = {}  # class -> where it came from instead of this framework's table, or why not
    for stage in STAGES:
        for rows in stage(tables, hw, prof):
            if progress:
                progress(rows.key, len(rows.seconds))
            f, fitted = fit_class(rows, prof)
            if not _kept(f) and _on_floor(_floor_us(f)) and framework == "vllm":
                f, fitted, elsewhere[f.key] = _graph_timed(f, fitted, system, root, hw, prof, progress)
            fits.append(f)
            if _kept(f):
                prof = fitted
            else:
                dropped[f.key] = f
    for key in [k for (k, arch) in PER_KERNEL_SOURCE if arch == opdb_ops.ARCH.get(hw.name, "")]:
        got = _per_kernel(key, system, root, hw, prof, progress)
        if got is not None:
            g, prof, elsewhere[key] = got
            dropped.pop(key, None)
            fits = [f for f in fits if f.key != key] + [g]
    a2a_fit = _a2a(tables, hw, prof) if "moe_a2a_perf" in tables else None
    if a2a_fit is not None:
        entries, f = a2a_fit
        fits.append(f)
        prof = dataclasses.replace(prof, a2a=entries)
    fallbacks = {**_dropped(dropped, elsewhere), **{k: v for k, v in elsewhere.items() if k not in dropped},
                 **_fallbacks(prof, tables, base, a2a_fit is not None)}
    prof = dataclasses.replace(prof, fallbacks=fallbacks,
                               fit_error={f.key: round(f.mape_held, 2) for f in fits if f.key not in dropped})
    prov = {"source": {"package": opdb.PACKAGE, "version": _package_version(root), "system": system,
                       "framework": framework, "framework_version": version or "newest per table"},
            "date": utc_date(), "hardware": hw.name, "base_profile": base.name,
            "method": "per op class: one Curve fitted by calibration.robust.fit_relative (soft-L1 relative "
                      "least squares) through sim/cost's pricing of each row; fit_error = MAPE % on held-out "
                      f"rows (a seeded {int(100 * 0.25)}% of each class's rows, never fitted)",
            "classes": {f.key: {**f.record(), **({"written": False} if f.key in dropped else {})} for f in fits}}
    return dataclasses.replace(prof, provenance=prov), fits


# op classes in fitting order: the MLA module rows are priced with the GEMM curves fitted before them
STAGES = (lambda t, hw, p: opdb_ops.memory_rows(t, hw), lambda t, hw, p: opdb_ops.gemm_rows(t, hw),
          lambda t, hw, p: opdb_ops.expert_rows(t, hw), opdb_ops.attention_rows,
          lambda t, hw, p: opdb_ops.comm_rows(t, hw), lambda t, hw, p: opdb_ops.stream_rows(t, hw))


def class_rows(tables: dict, hw: HardwareSpec, prof: Profile) -> list:
    """Every op class's rows, priced (where a class depends on other curves) under `prof`."""
    return [rows for stage in STAGES for rows in stage(tables, hw, prof)]


def _kept(f: ClassFit) -> bool:
    """Whether a fitted class is written: held-out MAPE within REJECT x its target, and not a GEMM table on a
    per-call floor (GEMM_FLOOR_MAX_S)."""
    return f.mape_held <= REJECT * f.target and not _on_floor(_floor_us(f))


def _graph_timed(f: ClassFit, fitted: Profile, system: str, root, hw: HardwareSpec, prof: Profile, progress=None):
    """(fit, profile, note) for class f, which the floor rule refuses: fitted instead from the same system's
    table of the framework GRAPH_TIMED_SOURCE names for f's class on hw's architecture (its newest version),
    with the note saying so; else f unchanged and the note saying why not (a table on the per-call floor too is
    refused by that rule whatever its fit, so it is not fitted)."""
    arch = opdb_ops.ARCH.get(hw.name, "")
    other = GRAPH_TIMED_SOURCE.get((f.key, arch))
    if other is None:
        return f, fitted, NO_GRAPH_TIMED_SOURCE.get((f.key, arch), f"no graph-timed table of the kernel vLLM runs "
                                                                   f"on {arch or hw.name} is named for it")
    try:
        table = opdb.locate(opdb.data_root(root), system, other).get("gemm_perf")
    except SpecError:
        table = None
    rows = [r for r in opdb_ops.gemm_rows({"gemm_perf": table}, hw) if r.key == f.key] if table else []
    if not rows:
        return f, fitted, f"{other}'s gemm_perf table has no {f.key.split('.', 1)[1]} rows for {system}"
    if progress:
        progress(f"{f.key} ({other} {table.version})", len(rows[0].seconds))
    floor_us = rows[0].notes.get("fastest_row_us", 0.0)
    if _on_floor(floor_us):  # refused by the floor rule whatever its fit: not fitted
        return f, fitted, f"{other} {table.version}'s table not taken either (every row >= {floor_us:g} us)"
    g, refit = fit_class(rows[0], prof)
    vllm = (f"the vllm {f.table.version} table times it eagerly (aiconfigurator's vLLM collector: use_cuda_graph "
            f"off for fp8_block; fastest row {_floor_us(f):g} us)")
    g = dataclasses.replace(g, extra={**g.extra, "framework": other, "in_place_of": f"vllm {f.table.version} "
                                      f"{f.table.op}/{f.table.name}, fastest row {_floor_us(f):g} us (eager)"})
    rest = f"; {NO_GRAPH_TIMED_SOURCE[(f.key, arch)]}" if (f.key, arch) in NO_GRAPH_TIMED_SOURCE else ""
    if _kept(g):
        return g, refit, (f"measured from {other} {table.version} {table.op}/{table.name} ({rows[0].kernel}, "
                          f"CUDA-graph timed, the kernel vLLM runs on {arch}): {vllm}{rest}")
    return f, fitted, (f"{other} {table.version}'s table not taken either "
                       f"(its fit missed, {g.mape_held:.1f}% held-out MAPE)")


# Op classes the vLLM tables time only inside a whole module, fitted instead from a per-kernel table of the same
# system that times the kernel vLLM runs, so the curve is the kernel's, not a residual that absorbs whatever the
# other parts of the module are priced wrong (on gb200 and b300 the MLA module minus its projections left the
# prefill core at 18-19% of the BF16 peak, on b200, the same silicon, 54-61%): MLA prefill on SM100, where vLLM
# runs FlashInfer's TRT-LLM ragged MLA prefill (TRTLLM_RAGGED; aiconfigurator's gb300 0.27.0 collection_meta:
# "fp8/fp8 runs FLASHINFER_MLA + TRTLLM_RAGGED") and SGLang's context_mla_perf times that kernel alone
# (kernel_source trtllm_mla; vLLM's GB200 post times it at 676 us for 8,192 tokens of 2,048, the table 693 us).
# class -> (framework, table, kernel_source)
PER_KERNEL_SOURCE = {("attn.prefill.mla.bf16", "sm100"): ("sglang", "context_mla_perf", "trtllm_mla")}


def _per_kernel(key: str, system: str, root, hw: HardwareSpec, prof: Profile, progress=None):
    """(fit, profile, note) of class `key` from its PER_KERNEL_SOURCE table, or None (no such table or rows, or
    its fit missed: the module-residual fit stays)."""
    fw, name, kernel = PER_KERNEL_SOURCE[(key, opdb_ops.ARCH.get(hw.name, ""))]
    try:
        table = opdb.locate(opdb.data_root(root), system, fw, names=opdb.KERNEL_TABLES).get(name)
    except SpecError:
        return None
    rows = opdb_ops.mla_kernel_rows(table, hw, kernel) if table is not None else None
    if rows is None:
        return None
    if progress:
        progress(f"{key} ({fw} {table.version} {name})", len(rows.seconds))
    g, refit = fit_class(rows, prof)
    if not _kept(g):
        return None
    g = dataclasses.replace(g, extra={**g.extra, "framework": fw, "in_place_of": "the vLLM module table less its "
                                      "projections (a residual)"})
    return g, refit, (f"measured from {fw} {table.version} {table.op}/{name} ({kernel}: the attention kernel alone, "
                      "CUDA-graph timed) in place of the vLLM module table less its projections")


def _on_floor(fastest_row_us: float) -> bool:
    """The floor rule: a GEMM table whose fastest row (us) takes more than GEMM_FLOOR_MAX_S sits on a per-call floor."""
    return fastest_row_us > GEMM_FLOOR_MAX_S * 1e6


def _floor_us(f: ClassFit) -> float:
    """The fastest row of a GEMM class in microseconds (0 for other classes)."""
    return f.extra.get("fastest_row_us", 0.0)


def _dropped(dropped: dict[str, ClassFit], elsewhere: dict[str, str]) -> dict[str, str]:
    """Classes not written (a fit that missed REJECT x its target on held-out rows, or a GEMM table on a
    per-call floor, GEMM_FLOOR_MAX_S, with why no other framework's table replaced it); where they go."""
    out = {}
    for key, f in dropped.items():
        cls, _, dtype = key.partition(".")
        family = DTYPE_FAMILY.get(dtype)
        to = f"the {cls}.{family} curve (dtype family)" if family else "the base profile's scalar fields"
        if _on_floor(_floor_us(f)):
            out[key] = (f"{to}: every row of its table takes >= {_floor_us(f):g} us (a per-call floor, not a kernel "
                        f"time; > {GEMM_FLOOR_MAX_S * 1e6:g} us), held-out MAPE {f.mape_held:.1f}%"
                        + (f"; {elsewhere[key]}" if key in elsewhere else ""))
        else:
            out[key] = f"{to}: its own fit missed ({f.mape_held:.1f}% held-out MAPE > {REJECT} x {f.target:g}%)"
    return out


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def _package_version(root=None) -> str:
    """The installed package's version, else that of the distribution whose folder holds `root`
    (--op-database-root pointing into another environment's site-packages)."""
    try:
        return metadata.version(opdb.PACKAGE)
    except metadata.PackageNotFoundError:
        pass
    for parent in Path(root).resolve().parents if root is not None else ():
        for dist in metadata.distributions(path=[str(parent)]):
            if dist.metadata["Name"] == opdb.PACKAGE:
                return dist.version
    return "not installed (--op-database-root)"


def _fallbacks(prof: Profile, tables: dict, base: Profile, have_a2a: bool) -> dict[str, str]:
    out = {k: v for k, v in ATTN_FALLBACK.items() if k not in prof.curves and v in prof.curves}
    for name, (op, _) in opdb.TABLES.items():
        if name not in tables:
            out[f"table.{name}"] = f"not in the database for this system ({op}/): its op classes use the base " \
                                   f"profile {base.name!r}"
    out.update(SCALAR_SOURCES)
    if "experts.mxfp4_bf16" not in prof.curves:
        out["experts.mxfp4_bf16"] = MXFP4_BF16_FALLBACK
    if have_a2a:
        ep = sorted({e.ep for e in prof.a2a if e not in base.a2a})
        inputs = ", ".join(i.get("path", "") for i in base.provenance.get("inputs", [])) or "its datasheet entries"
        out["a2a"] = (f"DeepEP at EP {', '.join(map(str, ep))} from moe_a2a_perf; the base profile {base.name!r} "
                      f"({inputs}) prices the rest: the entry of the nearest EP size wins, an EP-agnostic one only "
                      "where no entry has an EP")
    else:
        out["a2a"] = f"base profile {base.name!r} (no moe_a2a_perf rows for this system)"
    return out


def _a2a(tables: dict, hw: HardwareSpec, prof: Profile):
    """DeepEP dispatch/combine (DeepSeek-V3 shape rows) -> A2AParams with latency floors, fitted on
    the fit rows; entries carry the table's EP size and sit beside the base profile's."""
    from .a2a import A2APoint, fit_a2a, predict

    t = tables["moe_a2a_perf"]
    c = opdb.read(t)
    sel = ((c["hidden_size"] == 7168) & (c["topk"] == 8) & (c["num_experts"] == 256) & (c["node_num"] == 1)
           & np.isin(c["comm_backend"], list(A2A_KERNEL)))
    pts = []
    for backend, phase, ep, tok, sec in zip(*(c[x][sel] for x in ("comm_backend", "phase", "ep_size", "num_tokens",
                                                                   "seconds"))):
        kernel = A2A_KERNEL[str(backend)]
        pts.append(A2APoint(kernel, int(ep), str(phase), float(tok), float(sec),
                            A2A_DTYPE.get((kernel, str(phase)), "bf16")))
    if len(pts) < 8:
        return None
    model = load_model("deepseek-v3")
    ep = int(np.bincount([p.ep for p in pts]).argmax())
    pts = [p for p in pts if p.ep == ep]
    fit_idx, held_idx = split(len(pts))
    fit = fit_a2a([pts[i] for i in fit_idx], hw, model, floor=True, prior=prof)
    from .a2a import _link

    measured_groups = {(p.kernel, _link(p, hw), p.phase) for p in pts}  # fit_a2a also returns its provisional
    best = {(e.kernel, e.link, e.phase): e for e in fit.entries if (e.kernel, e.link, e.phase) in measured_groups}
    for e in fit.floor_entries:  # the floor variant wherever it fits its group's fit rows better
        if _floor_helps(fit.rows, e):
            best[(e.kernel, e.link, e.phase)] = dataclasses.replace(e, floor_s=fit.floor_s[(e.kernel, e.link, e.phase,
                                                                                             e.ep)])
    entries = [dataclasses.replace(e, ep=ep, alpha_s=_sig(e.alpha_s), bw_eff=_sig(e.bw_eff), floor_s=_sig(e.floor_s))
               for e in best.values()]
    measured = np.array([p.seconds for p in pts])
    pred = predict(pts, entries, model, hw)
    mine = {(e.kernel, e.link, e.phase) for e in entries}
    kept = [e for e in prof.a2a if (e.kernel, e.link, e.phase) not in mine or e.ep != ep]
    f = ClassFit("a2a.deepep", t, len(fit_idx), len(held_idx), mape(pred[fit_idx], measured[fit_idx]),
                 mape(pred[held_idx], measured[held_idx]),
                 "DeepSeek-V3 shape (hidden 7168, top-8 of 256), one node; LL dispatch FP8, others BF16",
                 "deepep_ht, deepep_ll")
    return tuple(kept + entries), f


def _floor_helps(rows: list[dict], e) -> bool:
    """Whether the floored fit of e's group (kernel, phase, EP) has a lower MAPE on its fit rows than the
    linear one (calibration/a2a.py fits both, the floor by minimax: on b300's low-latency dispatch it
    ended flat at 67.7 us, 56% fast at 256 tokens, where the linear fit is within 10%)."""
    own = [r for r in rows if (r["kernel"], r["phase"], r["ep"]) == (e.kernel, e.phase, e.ep)]
    return bool(own) and np.mean([abs(r["err_floor"]) for r in own]) < np.mean([abs(r["err_linear"]) for r in own])


def summary_rows(prof: Profile, fits: list[ClassFit]) -> list[dict]:
    """One row per fitted class for the importer's table: error on fit and held-out rows vs target."""
    out = []
    for f in fits:
        written = f.key in prof.curves or f.key == "memory" or f.key.startswith("a2a")
        status = ("ok" if f.mape_held <= f.target else "over target") if written else "not written (see fallbacks)"
        out.append({"class": f.key, "table": f.table.name, "version": f.table.version,
                    "framework": f.extra.get("framework", prof.provenance.get("source", {}).get("framework", "")),
                    "rows_fit": f.rows_fit,
                    "rows_held": f.rows_held, "mape_fit": round(f.mape_fit, 2), "mape_held": round(f.mape_held, 2),
                    "target": f.target, "status": status,
                    "table_roughness": f.extra.get("table_roughness_pct", float("nan"))})
    return out


def compact(prof: Profile) -> dict:
    """The profile as a YAML-ready mapping with every curve's default-valued fields left out."""
    from rackplan.specs import Curve, to_dict

    out = to_dict(prof)
    defaults = to_dict(Curve(eff_max=1.0))
    out["curves"] = {k: [{f: v for f, v in c.items() if f == "eff_max" or v != defaults[f]} for c in cs]
                     for k, cs in out["curves"].items()}
    return out
