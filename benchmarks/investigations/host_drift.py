"""How much of the host-part fits' held-out error is a whole run running faster or slower (the VM's speed
drift) and how much is the model's form, and what the executor's CPU-speed probe (executor/probe.py) removes.

    python benchmarks/investigations/host_drift.py /tmp/lead/hs3 /tmp/lead/hs4     # sweeps of benchmarks/host_sweep.py

Decode grid runs only (the closed-loop runs; the burst runs' decode instance is another regime). Per sweep
given (and all of them together), rows of held-out MAPE % per part (the shapes of 3, 6, 12, 24 sequences on
the busiest rank, as host_sweep.py):
  raw          the fit as `rackplan calibrate --host-sweep` makes it (parts as measured, its default);
  other parts  a diagnostic, not a calibration: each run's level from its OTHER parts removed (per run and
               part q: the median over the run's shapes of log(measured / the raw fit's prediction), centred
               over runs; part p is scaled by exp(-mean over q != p)), then refitted. What it takes off the raw
               error is run-level drift every part of a run shares; what is left is the form's error and the
               part's own noise. It needs no probe, so it reads sweeps run before the probe;
  probe x1     every part scaled by the runs' median probe / its run's probe (slope 1: a part follows the probe
               fully);
  probe        `calibrate --host-probe` where every run has the probe (host_fit.probe_fit): each part's slope on the
               probe learnt from the fit set's runs, every run scaled by (median / its probe) ** slope.
  run noise    the MAPE the held-out targets carry from their runs' spread alone (target_noise).
Then per sweep: the sd over runs of the run level (mean over parts of the centred log residual) before and
after the probe scaling, and the correlation of the run level with the log probe.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from rackplan.calibration.host_fit import (
    MIN_STEPS,
    PART_PARAMS,
    HostPredictor,
    fit_host_parts,
    host_steps,
    medians,
    probe_fit,
    probe_scaled,
    run_probes,
    steady,
)
from rackplan.calibration.io import read_measurements
from rackplan.specs import load_hardware, load_model, load_profile

HOLDOUT = {3, 6, 12, 24}  # as benchmarks/host_sweep.py
PARTS = tuple(PART_PARAMS)


def read(dirs: list[str]) -> list[dict]:
    """Records of the decode-grid runs under each DIR/runs (one `_run` per run folder)."""
    folders = [f for d in dirs for f in sorted((Path(d) / "runs").glob("*/")) if not f.name.startswith("prefill")]
    return [dict(r, _run=i) for i, f in enumerate(folders) for r in read_measurements(f)]


def run_residuals(pred: HostPredictor, hp, steps) -> dict[int, dict[str, float]]:
    """Per run and part: the median over the run's decode shapes (>= MIN_STEPS steady steps) of
    log(measured / predicted), centred over runs (the median over runs subtracted)."""
    out: dict[int, dict[str, float]] = {}
    memo: dict = {}
    for run in sorted({s.run for s in steps}):
        shapes = [s for s in medians(steady([s for s in steps if s.run == run and s.role == "decode"]))
                  if s.steps >= MIN_STEPS]
        for part in PARTS:
            r = [np.log(s.parts[part] / p) for s in shapes if s.parts.get(part, 0) > 0
                 for p in [pred.shape_part(hp, s, part, memo)] if p > 0]
            if r:
                out.setdefault(run, {})[part] = float(np.median(r))
    for part in PARTS:
        vals = [v[part] for v in out.values() if part in v]
        mid = float(np.median(vals)) if vals else 0.0
        for v in out.values():
            if part in v:
                v[part] -= mid
    return out


def other_parts_scaled(steps, res: dict[int, dict[str, float]]):
    """Each step's part p divided by exp(the mean of its run's centred residuals of the other parts)."""
    def level(run, part):
        others = [v for q, v in res.get(run, {}).items() if q != part]
        return float(np.exp(np.mean(others))) if others else 1.0
    return [dataclasses.replace(s, parts={n: v / level(s.run, n) if n in PARTS else v for n, v in s.parts.items()})
            for s in steps]


def target_noise(steps) -> dict[str, float]:
    """Per part: the MAPE % the held-out shapes' targets carry from their runs' spread alone (each target is a
    median over runs: per shape sd over runs of the log per-run median x 1.2533 / sqrt(runs) x sqrt(2 / pi), the
    expected absolute error of that median if the model were exact), averaged over the held-out shapes."""
    out: dict[str, list[float]] = {}
    for s in medians([s for s in steady(steps) if s.role == "decode"]):
        if s.steps < MIN_STEPS or s.size not in HOLDOUT:
            continue
        for part in PARTS:
            runs = [np.median([m.parts[part] for m in run if m.parts.get(part, 0) > 0] or [np.nan])
                    for run in s.members]
            logs = np.log([r for r in runs if r > 0])
            if len(logs) >= 2:
                out.setdefault(part, []).append(float(np.std(logs, ddof=1) * 1.2533 / np.sqrt(len(logs))
                                                      * np.sqrt(2 / np.pi)))
    return {p: 100 * float(np.mean(v)) for p, v in out.items()}


def report(name: str, records: list[dict]) -> None:
    pred = HostPredictor(load_model("tiny-moe-mtp"), load_hardware("cpu-local"))
    base = load_profile("cpu-local").host
    steps = host_steps(records)
    raw = fit_host_parts(pred, steps, base, "decode", HOLDOUT)
    res = run_residuals(pred, raw.host, steps)
    rows = [("raw", raw), ("other parts", fit_host_parts(pred, other_parts_scaled(steps, res), base, "decode",
                                                         HOLDOUT))]
    probes = run_probes(records)
    scaled, ref = probe_scaled(steps, probes)
    if ref:
        rows.append(("probe x1", fit_host_parts(pred, scaled, base, "decode", HOLDOUT)))
        rows.append(("probe", probe_fit(pred, steps, base, "decode", HOLDOUT, probes)))
    n_runs = len({s.run for s in steps})
    print(f"{name}: {n_runs} decode runs; held-out MAPE % (fit MAPE %)")
    print(f"  {'fit':12s} " + " ".join(f"{p:>16s}" for p in PARTS))
    for label, fit in rows:
        cells = [f"{fit.held_error.get(p, np.nan):7.1f} ({fit.fit_error.get(p, np.nan):4.1f})" for p in PARTS]
        print(f"  {label:12s} " + " ".join(c.rjust(16) for c in cells))
    noise = target_noise(steps)
    print(f"  {'run noise':12s} " + " ".join(f"{noise.get(p, float('nan')):7.1f}".ljust(14).rjust(16) for p in PARTS))
    lv = {r: float(np.mean(list(v.values()))) for r, v in res.items()}
    line = ("  run level (mean over parts of the centred log residual of the raw fit): "
            f"sd {100 * np.std(list(lv.values())):.1f}%")
    if ref:
        logp = {r: np.log(probes[r] / ref) for r in lv}
        after = [lv[r] - logp[r] for r in lv]
        corr = np.corrcoef([lv[r] for r in lv], [logp[r] for r in lv])[0, 1]
        line += (f"; after the probe {100 * np.std(after):.1f}%; probe sd {100 * np.std(list(logp.values())):.1f}%, "
                 f"correlation with the run level {corr:.2f}")
    print(line)
    if ref:
        print("  slopes (probe_fit): " + ", ".join(f"{p} {v:.2f}" for p, v in rows[-1][1].slopes.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="host_sweep.py --out folders")
    args = ap.parse_args()
    for d in args.dirs:
        report(d, read([d]))
    if len(args.dirs) > 1:
        report(" + ".join(args.dirs), read(args.dirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
