"""Does the in-place CPU-speed probe account for a plan_to_hardware sweep's round-to-round spread?

For each sweep shape (OUT/sweep/<label>-r<round>: one execute run per round), the run's median step wall time and
its probe (calibration/speed.py: the median of its ranks' host.probe CPU seconds); per shape, the spread of its
rounds as measured and after calibrate's normalisation (each run x the reference probe / its own, the reference
the median over every run); over all shapes, the least-squares slope of log(step / its shape's geometric mean)
on log(probe / its shape's geometric mean) (1: steps follow the probe one for one; 0: unrelated). Then per served
segment (OUT/serve-*pct/s*), its speed factor against the fitted profile's reference and the decode leader's
forward ops / their price at the reference (serve_drift.py's ratio): ratio / factor near 1 where the probe
explains the excess.

Usage: python benchmarks/investigations/speed_spread.py OUT [OUT ...]
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_drift import step_ratios  # noqa: E402

from rackplan.calibration.io import read_measurements  # noqa: E402
from rackplan.calibration.speed import PROBE, profile_reference, speed_factor  # noqa: E402
from rackplan.specs import load_profile  # noqa: E402


def run_point(path: Path) -> tuple[float, float] | None:
    """(median step wall s over the run's step records, its probe CPU s), None without either."""
    recs = read_measurements(path)
    steps = [r["seconds"] for r in recs if r["op"] == "step" and r["role"] != "serve"]
    probes = [r["cpu_s"] for r in recs if r["op"] == PROBE]
    return (float(np.median(steps)), float(np.median(probes))) if steps and probes else None


def spread(v: np.ndarray) -> tuple[float, float]:
    """(max / min, sd of the logs) of one shape's run medians."""
    return float(v.max() / v.min()), float(np.std(np.log(v)))


def sweep(out: Path) -> dict:
    """Per shape: runs' (step, probe); the table's figures."""
    shapes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for d in sorted((out / "sweep").iterdir()):
        pt = run_point(d) if (d / "measurements.jsonl").exists() else None
        if pt is not None:
            shapes[re.sub(r"-r\d+$", "", d.name)].append(pt)
    ref = float(np.median([p for pts in shapes.values() for _, p in pts]))
    rows, xs, ys = {}, [], []
    for shape, pts in sorted(shapes.items()):
        if len(pts) < 2:
            continue
        step, probe = np.array([s for s, _ in pts]), np.array([p for _, p in pts])
        rows[shape] = (len(pts), *spread(step), *spread(step * ref / probe))
        xs += list(np.log(probe) - np.mean(np.log(probe)))
        ys += list(np.log(step) - np.mean(np.log(step)))
    x, y = np.array(xs), np.array(ys)
    slope = float(x @ y / (x @ x)) if len(x) and x @ x > 0 else float("nan")
    return {"ref": ref, "rows": rows, "slope": slope, "runs": len(x)}


def served(out: Path) -> list[tuple[str, float | None, float]]:
    """(segment, its speed factor, median decode ops / price at the reference) per served segment."""
    prof = out / "cpu-local.yaml"
    ref = profile_reference(load_profile(prof))
    rows = []
    for run in sorted(out.glob("serve-*pct/s*")):
        if not (run / "measurements.jsonl").exists():
            continue
        f = speed_factor(read_measurements(run), ref) if ref else None
        r = step_ratios(out / "plan.yaml", prof, run / "measurements.jsonl")
        rows.append((f"{run.parent.name}/{run.name}", f, float(np.median(r)) if len(r) else float("nan")))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="+", type=Path)
    args = ap.parse_args(argv)
    for out in args.out:
        sw = sweep(out)
        print(f"{out}: sweep reference probe {sw['ref'] * 1e3:.2f} ms; slope of log step on log probe within "
              f"shapes {sw['slope']:.2f} over {sw['runs']} runs")
        print(f"{'shape':>16} {'runs':>4} {'max/min':>8} {'log sd':>7} {'max/min normalised':>19} {'log sd':>7}")
        for shape, (n, mm, sd, mm_n, sd_n) in sw["rows"].items():
            print(f"{shape:>16} {n:4d} {mm:8.3f} {sd:7.3f} {mm_n:19.3f} {sd_n:7.3f}")
        med = np.median([v for v in sw["rows"].values()], axis=0) if sw["rows"] else None
        if med is not None:
            print(f"{'median':>16} {'':>4} {med[1]:8.3f} {med[2]:7.3f} {med[3]:19.3f} {med[4]:7.3f}")
        for seg, f, ratio in served(out):
            fs = "n/a" if f is None else f"{f:.3f}"
            at = "n/a" if f is None else f"{ratio / f:.3f}"
            print(f"{seg:>20} speed {fs}  decode ops / price {ratio:.3f} at the reference, {at} at the speed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
