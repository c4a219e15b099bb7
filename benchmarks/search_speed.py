"""Planner speed: DeepSeek-V3 on 32 H200, ISL 4000 / OSL 1000, TTFT p90 <= 2 s, TPOT p90 <= 50 ms.

Runs a full `rackplan plan` (search + simulator check of the front) and, when it is installed
(AICONFIGURATOR=path, or /work/aicvenv/bin/aiconfigurator), the same case through aiconfigurator
0.12.0; both as subprocesses, CPU time and peak RSS of each child from os.wait4. Without the
aiconfigurator CLI the ratio is taken against AIC_RECORDED_CPU_S, issue 39's measurement of it (said
so in the output). With --seed-cases it also times issue 39's cases: the seed scenario (`rackplan
plan`, no arguments), GB300 NVL72 at 144 and 576 GPUs, the latency objective on the single-user
workload, and with --scale 10,000 GB300 GPUs (~10 minutes' wall on a loaded 2-core machine; --scale alone:
the H200 case and 10,000 GPUs only).
`--cold`: every rackplan run gets an empty cache folder (RACKPLAN_CACHE_DIR; the routing-imbalance
points are sampled again); by default they share the user's cache, warm after a first run. (`plan`
keeps no planner estimate between runs: only `simulate` does, keyed by the code's hash.)
Prints a markdown block for benchmarks/RESULTS.md.

`--baseline TREE`: each case first from another source tree (`git archive COMMIT | tar -x -C TREE`), side by side.

    python benchmarks/search_speed.py [--workers K] [--seed-cases] [--scale] [--cold] [--baseline TREE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASE = dict(model="deepseek-v3", hardware="h200-sxm", gpus=32, workload="isl4k-osl1k", ttft="2s", tpot="50ms")
AIC_RECORDED_CPU_S = 34.98  # aiconfigurator 0.12.0 CLI on the case above, CPU s (issue 39, measured on this VM)
RATIO_MAX = 0.02  # issue 39's target for rackplan / aiconfigurator CPU seconds
AIC_ARGS = ["cli", "default", "--model", "deepseek-ai/DeepSeek-V3", "--total-gpus", "32", "--system", "h200_sxm",
            "--backend", "trtllm", "--isl", "4000", "--osl", "1000", "--ttft", "2000", "--tpot", "50"]


COLD = False  # --cold: each rackplan run with an empty cache folder


def timed(cmd: list[str], env: dict | None = None, cwd: str | None = None) -> tuple[float, float,
                                                                                    subprocess.CompletedProcess]:
    """(wall s, CPU s of the child and its children, completed process with `max_rss_mb`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        proc = subprocess.CompletedProcess(cmd, os.waitstatus_to_exitcode(status), out.read(), err.read())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    proc.max_rss_mb = usage.ru_maxrss / 1024  # KiB on Linux
    return wall, cpu, proc


BASELINE: str | None = None  # --baseline TREE: each case also run from that source tree first (PYTHONPATH)
# the installed package's folders that live outside rackplan/ in a source tree (pyproject.toml package-dir)
MAPPED = {"sim": "sim", "executor": "executor", "calibration": "calibration", "configs": "configs"}


def package_view(tree: str, folder: str) -> str:
    """A folder to put on PYTHONPATH so that every module of the package comes from `tree`: rackplan/
    with tree/sim, executor, calibration and configs linked in as the install maps them. (With tree
    itself on PYTHONPATH only rackplan/ came from it: rackplan.sim and the other mapped subpackages
    were imported from the editable install, i.e. this checkout.)"""
    view = Path(folder) / "rackplan"
    view.mkdir()
    for entry in Path(tree, "rackplan").iterdir():
        (view / entry.name).symlink_to(entry.resolve())
    for name, src in MAPPED.items():
        (view / name).symlink_to(Path(tree, src).resolve())
    probe = subprocess.run([sys.executable, "-c", "import rackplan.sim.simulator as s, rackplan.policy as p; "
                            "print(s.__file__); print(p.__file__)"], env={**os.environ, "PYTHONPATH": folder},
                           capture_output=True, text=True, cwd=folder, check=True)
    if any(not Path(f).resolve().is_relative_to(Path(tree).resolve()) for f in probe.stdout.split()):
        raise SystemExit(f"--baseline {tree}: modules not imported from it: {probe.stdout.split()}")
    return folder


def run_rackplan(workers: int, args: list[str] | None = None, tree: str | None = None) -> dict:
    if args is None:
        args = ["--model", CASE["model"], "--hardware", CASE["hardware"], "--gpus", str(CASE["gpus"]),
                "--workload", CASE["workload"], "--ttft-p90", CASE["ttft"], "--tpot-p90", CASE["tpot"]]
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "rackplan.cli", "plan"] + args + ["--out", f"{d}/plan.yaml", "--workers",
                                                                       str(workers), "--json", "--quiet", "--timings"]
        env = {**os.environ, **({"RACKPLAN_CACHE_DIR": f"{d}/cache"} if COLD else {}),
               **({"PYTHONPATH": tree} if tree else {})}
        wall, cpu, proc = timed(cmd, env, cwd=d)  # (not the checkout: `-m` would import from the cwd first)
    if proc.returncode != 0:
        raise SystemExit(f"rackplan failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout)
    return {"wall_s": wall, "cpu_s": cpu, "rss_mb": proc.max_rss_mb, "layout": out["summary"], "gpus": out["gpus"],
            "tps_gpu": out["predicted"]["output_tps_per_gpu"], "tps_user": out["predicted"]["tps_per_user"],
            "timings": out["timings"], "cmd": " ".join(cmd[1:])}


SEED_CASES = (("seed scenario (72 x GB300, V4.1-Flash)", [], 3.0, None),  # CPU targets: issue 39
              ("GB300 NVL72, 144 GPUs", ["--gpus", "144"], None, None),
              ("GB300 NVL72, 576 GPUs", ["--gpus", "576"], None, 300.0),
              ("latency objective, single user", ["--workload", "single-user", "--objective", "latency",
                                                  "--tpot-p90", "20ms"], 15.0, None))
SCALE_CASE = ("GB300 NVL72, 10,000 GPUs", ["--gpus", "10000"], 30.0, None)


def seed_cases(workers: int, scale: bool = False, others: bool = True) -> list[str]:
    lines = ["| planner case (`rackplan plan ... --workers 1`) | CPU s | target | peak RSS MB | target | "
             "chosen | stages (wall s) |", "|---|---:|---:|---:|---:|---|---|"]
    for name, args, cpu_max, rss_max in (SEED_CASES if others else ()) + ((SCALE_CASE,) if scale else ()):
        for tree in ([BASELINE] if BASELINE else []) + [None]:
            r = run_rackplan(workers, args, tree)
            stages = ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in r["timings"].items())
            chosen = r["layout"].replace("|", "&#124;")  # a bare | would split the markdown cell
            label = f"{name} `{' '.join(args) or '(no arguments)'}`" + (
                f" ({'baseline' if tree else 'this tree'})" if BASELINE else "")
            lines.append(f"| {label} | {r['cpu_s']:.2f} | "
                         f"{f'<= {cpu_max:g}' if cpu_max else '-'} | {r['rss_mb']:.0f} | "
                         f"{f'< {rss_max:g}' if rss_max else '-'} | {chosen} on {r['gpus']} GPUs, "
                         f"{r['tps_gpu']:,.2f} tok/s/GPU | {stages} |")
    return lines


def find_aiconfigurator() -> str | None:
    path = os.environ.get("AICONFIGURATOR") or "/work/aicvenv/bin/aiconfigurator"
    return path if Path(path).exists() else None


def run_aiconfigurator(path: str) -> dict:
    wall, cpu, proc = timed([path] + AIC_ARGS)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {text[-500:]}", "wall_s": wall, "cpu_s": cpu}
    best = re.search(r"Best Experiment Chosen: (\w+) at ([\d.,]+) tokens/s/gpu", text)
    user = re.search(r"Per-User Throughput: ([\d.,]+)", text)
    kind = best.group(1) if best else "?"
    row = re.search(rf"{kind} Top Configurations.*?\n\|\s+1\s+\|(.*?)\n", text, re.S)
    return {"wall_s": wall, "cpu_s": cpu, "kind": kind,
            "tps_gpu": float(best.group(2).replace(",", "")) if best else float("nan"),
            "tps_user": float(user.group(1).replace(",", "")) if user else float("nan"),
            "row": " ".join(row.group(1).split()) if row else "", "cmd": "aiconfigurator " + " ".join(AIC_ARGS)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed-cases", action="store_true", help="also time the seed scenario, 144 / 576 GPUs and the "
                    "latency objective")
    ap.add_argument("--scale", action="store_true", help="also 10,000 GPUs (without --seed-cases: the H200 case "
                    "and 10,000 GPUs only)")
    ap.add_argument("--cold", action="store_true", help="each rackplan run with an empty cache folder")
    ap.add_argument("--baseline", metavar="TREE", help="a source tree of the package (e.g. `git archive` of "
                    "another commit) whose runs precede this tree's, case by case, on PYTHONPATH")
    args = ap.parse_args()
    global COLD, BASELINE
    COLD = args.cold
    BASELINE = args.baseline and package_view(args.baseline, tempfile.mkdtemp(prefix="search_speed_base"))
    lines = []
    if BASELINE:
        base = run_rackplan(args.workers, tree=BASELINE)
        lines.append(f"baseline ({args.baseline}): CPU {base['cpu_s']:.2f} s, wall {base['wall_s']:.2f} s, chosen "
                     f"{base['layout']} on {base['gpus']} GPUs, {base['tps_gpu']:.2f} tokens/s/GPU; ratio to the "
                     f"recorded aiconfigurator {base['cpu_s'] / AIC_RECORDED_CPU_S:.3f}")
    ours = run_rackplan(args.workers)
    lines += [f"rackplan: `{ours['cmd']}`",
             f"- wall {ours['wall_s']:.2f} s, CPU {ours['cpu_s']:.2f} s, peak RSS {ours['rss_mb']:.0f} MB (stages: "
             + ", ".join(f"{k} {v:.2f}" for k, v in ours["timings"].items()) + ")",
             f"- chosen: {ours['layout']} on {ours['gpus']} GPUs, {ours['tps_gpu']:.0f} tokens/s/GPU, "
             f"{ours['tps_user']:.1f} tokens/s/user (simulator-verified rate)"]
    aic_path = find_aiconfigurator()
    if aic_path is None:
        lines.append(f"aiconfigurator: not installed (set AICONFIGURATOR=path); against its recorded "
                     f"{AIC_RECORDED_CPU_S} CPU s (issue 39): ratio {ours['cpu_s'] / AIC_RECORDED_CPU_S:.3f} "
                     f"(target <= {RATIO_MAX})")
    else:
        aic = run_aiconfigurator(aic_path)
        if "error" in aic:
            lines.append(f"aiconfigurator: failed after {aic['cpu_s']:.1f} s CPU: {aic['error']}")
        else:
            lines += [f"aiconfigurator 0.12.0: `{aic['cmd']}`",
                      f"- wall {aic['wall_s']:.2f} s, CPU {aic['cpu_s']:.2f} s",
                      f"- chosen ({aic['kind']}): {aic['row']}",
                      f"- {aic['tps_gpu']:.0f} tokens/s/GPU, {aic['tps_user']:.1f} tokens/s/user",
                      f"CPU ratio rackplan / aiconfigurator: {ours['cpu_s'] / aic['cpu_s']:.3f} "
                      f"(target <= {RATIO_MAX})"]
    if args.seed_cases or args.scale:
        lines += [""] + seed_cases(args.workers, args.scale, args.seed_cases)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
