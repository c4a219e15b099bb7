"""Which host-model terms the CPU executor's host parts need: the saved runs of
benchmarks/host_sweep.py refitted with each term of host.schedule, host.prepare and host.output
left out in turn (held at 0), side by side with the full model, fit and held-out MAPE per part.

    python benchmarks/investigations/host_terms.py --out runs/host_sweep    # the sweep's runs; a few minutes on 2 cores
    python benchmarks/investigations/host_terms.py --out runs/a runs/b      # two sweeps' runs together

Rows: `full` (calibration/host_fit.py's PART_PARAMS); `fixed x DP` (the form before the per-rank
term: the central scheduler's fixed part paid once per DP rank, schedule_step_s held at 0 so
schedule_per_rank_s is that fixed part); one row per left-out term; `warm-up kept` (the full model
on every step, the instances' first WARMUP_STEPS included); `idle kept` (the steps that follow an
idle wait of their loop kept: host_fit.steady's busy rule off).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rackplan.calibration import host_fit
from rackplan.calibration.host_fit import PART_PARAMS, HostPredictor, fit_host_parts, host_steps
from rackplan.calibration.io import read_measurements
from rackplan.specs import load_hardware, load_model, load_profile

HOLDOUT = {3, 6, 12, 24}  # as benchmarks/host_sweep.py
VARIANTS = {  # name -> (part, parameters of that part held at 0)
    "fixed x DP": ("host.schedule", ("schedule_step_s", "schedule_per_admit_s", "schedule_spec_s")),
    "no schedule_per_rank_s": ("host.schedule", ("schedule_per_rank_s",)),
    "no schedule_per_admit_s": ("host.schedule", ("schedule_per_admit_s",)),
    "no schedule_spec_s": ("host.schedule", ("schedule_spec_s",)),
    "no prepare_spec_s": ("host.prepare", ("prepare_spec_s",)),
    "no output_per_seq_s": ("host.output", ("output_per_seq_s",)),
    "no output_per_finish_s": ("host.output", ("output_per_finish_s",)),
    "no output_spec_s": ("host.output", ("output_spec_s",)),
}
PARTS = ("host.schedule", "host.prepare", "host.output")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", nargs="+", default=["runs/host_sweep"], help="host_sweep.py output folders (runs/)")
    args = ap.parse_args()
    records = []
    folders = [f for out in args.out for f in sorted((Path(out) / "runs").glob("*/"))]
    for i, folder in enumerate(folders):
        records += [dict(r, _run=i) for r in read_measurements(folder)]
    steps = host_steps(records)
    pred = HostPredictor(load_model("tiny-moe-mtp"), load_hardware("cpu-local"))
    base = load_profile("cpu-local").host
    zero = {n: 0.0 for names in PART_PARAMS.values() for n in names if n.endswith("_s")}
    rows = [("full", fit_host_parts(pred, steps, base, "decode", HOLDOUT))]
    for name, (part, off) in VARIANTS.items():
        params = {part: tuple(n for n in PART_PARAMS[part] if n not in off)}
        fit = fit_host_parts(pred, steps, dataclasses.replace(base, **zero), "decode", HOLDOUT, params)
        rows.append((name, fit))
    rows.append(("warm-up kept", fit_host_parts(pred, steps, base, "decode", HOLDOUT, warmup=0)))
    rows.append(("idle kept", fit_host_parts(pred, steps, base, "decode", HOLDOUT, busy=False)))
    print(f"{sum(s.role == 'decode' for s in steps)} decode steps; fit / held-out MAPE %")
    print(f"{'model':26s} " + " ".join(f"{p:>14s}" for p in PARTS))
    for name, fit in rows:
        cells = [f"{fit.fit_error.get(p, float('nan')):5.1f} / {fit.held_error.get(p, float('nan')):4.1f}"
                 for p in PARTS]
        print(f"{name:26s} " + " ".join(f"{c:>14s}" for c in cells))
    pre = load_profile("cpu-local").host_for("prefill")
    print("prefill loop, fit / held-out MAPE % (fit / held-out shapes)")
    for name, warmup, busy in (("full", host_fit.WARMUP_STEPS, True), ("warm-up kept", 0, True),
                               ("idle kept", host_fit.WARMUP_STEPS, False)):
        fit = fit_host_parts(pred, steps, pre, "prefill", HOLDOUT, warmup=warmup, busy=busy)
        print(f"{name:26s} " + " ".join(f"{p}: {fit.fit_error[p]:.1f} / {fit.held_error.get(p, float('nan')):.1f} "
                                        f"({fit.points[p][0]}/{fit.points[p][1]})" for p in fit.fit_error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
