"""Refit a measured profile's per-kernel classes (calibration/opdb_import.py PER_KERNEL_SOURCE) alone, in place.

`rackplan calibrate --op-database ...` fits every op class and then, on the architectures PER_KERNEL_SOURCE names,
replaces a class with its fit on the kernel's own table (`opdb_import._per_kernel`, run on the profile the stages
before it fitted). When that step is added or changed, the other classes do not move; this script runs that step
on the shipped profile (which is what those stages fitted) and writes the profile back with the class, its
fit_error, its fallback note and its provenance replaced, instead of the whole regeneration (tens of minutes of
fitting per profile on a loaded two-core machine). A header line records that it did; running the profile's own
header command gives the same class.

`--module-class KEY` (repeatable) does the same for a module-table class (attn.decode.mla.bf16, attn.prefill.mla.bf16):
its rows from the profile's vLLM tables (opdb_ops.attention_rows), priced under the shipped profile, refitted alone.
Such a class is fitted after the memory, GEMM and expert stages and before the rest, and its rows read only the
curves those stages fitted (the projections' GEMM curves, the streaming efficiency), so the shipped profile prices
them as the importer did; a per-kernel class (above) that replaces a module class on the profile's architecture is
kept (its key is skipped).

`--expert-class KEY` (repeatable) does the same for a routed-experts class (experts.mxfp4_bf16: a kernel dtype added to
opdb_ops.TABLE_DTYPE after the profile was fitted): its rows from the profile's vLLM moe_perf table
(opdb_ops.expert_rows, which fits its moe.route.<dtype> beside it), refitted alone; the other classes do not read it.
A MoE backend's class (experts.fp8_block.deepgemm, experts.fp8_block.deepgemm_masked: SGLang's DeepEP MoE, the
engine-chosen kernel of sim/cost/efficiency.py BACKEND_CLASS) takes its rows from the system's SGLang wideep tables
(opdb_ops.deepep_expert_rows); a vLLM backend's class (experts.mxfp4_bf16.marlin: opdb_ops.VLLM_BACKEND_KERNELS) from
that backend's kernel's rows of the vLLM moe_perf table.

Run:  python benchmarks/opdb_per_kernel_splice.py --profile gb200-nvl72-vllm --op-database gb200 [--dry-run]
      python benchmarks/opdb_per_kernel_splice.py --profile h200-sxm-vllm --op-database h200_sxm \
          --module-class attn.decode.mla.bf16 --module-class attn.prefill.mla.bf16
      python benchmarks/opdb_per_kernel_splice.py --profile h100-sxm-vllm --op-database h100_sxm \
          --expert-class experts.mxfp4_bf16
      python benchmarks/opdb_per_kernel_splice.py --profile h100-sxm-vllm --op-database h100_sxm \
          --expert-class experts.mxfp4_bf16.marlin
      python benchmarks/opdb_per_kernel_splice.py --profile gb200-nvl72-vllm --op-database gb200 \
          --expert-class experts.fp8_block.deepgemm --expert-class experts.fp8_block.deepgemm_masked
      python benchmarks/opdb_per_kernel_splice.py --profile h200-sxm-vllm --op-database h200_sxm \
          --expert-class experts.bf16.triton_default
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rackplan.calibration import opdb, opdb_ops
from rackplan.calibration.io import utc_date
from rackplan.calibration.opdb_fit import fit_class
from rackplan.calibration.opdb_import import PER_KERNEL_SOURCE, _kept, _per_kernel, compact
from rackplan.outputs import write_spec
from rackplan.specs import SpecError, load_hardware, load_profile

PROFILES = Path(__file__).resolve().parents[1] / "configs" / "profiles"
BACKEND_KEYS = tuple(f"experts.fp8_block.{b}" for _, b in opdb_ops.DEEPEP_TABLES)  # SGLang's DeepEP MoE classes


def splice(profile: str, system: str, module_classes: tuple[str, ...] = (),
           expert_classes: tuple[str, ...] = ()) -> tuple[object, list[str]]:
    """(the profile with its per-kernel classes, or else the `module_classes` / `expert_classes` named, refitted;
    the keys refitted)."""
    prof = load_profile(profile)
    hw = load_hardware(prof.hardware)
    per_kernel = [k for (k, arch) in PER_KERNEL_SOURCE if arch == opdb_ops.ARCH.get(hw.name, "")]
    done = []
    for key in expert_classes:
        got = _experts(key, system, hw, prof)
        if got is not None:
            prof = _replaced(prof, key, *got)
            prof = dataclasses.replace(prof, fallbacks={k: v for k, v in prof.fallbacks.items() if k != key})
            done.append(key)
    if expert_classes:
        return prof, done
    for key in module_classes:
        if key in per_kernel:
            continue
        got = _module(key, system, hw, prof)
        if got is not None:
            prof = _replaced(prof, key, *got)
            done.append(key)
    for key in per_kernel if not module_classes else ():
        got = _per_kernel(key, system, None, hw, prof)
        if got is not None:
            prof = _replaced(prof, key, *got)
            done.append(key)
    return prof, done


def _module(key: str, system: str, hw, prof):
    """(fit, profile, None) of module-table class `key` from the system's vLLM tables, or None (no rows, or the fit
    missed: the shipped class stays)."""
    tables = opdb.locate(opdb.data_root(None), system, "vllm")
    rows = [r for r in opdb_ops.attention_rows(tables, hw, prof) if r.key == key]
    if not rows:
        return None
    g, refit = fit_class(rows[0], prof)
    return (g, refit, None) if _kept(g) else None


def _experts(key: str, system: str, hw, prof):
    """(fit, profile, None) of routed-experts class `key` from the system's vLLM moe_perf table, or None (no rows, or
    the fit missed: the profile stays as it is)."""
    tables = opdb.locate(opdb.data_root(None), system, "vllm")
    rows = [r for r in opdb_ops.expert_rows(tables, hw) if r.key == key]
    for backend in opdb_ops.VLLM_BACKEND_KERNELS if not rows else ():  # a vLLM backend's class: its kernel's rows
        rows = [r for r in opdb_ops.expert_rows(tables, hw, backend=backend) if r.key == key] or rows
    if not rows and key in BACKEND_KEYS:  # a backend's class: its engine's tables
        sglang = opdb.locate(opdb.data_root(None), system, "sglang", names=opdb.KERNEL_TABLES)
        rows = [r for r in opdb_ops.deepep_expert_rows(sglang, hw) if r.key == key]
    if not rows and key == "experts.bf16.triton_default":  # the untuned Triton kernel: SGLang's moe_perf rows
        sglang = opdb.locate(opdb.data_root(None), system, "sglang")
        rows = opdb_ops.triton_default_expert_rows(sglang, hw)
    if not rows:
        return None
    g, refit = fit_class(rows[0], prof)
    return (g, refit, None) if _kept(g) else None


def _replaced(prof, key: str, g, refit, note: str | None):
    """`refit` with class `key`'s fit_error, provenance (and fallback note, where one is given) replaced by g's."""
    classes = {**prof.provenance["classes"], key: g.record()}  # (in its place: a diff shows only what moved)
    fit_error = {**prof.fit_error, key: round(g.mape_held, 2)}
    fallbacks = prof.fallbacks if note is None else {**prof.fallbacks, key: note}
    return dataclasses.replace(refit, fit_error=fit_error, fallbacks=fallbacks,
                               provenance={**prof.provenance, "classes": classes})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="shipped measured profile (configs/profiles/NAME.yaml)")
    p.add_argument("--op-database", required=True, metavar="SYSTEM", help="the op database system it was fitted on")
    p.add_argument("--module-class", action="append", default=[], metavar="KEY",
                   help="refit this module-table class instead (repeatable), e.g. attn.decode.mla.bf16")
    p.add_argument("--expert-class", action="append", default=[], metavar="KEY",
                   help="refit this routed-experts class instead (repeatable), e.g. experts.mxfp4_bf16")
    p.add_argument("--dry-run", action="store_true", help="print the refitted classes, write nothing")
    args = p.parse_args(argv)
    path = PROFILES / f"{args.profile}.yaml"
    try:
        prof, done = splice(args.profile, args.op_database, tuple(args.module_class), tuple(args.expert_class))
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for key in done:
        print(f"{args.profile}: {key}: {prof.curves[key]} (held-out MAPE {prof.fit_error[key]}%)")
    if not done or args.dry_run:
        return 0
    head = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
    step = "expert-table fit" if args.expert_class else "module-table fit" if args.module_class else "per-kernel step"
    head.append(f"# {', '.join(done)} refitted on {utc_date()} by the importer's {step} alone "
                "(benchmarks/opdb_per_kernel_splice.py); the command above gives the same class.")
    write_spec(compact(prof), str(path), "profiles", flow_leaves=True, header="\n".join(head) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
