"""Host-loop sweep on the CPU executor -> `rackplan calibrate --host-sweep` -> per-part error.

Serving runs of tiny-moe-mtp on cpu-local (one DEP1 prefill instance, a DEPd decode instance with
0, 1 or 2 draft tokens), each a closed loop of C requests in flight (16-token prompts, 32-token
outputs), so that decode steps sit at C / d sequences per rank for most of the run and pass through
every smaller size while it fills and drains. The prefill part (BURST) runs the prefill loop on
bursts of 1-32 prompts (a JSONL trace per repeat), each released when the loop has started every
earlier prompt (`execute --paced`): back to back at 1-32 prompt chunks a step, with prompts of varied
length that the token budget chunks. Every step records its host parts (host.schedule, host.prepare,
host.dp_sync, host.sample, host.output: executor/disagg.py). The fit holds out the
step sizes --holdout (sequences on the busiest rank) and prints each part's MAPE on the fit and
held-out shapes, plus the run-to-run spread of the same shape (the machine is shared: medians of
per-run medians), the DP wait it does not fit (host.dp_sync's wall time less its CPU time) and the
warm-up profile that WARMUP_STEPS (calibration/host_fit.py) is read from, and how much slower the
steps after an idle wait are (left out of the fit: host_fit.steady). Each loop's block is fitted from its own
part's runs (decode: the grid; prefill: the bursts), as measured, with the fit in probe-normalised time
(`calibrate --host-probe`, host_fit.probe_fit: each run scaled by the executor's CPU-speed probe against the VM's
run-to-run drift) printed beside it.

    python benchmarks/host_sweep.py --out runs/host_sweep            # 244 runs: ~18 min idle, ~60 busy
    python benchmarks/host_sweep.py --out runs/host_sweep --part prefill  # the 4 burst runs: ~1.5 min idle
    python benchmarks/host_sweep.py --out runs/host_sweep --fit-only # refit the runs already there
    python benchmarks/host_sweep.py --out runs/host_sweep --fit-only --part decode   # decode gate: grid only
    python benchmarks/host_sweep.py --out runs/b --fit-only --with runs/a  # both sweeps' runs together
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from rackplan.calibration.host_fit import (
    DP_WAIT,
    MIN_STEPS,
    PART_PARAMS,
    WARMUP_STEPS,
    HostStep,
    host_steps,
    medians,
    steady,
)
from rackplan.calibration.io import read_measurements
from rackplan.specs import load_profile

DPS = (1, 2)
DEPTHS = (0, 1, 2)
CONCURRENCY = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
HOLDOUT = (3, 6, 12, 24)  # sequences on the busiest rank held out of the fit (prefill loop: prompt chunks)
ACCEPTANCE = {1: 1.8, 2: 2.4}  # acceptance length per depth (drawn, executor/speculate.py)
# Prefill part: bursts of 1-32 prompts, each arriving the moment the prefill loop has started every earlier
# prompt (`execute --paced`): the loop runs back to back from its first step to its last (a step after an idle
# wait runs colder and is left out) at many chunk counts, and the same steps on a fast or a slow host (wall-clock
# arrivals saturate a loaded host: every step at the full budget). Prompts of 2-8 tokens, a few of 100-300 that
# the token budget chunks over two steps, where the next burst joins them: chunks, tokens and finished prompts
# are distinct features.
BURST = {"budget": 256, "max_seqs": 32, "bursts": 300, "gap_s": 0.02, "burst_sizes": (1, 32), "short": (2, 8),
         "long": (100, 300), "long_share": 0.05, "osl": 1}


def plan_yaml(dp: int, depth: int, workload: Path, prefill: dict | None = None) -> dict:
    spec = {"num_tokens": depth, "acceptance_length": ACCEPTANCE[depth]} if depth else None
    host = {"cuda_graphs": False, "async_scheduling": False}
    pre = prefill or {"max_tokens_per_step": 256, "max_batch_per_rank": 32}
    return {"name": f"host-dp{dp}-d{depth}", "model": "tiny-moe-mtp", "hardware": "cpu-local", "num_gpus": 1 + dp,
            "workload": str(workload), "profile": "cpu-local",
            "prefill": [{"role": "prefill", "dp": 1, **pre, **host}],
            "decode": [{"role": "decode", "dp": dp, "max_batch_per_rank": 32, "max_tokens_per_step": 128,
                        "speculation": spec, **host}],
            "slo": {"ttft_p90_s": 5.0, "tpot_p90_s": 1.0}}


def workload_yaml(c: int) -> dict:
    return {"name": f"closed-c{c}", "arrival": {"kind": "concurrency", "concurrency": c},
            "isl": {"kind": "fixed", "value": 16}, "osl": {"kind": "fixed", "value": 32},
            "num_requests": max(4 * c, 16), "seed": 0}


def burst_trace(seed: int, b: dict = BURST) -> list[dict]:
    """The prefill part's requests (JSONL trace rows: timestamp s, input_length, output_length): `bursts`
    bursts of burst_sizes prompts (uniform, inclusive), one arrival instant each, gap_s apart (paced, the
    instants only group the requests)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(b["burst_sizes"][0], b["burst_sizes"][1] + 1, b["bursts"])
    times = np.repeat(np.arange(b["bursts"]) * b["gap_s"], sizes)
    lo, hi = np.array([b["short"], b["long"]])[(rng.random(len(times)) < b["long_share"]).astype(int)].T
    isl = rng.integers(lo, hi + 1)
    return [{"timestamp": round(float(t), 6), "input_length": int(n), "output_length": b["osl"]}
            for t, n in zip(times, isl, strict=True)]


def burst_workload(trace: Path, n: int) -> dict:
    return {"name": "prefill-bursts", "arrival": {"kind": "trace"}, "isl": {"kind": "trace"},
            "osl": {"kind": "trace"}, "trace": str(trace.resolve()), "trace_format": "jsonl", "num_requests": n,
            "seed": 0}


def _execute(plan: Path, wl: Path, folder: Path, seed: int, paced: bool = False) -> None:
    subprocess.run([sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(plan), "--device", "cpu",
                    "--workload", str(wl), "--out", str(folder), "--seed", str(seed), "--timeout", "300"]
                   + ["--paced"] * paced, check=True, stdout=subprocess.DEVNULL)


def run_all(out: Path, repeats: int, parts: tuple[str, ...] = ("decode", "prefill")) -> list[Path]:
    """Runs the sweep's parts (decode: the closed-loop grid; prefill: the burst runs); a run whose
    measurements are there already is not rerun."""
    specs, runs = out / "specs", []
    specs.mkdir(parents=True, exist_ok=True)
    todo = [("decode", dp, d, c, r) for r in range(repeats) for dp in DPS for d in DEPTHS for c in CONCURRENCY
            if "decode" in parts]
    todo += [("prefill", 1, 0, 0, r) for r in range(repeats) if "prefill" in parts]
    for i, (part, dp, depth, c, rep) in enumerate(todo):
        folder = out / "runs" / (f"dp{dp}-d{depth}-c{c}-r{rep}" if part == "decode" else f"prefill-bursts-r{rep}")
        runs.append(folder)
        if (folder / "measurements.jsonl").is_file():
            continue
        if part == "decode":
            wl = specs / f"closed-c{c}.yaml"
            wl.write_text(yaml.safe_dump(workload_yaml(c)))
            plan = specs / f"host-dp{dp}-d{depth}.yaml"
            plan.write_text(yaml.safe_dump(plan_yaml(dp, depth, wl)))
            print(f"[{i + 1}/{len(todo)}] dp {dp} depth {depth} concurrency {c} repeat {rep}", flush=True)
        else:
            rows = burst_trace(rep)
            trace, wl = specs / f"bursts-r{rep}.jsonl", specs / f"bursts-r{rep}.yaml"
            trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
            wl.write_text(yaml.safe_dump(burst_workload(trace, len(rows))))
            plan = specs / f"host-bursts-r{rep}.yaml"
            pre = {"max_tokens_per_step": BURST["budget"], "max_batch_per_rank": BURST["max_seqs"]}
            plan.write_text(yaml.safe_dump(plan_yaml(1, 0, wl, pre)))
            print(f"[{i + 1}/{len(todo)}] prefill bursts repeat {rep} ({len(rows)} requests)", flush=True)
        _execute(plan, wl, folder, rep, paced=part == "prefill")
    return runs


def _part_of(run: Path) -> str:
    return "prefill" if run.name.startswith("prefill-bursts") else "decode"


def read_steps(runs: list[Path], wall: bool = False) -> list[list]:
    """Each run's HostSteps (every step, warm-up included): each part's thread CPU time, as the fit
    reads it, or (`wall`) its wall time."""
    def rec(r, i):
        return {k: v for k, v in r.items() if k != "cpu_s"} | {"_run": i} if wall else dict(r, _run=i)
    return [host_steps([rec(r, i) for r in read_measurements(folder)]) for i, folder in enumerate(runs)]


def warmup_profile(per_run: list[list], last: int = 12) -> dict[str, list[float]]:
    """Per role/part: for step index k < `last`, the median over runs and shapes of a step's part
    time over the median of the same run's steps of that shape from index `last` on (what
    WARMUP_STEPS is read from)."""
    ratios: dict[str, dict[int, list[float]]] = {}
    for steps in per_run:
        ref: dict[tuple, list[HostStep]] = {}
        for s in steps:
            if s.index >= last:
                ref.setdefault(s.key, []).append(s)
        for s in steps:
            if s.index < last and s.key in ref:
                for part, v in s.parts.items():
                    base = np.median([r.parts[part] for r in ref[s.key] if part in r.parts] or [0.0])
                    if part in PART_PARAMS and base > 0:
                        ratios.setdefault(f"{s.role}/{part}", {}).setdefault(s.index, []).append(v / base)
    return {k: [float(np.median(by[i])) if i in by else float("nan") for i in range(last)]
            for k, by in sorted(ratios.items())}


def idle_ratio(per_run: list[list]) -> dict[str, tuple[float, int]]:
    """Per role/part: the median over (run, shape) of the median part time of the steps after an idle
    wait over that of the busy steps (after the warm-up both), and how many (run, shape) pairs had
    both: what the fit's idle rule (calibration/host_fit.py, steady) is read from."""
    ratios: dict[str, list[float]] = {}
    for steps in per_run:
        groups: dict[tuple, tuple[list, list]] = {}
        for s in steady(steps, busy=False):
            groups.setdefault(s.key, ([], []))[s.idle_s > 0].append(s)
        for key, (busy, idle) in groups.items():
            if len(busy) < 2 or not idle:
                continue
            for part in PART_PARAMS:
                b = [x.parts[part] for x in busy if part in x.parts]
                i = [x.parts[part] for x in idle if part in x.parts]
                if b and i and np.median(b) > 0:
                    ratios.setdefault(f"{key[0]}/{part}", []).append(float(np.median(i) / np.median(b)))
    return {k: (float(np.median(v)), len(v)) for k, v in sorted(ratios.items())}


def run_levels(per_run: list[list], role: str = "decode") -> tuple[dict[str, float], float]:
    """How much of the spread is a whole run running faster or slower: per `role` part, the standard
    deviation (%) over runs of a run's level (median over its steady steps of the step's part time
    over the median of every run's steps of that shape), and the mean correlation of the runs'
    levels between parts."""
    pooled: dict[tuple, list[float]] = {}
    for steps in per_run:
        for s in steady(steps):
            for part, v in s.parts.items():
                pooled.setdefault((part, s.key), []).append(v)
    ref = {k: float(np.median(v)) for k, v in pooled.items()}
    parts = [p for p in PART_PARAMS]
    levels = np.full((len(per_run), len(parts)), np.nan)
    for i, steps in enumerate(per_run):
        for j, part in enumerate(parts):
            r = [s.parts[part] / ref[(part, s.key)] for s in steady(steps) if s.role == role
                 and ref.get((part, s.key), 0) > 0 and part in s.parts]
            if r:
                levels[i, j] = np.median(r)
    logs = np.log(levels)
    sd = {p: round(100 * float(np.nanstd(logs[:, j])), 1) for j, p in enumerate(parts)}
    pairs = [np.corrcoef(logs[ok, a], logs[ok, b])[0, 1] for a in range(len(parts)) for b in range(a)
             for ok in [~np.isnan(logs[:, a]) & ~np.isnan(logs[:, b])] if ok.sum() > 2]
    return sd, float(np.mean(pairs)) if pairs else float("nan")


def spread(per_run: list[list]) -> tuple[dict[str, float], list[float]]:
    """Per part: median over shapes of the relative spread (max - min) / median of the per-run
    medians (steps after the warm-up); and the decode DP wait of each shape (median over runs of
    the per-run medians)."""
    per: dict[str, list[float]] = {}
    shapes: dict[tuple, dict[int, list]] = {}
    for i, steps in enumerate(per_run):
        for s in medians(steady(steps)):
            if s.steps >= MIN_STEPS:  # a per-run median of one or two steps is no run's level
                shapes.setdefault(s.key, {})[i] = s
    waits = [float(np.median([s.parts[DP_WAIT] for s in by_run.values()])) for key, by_run in shapes.items()
             if key[0] == "decode" and all(DP_WAIT in s.parts for s in by_run.values())]
    for key, by_run in shapes.items():
        if len(by_run) < 2:
            continue
        for part in next(iter(by_run.values())).parts:
            vals = [s.parts[part] for s in by_run.values() if part in s.parts]
            name = part if key[0] == "decode" else f"{key[0]}/{part}"  # as calibrate names the parts
            if len(vals) >= 2 and np.median(vals) > 0:
                per.setdefault(name, []).append((max(vals) - min(vals)) / float(np.median(vals)))
    return {k: round(100 * float(np.median(v)), 1) for k, v in per.items()}, waits


def calibrate(runs: list[Path], prof_path: Path, probe: bool = False) -> dict:
    """`rackplan calibrate --host-sweep` on `runs` (its JSON summary): each loop's block from its own part's runs
    (decode: the closed-loop grid; prefill: the burst runs, whose decode instance serves one-token requests, not
    the decode grid's regime); `probe`: in probe-normalised time (`--host-probe`), else as measured."""
    dec, pre = [r for r in runs if _part_of(r) == "decode"], [r for r in runs if _part_of(r) == "prefill"]
    cmd = [sys.executable, "-m", "rackplan.cli", "calibrate", "--host-sweep", "--base", "cpu-local",
           "--holdout", "decode:" + ",".join(map(str, HOLDOUT)), "--out", str(prof_path), "--json"]
    cmd += ["--host-probe"] * probe
    for folder in dec or pre:
        cmd += ["--measurements", str(folder)]
    for folder in pre if dec else []:
        cmd += ["--host-prefill-measurements", str(folder)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["profile"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/host_sweep")
    ap.add_argument("--repeats", type=int, default=4,
                    help="runs per plan and concurrency: a whole run is 7-15%% faster or slower than another "
                         "(run level), so a shape's target needs several (2 repeats: 120 runs, ~8 min idle)")
    ap.add_argument("--fit-only", action="store_true", help="fit the runs under --out without running more")
    ap.add_argument("--with", dest="also", action="append", default=[], metavar="DIR",
                    help="fit the runs of another sweep's --out DIR too (more repeats per shape)")
    ap.add_argument("--part", choices=("all", "decode", "prefill"), default="all",
                    help="decode: the closed-loop grid (its prefill instances run too); prefill: the burst runs "
                         "of the prefill loop only (~1.5 min idle at 4 repeats); all: both, fitted together. "
                         "With --fit-only, only that part's runs are fitted: the decode gate reads --part decode, "
                         "the prefill loop's --part prefill (the burst runs' decode instance serves one-token "
                         "requests, not the decode grid)")
    args = ap.parse_args()
    out, parts = Path(args.out), ("decode", "prefill") if args.part == "all" else (args.part,)
    runs = [r for r in sorted((out / "runs").glob("*/")) if _part_of(r) in parts] if args.fit_only \
        else run_all(out, args.repeats, parts)
    runs += [r for d in args.also for r in sorted((Path(d) / "runs").glob("*/")) if _part_of(r) in parts]
    prof_path, probe_path = out / "host-cpu-local.yaml", out / "host-cpu-local-probe.yaml"
    res = calibrate(runs, prof_path)
    probed = calibrate(runs, probe_path, probe=True)
    prov = load_profile(prof_path).provenance["host_fit"]
    per_run = read_steps(runs)
    noise, waits = spread(per_run)
    wall_noise, _ = spread(read_steps(runs, wall=True))
    print(f"warm-up: a step's part time / the same run and shape from step 12 on, by step index (the fit "
          f"leaves out steps 0-{WARMUP_STEPS - 1})")
    for name, ratios in warmup_profile(per_run).items():
        print(f"  {name:22s} " + " ".join(f"{r:4.2f}" for r in ratios))
    idle = idle_ratio(per_run)
    print("after an idle wait (left out of the fit): part time / busy steps of the same run and shape: "
          + (", ".join(f"{k} {r:.2f} ({n})" for k, (r, n) in idle.items()) or "no such steps"))
    print(f"{len(runs)} runs, {prov['steps']} steps; held-out sizes {prov['held_out_sizes']}")
    ref = probed.get("probe_ref_s")
    print("CPU-speed probe column: " + (f"parts scaled to the runs' median probe {ref * 1e3:.3f} ms (--host-probe)"
                                        if ref else "not in every run: parts as measured (alike)"))
    print(f"{'part':22s} {'fit MAPE %':>10s} {'held-out MAPE %':>16s} {'probe fit / held':>17s} "
          f"{'shapes fit/held':>16s} {'run spread % (CPU / wall)':>26s}")
    for part, err in res["host_fit_error_pct"].items():
        n_fit, n_held = prov["shapes_fit_held"][part]
        held = res["host_held_out_error_pct"].get(part, float("nan"))
        r_fit, r_held = (probed[k].get(part, float("nan")) for k in ("host_fit_error_pct", "host_held_out_error_pct"))
        cpu, wall = (f"{n.get(part, float('nan')):.1f}" for n in (noise, wall_noise))
        print(f"{part:22s} {err:10.1f} {held:16.1f} {f'{r_fit:.1f} / {r_held:.1f}':>17s} {f'{n_fit}/{n_held}':>16s} "
              f"{f'{cpu} / {wall}':>26s}")
    for role in ("decode", "prefill"):
        sd, corr = run_levels(per_run, role)
        print(f"{role} run level (a whole run faster or slower), sd over runs %: "
              + ", ".join(f"{k} {v}" for k, v in sd.items() if not np.isnan(v))
              + f"; mean correlation between parts {corr:.2f}")
    if waits:
        print(f"{DP_WAIT} (not fitted: the OS scheduling the ranks): median {np.median(waits) * 1e6:.0f} us over "
              f"{len(waits)} shapes ({np.percentile(waits, 10) * 1e6:.0f}-{np.percentile(waits, 90) * 1e6:.0f} us), "
              f"run spread {noise.get(DP_WAIT, float('nan')):.1f}%")
    print(f"profile: {prof_path}")
    print(json.dumps({k: v for k, v in vars(load_profile(prof_path).host).items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
