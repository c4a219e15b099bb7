"""The planner's plan on this machine at its planned operating point: plan -> calibrate on a sweep that covers
the plan's step shapes -> serve exactly the planned plan at its verified rate (and at 50% / 80% of it) long
enough to reach steady state -> compare with the simulator over each side's steady-state window.

  1. `rackplan plan` for tiny-moe on cpu-local with the shipped profile (OUT/plan-shipped.yaml; the planner
     keeps to the ranks this machine runs at once: cpu-local's cores / threads_per_rank): its shapes set the sweep;
  2. a sweep of that plan's layouts up to its decode batch cap and prefill token budget (powers of two; the
     prefill sweep stops at the tokens its steps fill, max_batch_per_rank x the mean prompt; --max-batch /
     --max-tokens cap them to what the machine can measure), every other interior size held out, four rounds
     (each point once a round, the order shuffled per round with a seed; the fit takes each shape's median over
     its runs), each point beside a neighbour running the other phase's steps on the other core as the plan
     serves (calibration/corun.py; --alone: the other core idle); a serving run of the plan's workload (8 s at
     30 req/s) for the engine loop's host time (fixed and per request admitted / finished) and the step-time
     spread; `rackplan calibrate` with those hold-outs (it refuses a fit without any:
     OUT/cpu-local-heldout.yaml, scored by step 5), then on every shape measured (OUT/cpu-local.yaml: the profile
     the plan is priced with, step 3 on);
  3. `rackplan plan` again with the profile just fitted (OUT/plan.yaml): the plan served is the one this
     machine's measurements verify, at the rate they verify (shapes it runs beyond the sweep are swept first);
  4. for each rate (that plan's verified request rate x 1.0, 0.8, 0.5), --segments segments (default 3): a
     copy of the plan's workload at that Poisson rate with --seconds of arrivals (at least 200 requests; segment
     k draws with the workload's seed + k), served by `rackplan execute`, and the simulator (sim/simulator.Run)
     run on exactly those requests with the fitted profile at the segment's measured CPU speed (the rig's
     speed state: its ranks' in-place probes over the profile's reference probe, calibration/speed.py, as
     HardwareSpec.cpu_speed; the sweep's runs were put at that reference by calibrate) and, beside it, at the
     reference speed (unscaled); the segments in rounds, every rate once a round in
     a rotated seeded order (`serve_order`: the VM's slow spells land on every rate alike); each segment
     measured over its steady-state window on both sides (sim/steady.py's measure, applied to the executed
     requests' timestamps as the simulator applies it to its own), a rate's windows pooled (`pooled`); per
     rate the executed decode steps' forward ops against their price (a diagnostic); `uptime` beside each
     segment (the cores are shared);
  5. `rackplan validate` of the sweep against the held-out fit: held-out step MAPE.

Gates (the issue's): at the verified rate the executed plan meets its SLOs (TTFT p90, TPOT p90) and serves
within 10% of the simulator's output tok/s; at 50% and 80% TTFT and TPOT p50 / p90 within 20% of the
simulator's (each segment priced at its own measured speed; the unscaled figure printed beside); held-out step
MAPE <= 10% (validate puts each sweep run at the profile's reference speed).

Usage: python benchmarks/plan_to_hardware.py [--out runs/plan-to-hw] [--gpus 4] [--quick] [--segments 3] [--seconds 8]
Prints a side-by-side table and one JSON line (OUT/report.json); exit 0 when every gate passes, else 1.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibration_loop  # noqa: E402 - the sibling script

sys.path.insert(0, str(Path(__file__).resolve().parent / "investigations"))
from serve_drift import step_ratios  # noqa: E402 - the decode steps' measured / priced ops

from rackplan.calibration.corun import Neighbour, free_core, neighbour_shapes, other_phase  # noqa: E402
from rackplan.calibration.io import read_measurements  # noqa: E402
from rackplan.calibration.speed import profile_reference, speed_factor  # noqa: E402
from rackplan.sim.simulator import Run  # noqa: E402
from rackplan.sim.steady import measure  # noqa: E402
from rackplan.sim.workload import make_requests  # noqa: E402
from rackplan.specs import load_hardware, load_model, load_plan, load_profile, load_workload, resolve_path  # noqa: E402
from rackplan.specs.scenario import Scenario  # noqa: E402

RACKPLAN = [sys.executable, "-m", "rackplan.cli"]
RATES = (1.0, 0.8, 0.5)
GATE_TPS, GATE_LAT, GATE_STEP = 10.0, 20.0, 10.0  # % (the "what it must show")
SWEEP_ROUNDS, SWEEP_SEED = 4, 0  # rounds of the sweep (each point once a round, the order shuffled per round)
SEGMENTS, SERVE_SEED = 3, 1  # serving segments per rate (every rate once a round, the order shuffled per round)
LOOP_SECONDS, LOOP_RATE = 8.0, 30.0  # the engine-loop run: the plan's workload, 8 s of Poisson arrivals at 30 req/s
# (240 requests: hundreds of decode steps, most admitting or finishing a request, below the 70-130 req/s the
# plans verified at on this machine in session 16)


def powers(lo: int, hi: int) -> tuple[int, ...]:
    """lo, 2 lo, 4 lo, ... below hi, then hi itself."""
    out, v = [], lo
    while v < hi:
        out.append(v)
        v *= 2
    return tuple(out + [hi])


def holdouts(dec: tuple[int, ...], pre: tuple[int, ...]) -> tuple[str, ...]:
    """calibrate --holdout values: every other interior size of each sweep."""
    held_d, held_p = dec[1:-1:2], pre[1:-1:2]
    return tuple(([f"decode:{','.join(map(str, held_d))}"] if held_d else []) +
                 ([f"prefill:{','.join(map(str, held_p))}"] if held_p else []))


def caps(plan) -> tuple[int, int]:
    """(decode batch cap per rank, prefill token budget per rank) of a plan."""
    dec = plan.decode[0].max_batch_per_rank if plan.decode else plan.aggregated[0].max_batch_per_rank
    pre = plan.prefill[0].max_tokens_per_step if plan.prefill else plan.aggregated[0].max_tokens_per_step
    return dec, pre


def fillable(plan) -> int:
    """The largest power of two of prefill tokens a step of the plan fills: at most max_batch_per_rank prompts
    run in a step, so a budget beyond max_batch x the workload's mean prompt is never filled (tiny-chat's 56-token
    prompts, 64 a step: ~3,584 tokens of an 8,192 budget). A sweep point past it measures steps of ragged sizes
    (each its own sample, outweighing the points that fill their budget in the fit) at a budget the plan never
    reaches."""
    lay = plan.prefill[0] if plan.prefill else plan.aggregated[0]
    fill = int(lay.max_batch_per_rank * load_workload(plan.workload).isl.expected)
    return max(32, 1 << (fill.bit_length() - 1))


def sweep_cfg(plan, quick: bool, max_batch: int | None, max_tokens: int | None, corun: bool = True) -> dict:
    """The calibration sweep over the plan's shapes: decode batches 1 .. its batch cap, prefill budgets 32 ..
    its token budget (capped by --max-batch / --max-tokens, and at what its steps fill: `fillable`), every other
    interior size held out; SWEEP_ROUNDS rounds (`sweep_order`), each point beside a co-running neighbour
    (`corun`, `run_sweep`)."""
    dec_cap, pre_cap = caps(plan)
    dec = powers(1, min(dec_cap, max_batch or dec_cap))
    pre = powers(32, min(pre_cap, max_tokens or pre_cap, fillable(plan)))
    if quick:
        dec, pre = dec[::2] + ((dec[-1],) if len(dec) % 2 == 0 else ()), pre[::2] + ((pre[-1],) if len(pre) % 2 == 0
                                                                                      else ())
    return {"decode": dec, "prefill": pre, "holdout": holdouts(dec, pre), "steps": 6 if quick else 10,
            "repeats": 1 if quick else SWEEP_ROUNDS, "quiet_s": 0.0 if quick else 3.0, "corun": corun,
            "limit": (max_batch, max_tokens),
            "covers": {"decode_batch": [dec[-1], dec_cap], "prefill_tokens": [pre[-1], pre_cap]}}


def uncovered(plan, cfg: dict) -> dict:
    """Sweep sizes the plan runs beyond `cfg`'s (powers of two up to its caps, within --max-batch /
    --max-tokens): {"decode": (...), "prefill": (...)}, empty when the sweep covers it."""
    (dec_cap, pre_cap), (lim_b, lim_t) = caps(plan), cfg["limit"]
    dec = [b for b in powers(1, min(dec_cap, lim_b or dec_cap)) if b > max(cfg["decode"])]
    pre = [t for t in powers(32, min(pre_cap, lim_t or pre_cap, fillable(plan))) if t > max(cfg["prefill"])]
    return {k: tuple(v) for k, v in (("decode", dec), ("prefill", pre)) if v}


def extend(cfg: dict, more: dict) -> dict:
    """`cfg` with the sizes of `more` added (hold-outs chosen again over the whole sweep)."""
    dec, pre = cfg["decode"] + more.get("decode", ()), cfg["prefill"] + more.get("prefill", ())
    covers = {"decode_batch": [dec[-1], cfg["covers"]["decode_batch"][1]],
              "prefill_tokens": [pre[-1], cfg["covers"]["prefill_tokens"][1]]}
    return {**cfg, "decode": dec, "prefill": pre, "holdout": holdouts(dec, pre), "covers": covers}


def uptime() -> str:
    """This machine's load averages (the shared cores: other work running beside the measurement)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def plan_with(profile: str, gpus: int, path: Path, mode: str) -> None:
    """`rackplan plan` for tiny-moe / tiny-chat on cpu-local priced with `profile` -> `path`."""
    calibration_loop.sh(RACKPLAN + ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", str(gpus),
                                    "--workload", "tiny-chat", "--ttft-p90", "1s", "--tpot-p90", "200ms",
                                    "--profile", profile, "--mode", mode, "--out", str(path), "--quiet"])


def sweep_order(points: list, rounds: int, seed: int = SWEEP_SEED) -> list[tuple[int, object]]:
    """(round, point) in measuring order: every point once a round, each round's order shuffled with `seed` +
    round, so a shape's runs fall at different times of the sweep and a slow spell of the VM (1.65x between
    one shape's runs on the idle machine, session 17) lands on different shapes in each round; the fit takes
    each shape's median over its runs (calibration/samples.py)."""
    out = []
    for rnd in range(rounds):
        order = list(points)
        random.Random(seed + rnd).shuffle(order)
        out += [(rnd, p) for p in order]
    return out


def run_sweep(plan_path: Path, cfg: dict, out: Path) -> list[Path]:
    """Execute every sweep point of `cfg` not measured yet (its folder holds no measurements), `repeats` rounds
    in `sweep_order`. With `cfg["corun"]` each point runs while a neighbour process runs the other phase's
    steps on the other core (calibration/corun.py: the plan serves both phases at once, each rank on its own
    core, and a decode step then takes 1.06-1.15x its time alone)."""
    runs, points = [], calibration_loop.sweep_plans(str(plan_path), cfg, out)
    nb = neighbour(plan_path) if cfg.get("corun") else None
    try:
        for rep, (label, path) in sweep_order(points, cfg["repeats"]):
            run = out / "sweep" / f"{label}-r{rep}"
            runs.append(run)
            if (run / "measurements.jsonl").exists():
                continue
            skip = ["--skip-prefill"] if label.startswith("decode") else ["--skip-decode"]
            if nb is not None:
                nb.idle()
            calibration_loop.wait_quiet(cfg["quiet_s"])
            if nb is not None:
                nb.run(other_phase(label))
            calibration_loop.sh(RACKPLAN + ["execute", "--force", "--plan", str(path), "--device", "cpu", "--out",
                                            str(run), "--steps", str(cfg["steps"]), "--seed", str(rep), *skip])
    finally:
        if nb is not None:
            print(f"sweep neighbour: {nb.steps['prefill']} prefill and {nb.steps['decode']} decode steps run beside "
                  "the sweep points", flush=True)
            nb.close()
    return sorted(runs)


def neighbour(plan_path: Path) -> Neighbour | None:
    """The co-running rank of the sweep: the plan's model on a core the sweep's lone rank does not use, its
    steps at the plan's workload's mean prompt and its decode batch cap (calibration/corun.neighbour_shapes);
    None where the machine has no free core."""
    core = free_core()
    if core is None:
        return None
    plan = load_plan(plan_path)
    wl = load_workload(plan.workload)
    return Neighbour(plan.model, core, neighbour_shapes(wl.isl.expected, wl.osl.expected, caps(plan)[0]))


def fit(plan_path: Path, runs: list[Path], loop_run: Path, cfg: dict, prof: Path) -> Path:
    """`rackplan calibrate` on the sweep and the engine-loop run, twice: with the sweep's hold-outs left out
    (-> held_out_path(prof): what `validate` scores, the held-out step MAPE gate) and on every measured shape
    (-> `prof`: what the plan is re-planned and simulated with). Returns the held-out fit's path.

    Why two: the re-planned plan runs most of its steps at its batch cap, a power of two of the sweep, and
    every other interior size is held out; the fit without them prices the held-out sizes 10-27% low
    (session 16's idle runs: decode b8 -10 / -22 / -27%, b32 -27 / -21 / -3%), and the planner, maximising
    throughput on that price, picks its cap where the price is lowest: b32, held out, in two of the lead's
    three runs (benchmarks/investigations/serve_excess.py; RESULTS.md session 17, loop). Holding out measures
    the method's error; the profile a plan is priced with keeps every shape measured (its shapes are then
    in the fit, not interpolated across)."""
    meas = [x for r in runs for x in ("--measurements", str(r))]
    hold = [x for h in cfg["holdout"] for x in ("--holdout", h)]
    base = RACKPLAN + ["calibrate", "--plan", str(plan_path), *meas, "--measurements", str(loop_run), "--name",
                       "cpu-local"]
    held = held_out_path(prof)
    calibration_loop.sh(base + [*hold, "--out", str(held)])
    calibration_loop.sh(base + ["--no-holdout", "--out", str(prof)])
    return held


def held_out_path(prof: Path) -> Path:
    """Where `fit` writes the profile fitted without the sweep's hold-outs (beside `prof`)."""
    return prof.with_name(prof.stem + "-heldout" + prof.suffix)


def loop_workload(plan, out: Path) -> Path:
    """The plan's workload at LOOP_RATE for LOOP_SECONDS: the engine-loop run calibrate reads the decode loop's
    host time (its fixed part and per request admitted / finished: calibration/fit.py fit_loop_host) and, with
    >= 10 serving steps of a kind, the step-time spread (calibration/spread.py) from. The plan's own prompts:
    a request's admission receives its KV, so its price follows the prompt length (tiny-chunked's ~400-token
    prompts cost 1.3-1.8 ms an admission, tiny-chat's 56 tokens 0.5-0.9 ms: RESULTS.md session 17, loop)."""
    return workload_at(plan, LOOP_RATE, LOOP_SECONDS, out, least=0)


def workload_at(plan, rate: float, seconds: float, out: Path, least: int = 200, segment: int = 0) -> Path:
    """The plan's workload at a Poisson `rate` with `seconds` of arrivals (at least `least` requests); segment
    k > 0 of a rate draws its requests with the workload's seed + k (its own arrivals and lengths)."""
    d = yaml.safe_load(resolve_path("workloads", plan.workload).read_text())
    d["name"] = f"{d['name']}-at-{rate:.1f}rps" + (f"-s{segment}" if segment else "")
    if segment:
        d["seed"] = int(d.get("seed", 0)) + segment
    d["arrival"] = {"kind": "poisson", "rate": float(rate)}
    d["num_requests"] = int(max(least, round(rate * seconds)))
    path = out / f"{d['name']}.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def executed_requests(run: Path) -> dict:
    """Per-request timestamps (seconds from the run's start) and output lengths of a serving run."""
    recs = [json.loads(line) for line in (run / "measurements.jsonl").read_text().splitlines()]
    reqs = [r for r in recs if r["op"] == "request"]
    col = lambda k: np.array([r[k] for r in reqs], dtype=float)  # noqa: E731
    return {"arrival": col("arrival_s"), "prefill_done": col("prefill_done_s"), "first_token": col("first_token_s"),
            "finish": col("finish_s"), "osl": col("osl")}


def simulated_requests(plan_path: Path, workload: Path, profile: Path, speed: float = 1.0) -> dict:
    """The simulator's per-request timestamps for exactly the requests the executor serves from `workload`
    (sim.workload.make_requests with its seed: the same arrivals and lengths), every one run to the end, on the
    rig at CPU speed `speed` (HardwareSpec.cpu_speed: the segment's probe over the profile's reference)."""
    plan, wl = load_plan(plan_path), load_workload(workload)
    reqs = make_requests(wl)
    hw = dataclasses.replace(load_hardware(plan.hardware), cpu_speed=speed)
    run = Run(Scenario(plan, load_model(plan.model), hw, wl, load_profile(profile)), None, reqs)
    log = run.log  # (drain closes the run, dropping its log)
    run.drain()
    return {"arrival": log.arrival.copy(), "prefill_done": log.prefill_done.copy(),
            "first_token": log.first_token.copy(), "finish": log.finish.copy(), "osl": reqs.osl.astype(float)}


def window_part(req: dict, disaggregated: bool) -> dict:
    """One serving segment's steady-state part: sim/steady.py's window over its requests' timestamps (as the
    simulator measures its own), the TTFT and TPOT of the requests arriving in it, and the output tokens emitted
    in it (each request's first token at its first-token time, the rest spread evenly to its finish)."""
    arr, first, fin, osl = req["arrival"], req["first_token"], req["finish"], req["osl"]
    win, stab = measure(arr, req["prefill_done"], first, fin, disaggregated, False)
    inw = win.holds(arr)
    s, e = win.start_s, win.end_s
    first_in = ((first > s) & (first <= e)).astype(float)
    span = np.maximum(fin - first, 1e-12)
    overlap = np.clip(np.minimum(fin, e) - np.maximum(first, s), 0.0, None) / span
    tpot = np.where(osl > 1, (fin - first) / np.maximum(osl - 1, 1), np.nan)
    return {"window_s": [round(s, 3), round(e, 3)], "length_s": win.length_s, "stable": bool(stab.stable),
            "tokens": float((first_in + (osl - 1) * overlap).sum()), "ttft_s": (first - arr)[inw],
            "tpot_s": tpot[inw]}


def pooled(parts: list[dict], num_gpus: int) -> dict:
    """A rate's figures over its segments' windows pooled: output tokens over the windows' summed length,
    TTFT / TPOT percentiles over every window request of every segment; stable when every segment is."""
    ttft = np.concatenate([p["ttft_s"] for p in parts])
    tpot = np.concatenate([p["tpot_s"] for p in parts])
    tpot = tpot[np.isfinite(tpot)]
    pct = lambda a, q: float(np.percentile(a, q)) if len(a) else None  # noqa: E731
    return {"segments": len(parts), "window_s": [p["window_s"] for p in parts],
            "window_requests": int(len(ttft)), "stable": all(p["stable"] for p in parts),
            "output_tps_per_gpu": sum(p["tokens"] for p in parts) / sum(p["length_s"] for p in parts) / num_gpus,
            "ttft_p50_s": pct(ttft, 50), "ttft_p90_s": pct(ttft, 90),
            "tpot_p50_s": pct(tpot, 50), "tpot_p90_s": pct(tpot, 90)}


def serve_order(segments: int, seed: int = SERVE_SEED) -> list[tuple[int, float]]:
    """(segment, rate fraction) in serving order: round k serves every rate once, in a seeded shuffle of the
    rates rotated by k (a cyclic Latin square), so over len(RATES) rounds each rate takes every place of a
    round once and all rates have the same mean place in the whole order: a slow spell of the VM (a fixed
    probe's CPU time 1.5-1.9x between serving runs minutes apart: RESULTS.md session 19, loop) or a drift
    across the serving period lands on every rate alike, not on the one served then."""
    base = list(RATES)
    random.Random(seed).shuffle(base)
    n = len(base)
    return [(k, base[(k + i) % n]) for k in range(segments) for i in range(n)]


def step_speed(plan_path: Path, profile: Path, runs: list[Path], factors: list[float | None]) -> dict | None:
    """Median over the decode leader's steps of `runs` of their forward ops' measured / priced seconds
    (benchmarks/investigations/serve_drift.py) at the profile's reference speed ("ref") and at each segment's
    measured speed (each step's ratio / its segment's factor: "at_speed"; None where a segment has no probe): do
    the probes account for the steps' excess. A diagnostic. None for a plan without a decode pool."""
    if not load_plan(plan_path).decode:
        return None
    per = [step_ratios(plan_path, profile, r / "measurements.jsonl") for r in runs]
    ratios = np.concatenate(per) if per else np.zeros(0)
    if not len(ratios):
        return None
    scaled = None if any(f is None for f in factors) else np.concatenate([p / f for p, f in zip(per, factors)])
    return {"ref": float(np.median(ratios)), "at_speed": None if scaled is None else float(np.median(scaled))}


def segment_speed(run: Path, ref: float | None) -> float | None:
    """A served segment's CPU speed against the profile's reference probe `ref` (calibration/speed.py
    speed_factor: the median of its ranks' probes, start, end and in place, over `ref`); None without either."""
    return None if ref is None else speed_factor(read_measurements(run), ref)


def err(a, b) -> float:
    """Signed % of a over b (NaN where either is missing: an unstable run's latencies are none, and a NaN
    fails its gate)."""
    return float("nan") if a is None or b in (None, 0) else 100.0 * (a / b - 1.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/plan-to-hw")
    ap.add_argument("--gpus", type=int, default=4, help="GPU budget of the plan (CPU ranks; capped by the cores)")
    ap.add_argument("--profile", default="cpu-local", help="profile the planner prices with")
    ap.add_argument("--quick", action="store_true", help="every other sweep size, shorter serving runs")
    ap.add_argument("--seconds", type=float, default=None, help="seconds of arrivals per serving segment (default "
                    "8; quick 3)")
    ap.add_argument("--segments", type=int, default=None, help=f"serving segments per rate, interleaved across the "
                    f"rates (default {SEGMENTS}; quick 1)")
    ap.add_argument("--max-batch", type=int, help="cap the decode sweep below the plan's batch cap")
    ap.add_argument("--max-tokens", type=int, help="cap the prefill sweep below the plan's token budget")
    ap.add_argument("--alone", action="store_true", help="sweep each shape with the other core idle (default: "
                    "beside a neighbour running the other phase's steps, as the plan serves)")
    args = ap.parse_args(argv)
    if args.segments is not None and args.segments < 1:
        ap.error(f"--segments: expected a whole number >= 1, got {args.segments}")
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = uptime()
    print(f"load: {load_start}", flush=True)
    # 1. the plan priced with the shipped profile: it sets the shapes the sweep must cover
    first_path = out / "plan-shipped.yaml"
    plan_with(args.profile, args.gpus, first_path, "any")
    first = load_plan(first_path)
    cfg = sweep_cfg(first, args.quick, args.max_batch, args.max_tokens, corun=not args.alone)
    print(f"plan {first.description} (profile {args.profile}): verified {first.predicted['request_rate']:.1f} "
          f"req/s; sweep decode {cfg['decode']}, prefill {cfg['prefill']} (its steps fill at most {fillable(first)} "
          f"tokens of its {caps(first)[1]} budget), held out {cfg['holdout']}; {cfg['repeats']} rounds, "
          f"{'beside a co-running neighbour' if cfg['corun'] else 'one rank alone'}", flush=True)
    # 2. sweep its shapes on this machine, calibrate
    runs = run_sweep(first_path, cfg, out)
    loop_run = out / "serve-fit"
    calibration_loop.sh(RACKPLAN + ["execute", "--force", "--plan", str(first_path), "--device", "cpu", "--out",
                                    str(loop_run), "--workload", str(loop_workload(first, out))])
    prof = out / "cpu-local.yaml"
    fit(first_path, runs, loop_run, cfg, prof)
    # 3. re-plan with the profile this machine's measurements just gave (the same kind of deployment the sweep
    #    measured): the plan served is the one the fitted model verifies, at the rate it verifies
    plan_path = out / "plan.yaml"
    plan_with(str(prof), args.gpus, plan_path, "disagg" if first.disaggregated else "agg")
    plan = load_plan(plan_path)
    more = uncovered(plan, cfg)
    if more:  # the fitted plan runs shapes beyond the sweep: measure those too and fit again
        print(f"re-plan runs shapes beyond the sweep ({more}): sweeping them and fitting again", flush=True)
        cfg = extend(cfg, more)
        runs = run_sweep(first_path, cfg, out)
        fit(first_path, runs, loop_run, cfg, prof)
        plan_with(str(prof), args.gpus, plan_path, "disagg" if first.disaggregated else "agg")
        plan = load_plan(plan_path)
        if uncovered(plan, cfg):
            print(f"note: the re-fitted plan runs {uncovered(plan, cfg)}, beyond the sweep", flush=True)
    verified = plan.predicted["request_rate"]
    fitted = load_profile(prof)
    spread = {k: (fitted.step_time_spread[k], fitted.step_time_corr.get(k, 0.0)) for k in fitted.step_time_spread}
    print("fitted step-time spread (log sd, lag-1 corr): " + (", ".join(f"{k} {sd:.3f} / {c:.2f}" for k, (sd, c) in
                                                                       spread.items()) or "none"), flush=True)
    print(f"re-planned with the fitted profile: {plan.description}: verified {verified:.2f} req/s, "
          f"{plan.predicted['output_tps_per_gpu']:.0f} tok/s/GPU", flush=True)
    meas = [x for r in runs for x in ("--measurements", str(r))]
    val = subprocess.run(RACKPLAN + ["validate", "--plan", str(first_path), *meas, "--profile",
                                     str(held_out_path(prof)), "--json"],
                         capture_output=True, text=True)
    step_mape = json.loads(val.stdout[: val.stdout.rfind("}") + 1])["gated"].get("step", float("nan"))
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    segments = args.segments or (1 if args.quick else SEGMENTS)
    n_gpus = plan.num_gpus
    order = serve_order(segments)
    print(f"serving {segments} segment(s) of {seconds:g} s per rate, in the order "
          + " ".join(f"{int(f * 100)}%" for _, f in order), flush=True)
    ref = profile_reference(load_profile(prof))  # the CPU speed the fit is at (calibration/speed.py)
    print(f"the fitted profile's reference CPU-speed probe: "
          f"{'none (a run without probes)' if ref is None else f'{ref * 1e3:.2f} ms'}", flush=True)
    parts: dict[float, dict] = {f: {"executed": [], "simulated": [], "unscaled": [], "runs": [], "speed": [],
                                    "load": [], "errors": [], "requests": 0} for f in RATES}
    for seg, frac in order:
        wl = workload_at(plan, verified * frac, seconds, out, segment=seg)
        run = out / f"serve-{int(frac * 100)}pct" / f"s{seg}"
        calibration_loop.wait_quiet(cfg["quiet_s"])
        got = parts[frac]
        got["requests"] += load_workload(wl).num_requests
        speed = None  # the segment's CPU speed x the fit's reference (its probes), None where it has none
        try:
            calibration_loop.sh(RACKPLAN + ["execute", "--force", "--plan", str(plan_path), "--device", "cpu",
                                            "--out", str(run), "--workload", str(wl), "--timeout", "900"])
            got["executed"].append(window_part(executed_requests(run), plan.disaggregated))
            got["runs"].append(run)
            speed = segment_speed(run, ref)
            got["speed"].append(speed)
        except subprocess.CalledProcessError as exc:
            got["errors"].append(f"segment {seg}: execute exited {exc.returncode}")
        unscaled = window_part(simulated_requests(plan_path, wl, prof), plan.disaggregated)
        got["unscaled"].append(unscaled)  # at the fit's reference speed
        got["simulated"].append(unscaled if speed is None else  # at this segment's measured speed (gated)
                                window_part(simulated_requests(plan_path, wl, prof, speed), plan.disaggregated))
        got["load"].append(uptime())
        print(f"segment {seg} at {int(frac * 100)}%: CPU speed "
              f"{'n/a' if speed is None else f'{speed:.3f}'} x the fit's reference; {got['load'][-1]}", flush=True)
    rows = {}
    for frac in RATES:
        got = parts[frac]
        sims = {}
        for side in ("simulated", "unscaled"):
            sim = pooled(got[side], n_gpus)
            if not sim["stable"]:  # the simulator's unstable run: its latencies mean nothing (sim/steady.py)
                sim.update({k: None for k in ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s")})
            sims[side] = sim
        rows[frac] = {"load": got["load"], "rate_rps": verified * frac, "requests": got["requests"],
            "executed": {"error": "; ".join(got["errors"])} if got["errors"] else pooled(got["executed"], n_gpus),
            "simulated": sims["simulated"], "unscaled": sims["unscaled"], "speed": got["speed"],
            "step_speed": None if got["errors"] else step_speed(plan_path, prof, got["runs"], got["speed"])}
    slo = plan.slo
    gates = {"held_out_step_mape_pct": (step_mape, step_mape <= GATE_STEP)}
    beside: dict[str, float] = {}  # each gate's value against the simulator at the fit's reference speed
    print(f"\n{'rate':>12} {'side':>9} {'windows s':>10} {'tok/s/GPU':>10} {'TTFT p50':>9} {'TTFT p90':>9} "
          f"{'TPOT p50':>9} {'TPOT p90':>9}  (each rate: its segments' steady-state windows pooled; simulated: each "
          f"segment at its measured CPU speed, gated; unscaled: at the fit's reference speed)")
    for frac, r in rows.items():
        print(f"{'':>12} segments' CPU speed x the fit's reference: "
              + (" ".join("n/a" if f is None else f"{f:.3f}" for f in r["speed"]) or "none"))
        for side in ("executed", "simulated", "unscaled"):
            m = r[side]
            if "error" in m:
                print(f"{r['rate_rps']:8.1f} r/s {side:>9} {m['error']}")
                continue
            ms = lambda v: "    n/a  " if v is None else f"{v * 1e3:7.1f}ms"  # the simulator's unstable run: none
            span = sum(w[1] - w[0] for w in m["window_s"])
            print(f"{r['rate_rps']:8.1f} r/s {side:>9} {span:10.1f} {m['output_tps_per_gpu']:10.0f} "
                  + " ".join(ms(m[k]) for k in ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s"))
                  + ("" if m["stable"] else "  (unstable: its queue grows)"))
        if r["step_speed"] is not None:
            at = r["step_speed"]["at_speed"]
            print(f"{'':>12} executed decode steps' forward ops / their price under the fit: median "
                  f"{r['step_speed']['ref']:.2f} at the fit's speed, {'n/a' if at is None else f'{at:.2f}'} at each "
                  f"segment's measured speed (diagnostic)")
        ex, sm, un = r["executed"], r["simulated"], r["unscaled"]
        if "error" in ex:
            gates[f"{int(frac * 100)}%"] = (ex["error"], False)
            continue
        if frac == 1.0:
            tps = err(ex["output_tps_per_gpu"], sm["output_tps_per_gpu"])
            meets = ex["ttft_p90_s"] <= slo.ttft_p90_s and ex["tpot_p90_s"] <= slo.tpot_p90_s
            gates["100%: SLOs met"] = (meets, meets)
            gates["100%: output tok/s vs sim %"] = (tps, abs(tps) <= GATE_TPS)
            beside["100%: output tok/s vs sim %"] = err(ex["output_tps_per_gpu"], un["output_tps_per_gpu"])
        else:
            for k in ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s"):
                e = err(ex[k], sm[k])
                gates[f"{int(frac * 100)}%: {k[:-2]} vs sim %"] = (e, abs(e) <= GATE_LAT)
                beside[f"{int(frac * 100)}%: {k[:-2]} vs sim %"] = err(ex[k], un[k])
    load_end = uptime()
    print(f"\nplan {plan.description}, verified {verified:.2f} req/s; held-out step MAPE {step_mape:.1f}%; "
          f"step-time spread {spread or 'none'}\nload at start: {load_start}\nload at end:   {load_end}\n"
          "gates against the simulator at each segment's measured CPU speed (beside: at the fit's reference speed)")
    for name, (val_, ok) in gates.items():
        also = f"  (beside: {beside[name]:.1f})" if name in beside else ""
        print(f"  {'pass' if ok else 'FAIL'}  {name}: {val_:.1f}{also}" if isinstance(val_, float) else
              f"  {'pass' if ok else 'FAIL'}  {name}: {val_}")
    report = {"plan_shipped_profile": {"plan": first.description, "verified_rps": first.predicted["request_rate"]},
              "plan": plan.description, "verified_rps": verified, "load_start": load_start, "load_end": load_end,
              "step_time_spread": spread,
              "sweep": {k: cfg[k] for k in ("decode", "prefill", "holdout", "covers", "repeats", "corun")},
              "rates": {str(k): v for k, v in rows.items()},
              "speed_probe_ref_s": ref,
              "gates": {k: {"value": v, "pass": ok, **({"unscaled": beside[k]} if k in beside else {})}
                        for k, (v, ok) in gates.items()},
              "wall_s": round(time.time() - t0, 1)}
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({"gates_passed": sum(ok for _, ok in gates.values()), "gates": len(gates),
                      "held_out_step_mape_pct": round(step_mape, 2), "wall_s": report["wall_s"]}))
    return 0 if all(ok for _, ok in gates.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
