"""Host-loop sweep on the CPU executor -> `rackplan calibrate --host-sweep` -> per-part error.

Serving runs of tiny-moe-mtp on cpu-local (one DEP1 prefill instance, a DEPd decode instance with
0, 1 or 2 draft tokens), each a closed loop of C requests in flight (16-token prompts, 32-token
outputs), so that decode steps sit at C / d sequences per rank for most of the run and pass through
every smaller size while it fills and drains. Every step records its host parts (host.schedule,
host.prepare, host.dp_sync, host.sample, host.output: executor/disagg.py). The fit holds out the
step sizes --holdout (sequences on the busiest rank) and prints each part's MAPE on the fit and
held-out shapes, plus the run-to-run spread of the same shape (the machine is shared: medians of
per-run medians), and the DP wait it does not fit (host.dp_sync's wall time less its CPU time).

    python benchmarks/host_sweep.py --out runs/host_sweep            # ~10-15 min on 2 busy cores
    python benchmarks/host_sweep.py --out runs/host_sweep --fit-only # refit the runs already there
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from rackplan.calibration.host_fit import DP_WAIT, host_steps, medians
from rackplan.calibration.io import read_measurements
from rackplan.specs import load_profile

DPS = (1, 2)
DEPTHS = (0, 1, 2)
CONCURRENCY = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
HOLDOUT = (3, 6, 12, 24)  # sequences on the busiest rank held out of the fit
ACCEPTANCE = {1: 1.8, 2: 2.4}  # acceptance length per depth (drawn, executor/speculate.py)


def plan_yaml(dp: int, depth: int, workload: Path) -> dict:
    spec = {"num_tokens": depth, "acceptance_length": ACCEPTANCE[depth]} if depth else None
    host = {"cuda_graphs": False, "async_scheduling": False}
    return {"name": f"host-dp{dp}-d{depth}", "model": "tiny-moe-mtp", "hardware": "cpu-local", "num_gpus": 1 + dp,
            "workload": str(workload), "profile": "cpu-local",
            "prefill": [{"role": "prefill", "dp": 1, "max_tokens_per_step": 256, "max_batch_per_rank": 32, **host}],
            "decode": [{"role": "decode", "dp": dp, "max_batch_per_rank": 32, "max_tokens_per_step": 128,
                        "speculation": spec, **host}],
            "slo": {"ttft_p90_s": 5.0, "tpot_p90_s": 1.0}}


def workload_yaml(c: int) -> dict:
    return {"name": f"closed-c{c}", "arrival": {"kind": "concurrency", "concurrency": c},
            "isl": {"kind": "fixed", "value": 16}, "osl": {"kind": "fixed", "value": 32},
            "num_requests": max(4 * c, 16), "seed": 0}


def run_all(out: Path, repeats: int) -> list[Path]:
    specs, runs = out / "specs", []
    specs.mkdir(parents=True, exist_ok=True)
    todo = [(dp, d, c, r) for r in range(repeats) for dp in DPS for d in DEPTHS for c in CONCURRENCY]
    for i, (dp, depth, c, rep) in enumerate(todo):
        folder = out / "runs" / f"dp{dp}-d{depth}-c{c}-r{rep}"
        runs.append(folder)
        if (folder / "measurements.jsonl").is_file():
            continue
        wl = specs / f"closed-c{c}.yaml"
        wl.write_text(yaml.safe_dump(workload_yaml(c)))
        plan = specs / f"host-dp{dp}-d{depth}.yaml"
        plan.write_text(yaml.safe_dump(plan_yaml(dp, depth, wl)))
        print(f"[{i + 1}/{len(todo)}] dp {dp} depth {depth} concurrency {c} repeat {rep}", flush=True)
        subprocess.run([sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(plan), "--device", "cpu",
                        "--workload", str(wl), "--out", str(folder), "--seed", str(rep), "--timeout", "300"],
                       check=True, stdout=subprocess.DEVNULL)
    return runs


def spread(runs: list[Path]) -> tuple[dict[str, float], list[float]]:
    """Per part: median over shapes of the relative spread (max - min) / median of the per-run
    medians; and the decode DP wait of each shape (median over runs of the per-run medians)."""
    per: dict[str, list[float]] = {}
    shapes: dict[tuple, dict[int, list]] = {}
    for i, folder in enumerate(runs):
        for s in medians(host_steps([dict(r, _run=i) for r in read_measurements(folder)])):
            shapes.setdefault(s.key, {})[i] = s
    waits = [float(np.median([s.parts[DP_WAIT] for s in by_run.values()])) for key, by_run in shapes.items()
             if key[0] == "decode" and all(DP_WAIT in s.parts for s in by_run.values())]
    for by_run in shapes.values():
        if len(by_run) < 2:
            continue
        for part in next(iter(by_run.values())).parts:
            vals = [s.parts[part] for s in by_run.values() if part in s.parts]
            if len(vals) >= 2 and np.median(vals) > 0:
                per.setdefault(part, []).append((max(vals) - min(vals)) / float(np.median(vals)))
    return {k: round(100 * float(np.median(v)), 1) for k, v in per.items()}, waits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/host_sweep")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--fit-only", action="store_true", help="fit the runs under --out without running more")
    args = ap.parse_args()
    out = Path(args.out)
    runs = sorted((out / "runs").glob("*/")) if args.fit_only else run_all(out, args.repeats)
    prof_path = out / "host-cpu-local.yaml"
    cmd = [sys.executable, "-m", "rackplan.cli", "calibrate", "--host-sweep", "--base", "cpu-local",
           "--holdout", "decode:" + ",".join(map(str, HOLDOUT)), "--out", str(prof_path), "--json"]
    for folder in runs:
        cmd += ["--measurements", str(folder)]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["profile"]
    prov = load_profile(prof_path).provenance["host_fit"]
    noise, waits = spread(runs)
    print(f"{len(runs)} runs, {prov['steps']} steps; held-out sizes {prov['held_out_sizes']}")
    print(f"{'part':14s} {'fit MAPE %':>10s} {'held-out MAPE %':>16s} {'shapes fit/held':>16s} {'run spread %':>13s}")
    for part, err in res["host_fit_error_pct"].items():
        n_fit, n_held = prov["shapes_fit_held"][part]
        held = res["host_held_out_error_pct"].get(part, float("nan"))
        print(f"{part:14s} {err:10.1f} {held:16.1f} {f'{n_fit}/{n_held}':>16s} {noise.get(part, float('nan')):13.1f}")
    if waits:
        print(f"{DP_WAIT} (not fitted: the OS scheduling the ranks): median {np.median(waits) * 1e6:.0f} us over "
              f"{len(waits)} shapes ({np.percentile(waits, 10) * 1e6:.0f}-{np.percentile(waits, 90) * 1e6:.0f} us), "
              f"run spread {noise.get(DP_WAIT, float('nan')):.1f}%")
    print(f"profile: {prof_path}")
    print(json.dumps({k: v for k, v in vars(load_profile(prof_path).host).items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
