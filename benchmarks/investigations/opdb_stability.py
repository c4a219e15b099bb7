"""How stable is the op-database fit of the expert classes? Refit them under a perturbation that must
not matter and print fit / held-out MAPE and a digest of the fitted curves.

    python benchmarks/investigations/opdb_stability.py --op-database-root $R [--perturb data-ulp]
        [--starts 0,-1,1,-0.5,0.5]

Perturbations: `none`; `data-ulp`, every measured time moved up by one ulp (np.nextafter); `start-ulp`, the
first multi-start point moved by 1e-15 decades. Each class is fitted as calibrate fits it
(calibration/opdb_fit.fit_class), against the committed measured profile for every other curve, so `none`
reproduces its recorded held-out MAPE (benchmarks/RESULTS.md, 2026-12-02 "same inputs, same report").
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib

import numpy as np

from rackplan.calibration import opdb, opdb_fit, opdb_ops
from rackplan.specs import load_hardware, load_profile


def system_parser(doc: str, system: str, hardware: str, profile: str, profile_help: str) -> argparse.ArgumentParser:
    """The arguments of a benchmark over one system's op-database tables and a committed profile."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--system", default=system)
    p.add_argument("--hardware", default=hardware)
    p.add_argument("--profile", default=profile, help=profile_help)
    p.add_argument("--op-database-root", required=True)
    return p


def main() -> None:
    p = system_parser(__doc__, "gb300", "gb300-nvl72", "gb300-nvl72-vllm", "profile supplying every other curve")
    p.add_argument("--perturb", choices=("none", "data-ulp", "start-ulp"), default="none")
    p.add_argument("--starts", help="decades the multi-start shifts (default: opdb_fit.STARTS)")
    p.add_argument("--only", help="comma-separated classes (default: every experts.* class)")
    args = p.parse_args()
    if args.starts:
        opdb_fit.STARTS = tuple(float(x) for x in args.starts.split(","))
    if args.perturb == "start-ulp":
        opdb_fit.STARTS = (opdb_fit.STARTS[0] + 1e-15,) + opdb_fit.STARTS[1:]
    hw, prof = load_hardware(args.hardware), load_profile(args.profile)
    tables = opdb.locate(opdb.data_root(args.op_database_root), args.system)
    print("class             fit MAPE %  held-out MAPE %  curves")
    for rows in opdb_ops.expert_rows(tables, hw):
        if args.only and rows.key not in args.only.split(","):
            continue
        if args.perturb == "data-ulp":
            rows = dataclasses.replace(rows, seconds=np.nextafter(rows.seconds, np.inf))
        fit, fitted = opdb_fit.fit_class(rows, prof)
        curves = repr({k: fitted.curves[k] for k in (rows.key, *(k for k, _, _ in rows.also))})
        print(f"{rows.key:17s} {fit.mape_fit:10.3f} {fit.mape_held:16.3f}  "
              f"{hashlib.sha256(curves.encode()).hexdigest()[:10]}")


if __name__ == "__main__":
    main()
