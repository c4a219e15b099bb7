"""The closed calibration loop on this machine: execute -> measure -> fit -> predict -> compare.

  1. (--microbench) measure matmul rate and copy bandwidth -> configs/hardware/cpu-local.yaml
  2. execute tiny-cpu on 2 gloo ranks over a sweep of decode batch sizes and prefill token budgets
     (one temporary plan per sweep point: the plan's max_batch_per_rank / max_tokens_per_step),
     every point repeated in separate runs (seeds 0..repeats-1), interleaved in time
  3. calibrate a cpu-local profile on some sizes, holding others out (engine-loop overhead from a
     serving run of a different workload, tiny-chunked)
  4. execute serving-mode runs of the plan's workload (same requests, repeated)
  Every run waits (up to quiet_s) for the shared cores to be quiet before it starts.
  5. validate: held-out steps per op and per step, serving TTFT/TPOT p50/p90 through the simulator

Usage: python benchmarks/calibration_loop.py [--quick] [--out runs/calibration] [--microbench]
Prints the validate report and one JSON line of MAPEs; exit status is validate's.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

from rackplan.specs import dump_yaml, load_plan

# Sweep points are repeated in separate runs, interleaved in time: a neighbour's burst on the
# shared cores slows a whole run, and the fit takes the median over runs of each run's median.
FULL = {"decode": (1, 2, 4, 6, 8, 12, 16), "prefill": (32, 64, 96, 128, 192, 256),
        "holdout": ("decode:4,12", "prefill:96,192"), "steps": 12, "repeats": 5, "serve_repeats": 3,
        "quiet_s": 20.0}
QUICK = {"decode": (1, 4, 16), "prefill": (32, 128, 256), "holdout": ("decode:4",), "steps": 6, "repeats": 1,
         "serve_repeats": 1, "quiet_s": 0.0}
RACKPLAN = [sys.executable, "-m", "rackplan.cli"]


def sweep_plans(plan_name: str, cfg: dict, folder: Path) -> list[tuple[str, Path]]:
    """One plan file per sweep point: (label, path)."""
    plan = load_plan(plan_name)
    out = []
    for b in cfg["decode"]:
        lay = dataclasses.replace(plan.decode[0], max_batch_per_rank=b)
        out.append((f"decode-b{b}", dataclasses.replace(plan, decode=(lay,))))
    for t in cfg["prefill"]:  # whole prompts fill the budget (the last one chunked): t tokens per rank
        lay = dataclasses.replace(plan.prefill[0], max_tokens_per_step=t)
        # the decode instance of these runs steps at the sweep's largest batch, not at a planned
        # batch of hundreds that serving never reaches
        dec = dataclasses.replace(plan.decode[0], max_batch_per_rank=min(plan.decode[0].max_batch_per_rank,
                                                                         max(cfg["decode"])))
        out.append((f"prefill-t{t}", dataclasses.replace(plan, prefill=(lay,), decode=(dec,))))
    paths = []
    for label, p in out:
        path = folder / "plans" / f"{label}.yaml"
        dump_yaml(p, path)
        paths.append((label, path))
    return paths


def prefill_gap_s(plan_name: str) -> float:
    """Idle seconds between a prefill replica's steps when serving the plan's open-loop workload:
    replicas / arrival rate (0 for a colocated plan, whose engine never idles between a prefill
    and its decode step). On this VM a prefill step after 125 ms idle takes 7-48% longer than
    back to back (cold caches), so the sweep steps at the gap serving will see."""
    from rackplan.specs import load_workload
    plan = load_plan(plan_name)
    wl = load_workload(plan.workload) if plan.workload else None
    if plan.colocated or wl is None or wl.arrival.kind != "poisson" or not wl.arrival.rate:
        return 0.0
    return min(1.0, sum(lay.replicas for lay in plan.prefill) / wl.arrival.rate)


def busy_fraction(window_s: float = 0.5) -> float:
    """Share of this machine's CPU time in use over `window_s` (from /proc/stat; 0 elsewhere)."""
    def sample():
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(v) - v[3] - v[4], sum(v)  # busy (not idle, not iowait), total jiffies
    if not Path("/proc/stat").exists():
        return 0.0
    (b0, t0), _ = sample(), time.sleep(window_s)
    b1, t1 = sample()
    return (b1 - b0) / max(t1 - t0, 1)


def wait_quiet(max_wait_s: float, busy_max: float = 0.2) -> float:
    """Wait (at most `max_wait_s`) until the shared cores are quiet, so a run does not start in
    a neighbour's burst; returns the seconds waited."""
    t0 = time.time()
    while time.time() - t0 < max_wait_s and busy_fraction() > busy_max:
        pass
    return time.time() - t0


def sh(args: list[str]) -> None:
    print("$ rackplan " + " ".join(args[len(RACKPLAN):]) if args[:len(RACKPLAN)] == RACKPLAN else "$ " + " ".join(args),
          flush=True)
    subprocess.run(args, check=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default="tiny-cpu")
    ap.add_argument("--out", default="runs/calibration")
    ap.add_argument("--quick", action="store_true", help="reduced sweep (the integration test)")
    ap.add_argument("--microbench", action="store_true", help="rewrite configs/hardware/cpu-local.yaml first")
    ap.add_argument("--profile-out", help="profile to write (default: OUT/cpu-local.yaml)")
    ap.add_argument("--max-mape", type=float, default=10.0)
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if args.microbench:
        sh(RACKPLAN + ["calibrate", "--microbench", "--hardware", "cpu-local",
                       "--out-hardware", "configs/hardware/cpu-local.yaml"])
    runs = []
    gap = prefill_gap_s(args.plan)
    for rep in range(cfg["repeats"]):
        for label, path in sweep_plans(args.plan, cfg, out):
            run = out / "sweep" / f"{label}-r{rep}"
            # decode points run the decode instance only; prefill points the prefill instance, at the
            # idle gap between steps that serving shows (tiny-cpu, colocated: both instances, no gap)
            skip = ["--skip-prefill"] if label.startswith("decode") else \
                ["--skip-decode", "--step-gap", str(gap)] if gap else []
            wait_quiet(cfg["quiet_s"])
            sh(RACKPLAN + ["execute", "--force", "--plan", str(path), "--device", "cpu", "--out", str(run),
                           "--steps", str(cfg["steps"]), "--seed", str(rep), *skip])
            runs.append(run)
    # engine-loop overhead per tick (host.schedule_step_s) is fitted on a serving run of another workload
    # (tiny-chunked, closed loop) and validated on the plan's own workload below
    loop_run = out / "serve-fit"
    wait_quiet(cfg["quiet_s"])
    sh(RACKPLAN + ["execute", "--force", "--plan", args.plan, "--device", "cpu", "--out", str(loop_run),
                   "--workload", "tiny-chunked"])
    prof = Path(args.profile_out or out / "cpu-local.yaml")
    hold = [x for h in cfg["holdout"] for x in ("--holdout", h)]
    meas = [x for r in runs for x in ("--measurements", str(r))]
    sh(RACKPLAN + ["calibrate", "--plan", args.plan, *meas, "--measurements", str(loop_run), *hold,
                   "--name", "cpu-local", "--out", str(prof)])
    serves = []
    for rep in range(cfg["serve_repeats"]):
        serve = out / f"serve-r{rep}"
        wait_quiet(cfg["quiet_s"])
        sh(RACKPLAN + ["execute", "--force", "--plan", args.plan, "--device", "cpu", "--out", str(serve),
                       "--seed", str(rep), "--workload", load_plan(args.plan).workload or "tiny-chat"])
        serves += ["--measurements", str(serve)]
    report = out / "validate.json"
    cmd = RACKPLAN + ["validate", "--plan", args.plan, *meas, *serves, "--profile", str(prof)]
    sh(cmd)
    res = subprocess.run(cmd + ["--json", "--max-mape", str(args.max_mape)], capture_output=True, text=True)
    text = res.stdout[: res.stdout.rfind("}") + 1]
    report.write_text(text)
    gated = json.loads(text)["gated"]
    print(json.dumps({"gated_mape_pct": {k: round(v, 2) for k, v in gated.items()},
                      "wall_s": round(time.time() - t0, 1), "profile": str(prof)}))
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
