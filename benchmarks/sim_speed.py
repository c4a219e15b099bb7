"""Simulator speed: simulated requests per CPU-second, with the targets of issue 11 beside them.

Whole process, start-up included (each case a `rackplan` subprocess; CPU from getrusage):
  (a) the default rack scenario (`rackplan simulate`: V4.1-Flash on one GB300 NVL72, 4 x DEP2
      prefill + DEP64 decode, agentic chat) at --requests-a requests (default 40,000);
  (b) one DEP64 decode instance kept full (DeepSeek-V3 on GB200 NVL72, 256 sequences per rank,
      ISL 1000 / OSL 1000, closed loop at 64 x 256) fed by a DEP8 prefill instance;
  `rackplan --help` and `rackplan simulate --requests 10`; (a) with a cold imbalance cache.
In process (the simulation alone): CPU seconds against requests (10k-80k) and cluster size
(1, 2, 4, 8 racks of (a): instances, rate and requests scaled with the racks).
--baseline PYTHON runs the whole-process cases with another checkout's interpreter too, side by
side, with the ratio; the two take turns run by run, so a change of the machine's load falls on both.

    python benchmarks/sim_speed.py [--requests-a N] [--baseline /path/to/other/.venv/bin/python] [--whole-only]
        [--bytecode-cache]
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from rackplan.sim.simulator import simulate, with_rate
from rackplan.specs import Plan, Workload, from_dict, load_plan, load_profile, load_workload

TARGET_RPS = 25_000  # simulated requests per CPU-second, case (a), whole process (issue 11)
TARGET_RPS_39 = 100_000  # the same, issue 39's target
TARGET_HELP_S, TARGET_SIM10_S = 0.3, 0.6


OUTPUTS: dict[tuple, str] = {}  # command -> its stdout (the last run's; case (a): the --json report)


def child_cpu(cmd: list[str], env: dict | None = None) -> float:
    """CPU seconds (user + system) of a subprocess and its children (its stdout kept in OUTPUTS)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    OUTPUTS[tuple(cmd)] = out
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def case_b(folder: Path, requests: int) -> list[str]:
    """Plan and workload files of case (b); returns the simulate arguments. Only the fields set are
    written, so an older checkout (--baseline) reads the same files."""
    plan = {"name": "dep64-decode", "model": "deepseek-v3", "hardware": "gb200-nvl72", "num_gpus": 72,
            "prefill": [{"role": "prefill", "dp": 8, "max_tokens_per_step": 16384}],
            "decode": [{"role": "decode", "dp": 64, "max_batch_per_rank": 256, "dbo": True}]}
    wl = {"name": "1k1k", "arrival": {"kind": "concurrency", "concurrency": 64 * 256},
          "isl": {"kind": "fixed", "value": 1000}, "osl": {"kind": "fixed", "value": 1000}, "num_requests": requests}
    from_dict(Plan, plan), from_dict(Workload, wl)  # the same specs as before, validated here
    (folder / "plan_b.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    (folder / "wl_b.yaml").write_text(yaml.safe_dump(wl, sort_keys=False))
    # --requests: exactly this many (without it `simulate` picks a steady-state run length)
    return ["--plan", str(folder / "plan_b.yaml"), "--workload", str(folder / "wl_b.yaml"), "--requests", str(requests)]


def case_a(args) -> list[str]:
    return ["simulate", "--requests", str(args.requests_a), "--json"]


def whole_process(pythons: list[str], args, folder: Path) -> list[list[tuple[str, int, float]]]:
    """(case, requests, CPU s) of each whole-process case, per interpreter in `pythons`: the interpreters
    take turns run by run (each repeat of each case), so a change of the machine's load falls on all alike."""
    warm = os.environ.copy()
    warm.setdefault("RACKPLAN_CACHE_DIR", str(folder / "cache"))
    if args.bytecode_cache:  # as an installed package runs: modules compiled once (in a folder of our own)
        warm.pop("PYTHONDONTWRITEBYTECODE", None)
        warm["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    b_args = case_b(folder, args.requests_b)

    def turns(args_: list[str], env: dict | None = None, reps: int = 1) -> list[float]:
        """Best CPU s of `reps` runs of `rackplan args_` per interpreter, the interpreters alternating."""
        best = [math.inf] * len(pythons)
        for _ in range(reps):
            for i, python in enumerate(pythons):
                best[i] = min(best[i], child_cpu([python, "-m", "rackplan.cli"] + args_, env))
        return best

    turns(["simulate", "--requests", "200", "--json"], warm)  # fills the warm cache: case (a) ...
    turns(["simulate"] + case_b(folder, 200) + ["--json"], warm)  # ... and (b) (else the first side pays it)
    a = case_a(args)

    def cold() -> dict:  # an empty cache folder
        return dict(warm, RACKPLAN_CACHE_DIR=tempfile.mkdtemp(dir=folder))

    # start-up rows: best of 5 (a few tens of ms, where one run on a shared machine moves by as much)
    cases = [("rackplan --help", 0, turns(["--help"], warm, 5)),
             ("rackplan simulate --requests 10", 10, turns(["simulate", "--requests", "10", "--json"], warm, 5)),
             ("(a) default rack, cold imbalance cache", args.requests_a,
              [child_cpu([python, "-m", "rackplan.cli"] + a, cold())
               for python in pythons]),
             ("(a) default rack (best of 3)", args.requests_a, turns(a, warm, 3)),
             ("(b) DEP64 decode, 256/rank, 1k/1k", args.requests_b, turns(["simulate"] + b_args + ["--json"], warm))]
    return [[(name, n, cpu[i]) for name, n, cpu in cases] for i in range(len(pythons))]


def same_report(ours: str, base: str) -> str:
    """How the two --json reports of case (a) compare (byte-identical, or the latency changes)."""
    if ours == base:
        return "byte-identical"
    a, b = json.loads(base)["metrics"], json.loads(ours)["metrics"]
    keys = [f"{m}_p{q}_s" for m in ("ttft", "tpot") for q in (50, 90)]
    return "differs: " + ", ".join(f"{k} {b[k] / a[k] - 1:+.3%}" for k in keys)


def racks(k: int, requests_per_rack: int):
    """Case (a) on k racks: k times the instances, the rate and the requests (one NVLink domain
    per rack, so KV transfers cross the scale-out network from 2 racks on)."""
    plan = load_plan("v41-flash-gb300-nvl72")
    wl = load_workload(plan.workload)
    def more(pool):
        return tuple(dataclasses.replace(lay, replicas=lay.replicas * k) for lay in pool)
    scaled = dataclasses.replace(plan, num_gpus=plan.num_gpus * k, prefill=more(plan.prefill), decode=more(plan.decode))
    return scaled, with_rate(wl, wl.arrival.rate * k), requests_per_rack * k


def in_process(plan, wl, prof, n: int) -> float:
    gc.collect()  # the previous run's garbage is not this run's cost
    t0 = time.process_time()
    simulate(plan, wl, prof, num_requests=n)
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests-a", type=int, default=40000)
    ap.add_argument("--requests-b", type=int, default=60000)
    ap.add_argument("--baseline", help="python of another checkout, run side by side (e.g. before a change)")
    ap.add_argument("--bytecode-cache", action="store_true",
                    help="let the processes keep compiled modules (a folder of this run's; by default the environment "
                    "decides: PYTHONDONTWRITEBYTECODE=1 compiles every module of every process)")
    ap.add_argument("--whole-only", action="store_true", help="the whole-process cases only (no in-process tables)")
    args = ap.parse_args()
    print(f"bytecode: {'cached (--bytecode-cache)' if args.bytecode_cache else 'as the environment has it'} "
          f"(PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')})")
    print(f"load average at the start: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1 / 5 / 15 min)")
    with tempfile.TemporaryDirectory(prefix="rackplan-sim-speed-") as tmp:
        folder = Path(tmp)
        ours, *rest = whole_process([sys.executable] + ([args.baseline] if args.baseline else []), args, folder)
        base = rest[0] if rest else None
    report_a = [OUTPUTS.get((python, "-m", "rackplan.cli", *case_a(args)), "")
                for python in (sys.executable, args.baseline)]
    print("Whole process (CPU s, start-up included)")
    head = f"{'case':<42}{'requests':>9}{'CPU s':>8}{'req/CPU-s':>11}"
    print(head + (f"{'baseline CPU s':>16}{'speed-up':>10}" if base else ""))
    for i, (name, n, cpu) in enumerate(ours):
        line = f"{name:<42}{n:>9}{cpu:>8.2f}{(n / cpu if n else 0):>11,.0f}"
        if base:
            line += f"{base[i][2]:>16.2f}{base[i][2] / cpu:>9.1f}x"
        print(line)
    cpu_a = ours[3][2]
    print(f"target (a) >= {TARGET_RPS:,} req/CPU-s: {args.requests_a / cpu_a:,.0f} "
          f"({args.requests_a / cpu_a / TARGET_RPS:.2f}x the target; issue 39's {TARGET_RPS_39:,}: "
          f"{args.requests_a / cpu_a / TARGET_RPS_39:.2f}x); --help {ours[0][2]:.2f} s "
          f"(< {TARGET_HELP_S}); simulate --requests 10 {ours[1][2]:.2f} s (< {TARGET_SIM10_S})")
    if base:
        print(f"(a) --json report against the baseline's (same seed): {same_report(*report_a)}")
    print(f"load average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.whole_only:
        return
    prof = load_profile("datasheet")
    plan, wl, _ = racks(1, 1)
    in_process(plan, wl, prof, 500)  # warm the imbalance points used below
    print("\nIn process (the simulation alone): CPU s against requests, one rack")
    print(f"{'requests':>9}{'CPU s':>8}{'us/request':>12}")
    for n in (10000, 20000, 40000, 80000):
        cpu = in_process(plan, wl, prof, n)
        print(f"{n:>9}{cpu:>8.2f}{cpu / n * 1e6:>12.1f}")
    print("\nIn process: CPU s against cluster size (10,000 requests per rack)")
    print(f"{'racks':>6}{'GPUs':>6}{'req/s':>7}{'requests':>9}{'CPU s':>8}{'us/request':>12}")
    for k in (1, 2, 4, 8):
        plan_k, wl_k, n = racks(k, 10000)
        cpu = in_process(plan_k, wl_k, prof, n)
        print(f"{k:>6}{plan_k.num_gpus:>6}{wl_k.arrival.rate:>7.0f}{n:>9}{cpu:>8.2f}{cpu / n * 1e6:>12.1f}")


if __name__ == "__main__":
    main()
