"""The planner's plan on this machine, end to end: plan -> calibrate on a separate sweep -> execute
exactly the planned plan -> validate.

  1. `rackplan plan` for tiny-moe on cpu-local (a small GPU count: each "GPU" is a gloo rank on a
     CPU core) writes OUT/plan.yaml;
  2. benchmarks/calibration_loop.py on OUT/plan.yaml: a sweep of the plan's own layouts (decode
     batches, prefill budgets; benchmark runs apart from the serving runs), `rackplan calibrate`
     with held-out sizes, serving runs of exactly OUT/plan.yaml with its workload (every instance
     and replica on its own ranks), and `rackplan validate` (held-out step-time MAPE; TTFT/TPOT
     p50 of the serving runs against the simulator replaying the same requests).

Usage: python benchmarks/plan_to_hardware.py [--out runs/plan-to-hw] [--gpus 4] [--quick]
Prints the plan, the validate report and one JSON line of gated MAPEs; exit status is validate's.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibration_loop  # noqa: E402 - the sibling script

RACKPLAN = [sys.executable, "-m", "rackplan.cli"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/plan-to-hw")
    ap.add_argument("--gpus", type=int, default=4, help="GPU budget of the plan (CPU ranks here)")
    ap.add_argument("--profile", default="cpu-local", help="profile the planner prices with")
    ap.add_argument("--quick", action="store_true", help="reduced sweep")
    ap.add_argument("--max-mape", type=float, default=15.0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = out / "plan.yaml"
    calibration_loop.sh(RACKPLAN + ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", str(args.gpus),
                                    "--workload", "tiny-chat", "--ttft-p90", "1s", "--tpot-p90", "200ms",
                                    "--profile", args.profile, "--out", str(plan), "--quiet"])
    print(subprocess.run(["cat", str(plan)], capture_output=True, text=True).stdout)
    loop = ["--plan", str(plan), "--out", str(out), "--max-mape", str(args.max_mape)]
    return calibration_loop.main(loop + (["--quick"] if args.quick else []))


if __name__ == "__main__":
    sys.exit(main())
