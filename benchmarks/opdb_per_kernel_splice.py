"""Refit a measured profile's per-kernel classes (calibration/opdb_import.py PER_KERNEL_SOURCE) alone, in place.

`rackplan calibrate --op-database ...` fits every op class and then, on the architectures PER_KERNEL_SOURCE names,
replaces a class with its fit on the kernel's own table (`opdb_import._per_kernel`, run on the profile the stages
before it fitted). When that step is added or changed, the other classes do not move; this script runs that step
on the shipped profile (which is what those stages fitted) and writes the profile back with the class, its
fit_error, its fallback note and its provenance replaced, instead of the whole regeneration (tens of minutes of
fitting per profile on a loaded two-core machine). A header line records that it did; running the profile's own
header command gives the same class.

Run:  python benchmarks/opdb_per_kernel_splice.py --profile gb200-nvl72-vllm --op-database gb200 [--dry-run]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rackplan.calibration import opdb_ops
from rackplan.calibration.io import utc_date
from rackplan.calibration.opdb_import import PER_KERNEL_SOURCE, _per_kernel, compact
from rackplan.outputs import write_spec
from rackplan.specs import SpecError, load_hardware, load_profile

PROFILES = Path(__file__).resolve().parents[1] / "configs" / "profiles"


def splice(profile: str, system: str) -> tuple[object, list[str]]:
    """(the profile with its per-kernel classes refitted, the keys refitted)."""
    prof = load_profile(profile)
    hw = load_hardware(prof.hardware)
    done = []
    for key in [k for (k, arch) in PER_KERNEL_SOURCE if arch == opdb_ops.ARCH.get(hw.name, "")]:
        got = _per_kernel(key, system, None, hw, prof)
        if got is None:
            continue
        g, refit, note = got
        classes = {k: v for k, v in prof.provenance["classes"].items() if k != key}
        classes[key] = g.record()
        fit_error = {k: v for k, v in prof.fit_error.items() if k != key}
        fit_error[key] = round(g.mape_held, 2)
        prof = dataclasses.replace(refit, fit_error=fit_error, fallbacks={**prof.fallbacks, key: note},
                                   provenance={**prof.provenance, "classes": classes})
        done.append(key)
    return prof, done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="shipped measured profile (configs/profiles/NAME.yaml)")
    p.add_argument("--op-database", required=True, metavar="SYSTEM", help="the op database system it was fitted on")
    p.add_argument("--dry-run", action="store_true", help="print the refitted classes, write nothing")
    args = p.parse_args(argv)
    path = PROFILES / f"{args.profile}.yaml"
    try:
        prof, done = splice(args.profile, args.op_database)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for key in done:
        print(f"{args.profile}: {key}: {prof.curves[key]} (held-out MAPE {prof.fit_error[key]}%)")
    if not done or args.dry_run:
        return 0
    head = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
    head.append(f"# {', '.join(done)} refitted on {utc_date()} by the importer's per-kernel step alone "
                "(benchmarks/opdb_per_kernel_splice.py); the command above gives the same class.")
    write_spec(compact(prof), str(path), "profiles", flow_leaves=True, header="\n".join(head) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
