"""Is a plan_to_hardware serving run's decode excess drift (every step slower by a similar factor: the VM's
speed state), coincidence (steps running beside a prefill step, or admitting requests), or scheduling
(batches unlike the simulator's)?

For every decode step of OUT/serve-*pct (serve_excess.decode_steps: the decode leader's records) the ratio
of its measured forward ops to their price under OUT/cpu-local.yaml at the same batch, context, admitted and
finished requests (serve_excess's pricer), then its median:
  by fifth of the run     (time: a step's start on the decode rank's clock, the sum of the idle waits, steps
                          and loop periods before it)
  beside a prefill step   (the prefill leader's steps on its own clock, both clocks from the run's start
                          barrier) or not
  admitting requests      (admitted > 0: the step received KV) or not
and the CPU-speed probe of each rank at the start and end of the run (executor/probe.py: CPU ms of a fixed
workload; a probe's CPU time does not count time another process takes from the core, a slower VM moves it).

Usage: python benchmarks/investigations/serve_drift.py OUT [OUT ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_excess import _step, decode_steps, serving_runs  # noqa: E402

from rackplan.sim.cost.cores import core_share  # noqa: E402
from rackplan.sim.cost.step import CostContext  # noqa: E402
from rackplan.sim.pricer import StepPricer  # noqa: E402
from rackplan.specs import load_hardware, load_model, load_plan, load_profile  # noqa: E402
from rackplan.specs.ops import COMPUTE_OPS  # noqa: E402


def prefill_spans(path: Path) -> np.ndarray:
    """[n, 2] start / end seconds of the prefill leader's steps on its clock (idle, step, loop in turn)."""
    steps, loop, idle = {}, {}, {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("source") != "measured":
            continue
        if r["role"] == "serve" and r["op"] == "host" and "prefill_steps" in r["shape"]:
            loop[r["step"]] = r["seconds"]
        if r["role"] == "prefill" and r["rank"] == 0 and r["op"] == "step":
            steps[r["step"]], idle[r["step"]] = r["seconds"], r["shape"].get("idle_before_s", 0.0)
    t, out = 0.0, []
    for k in sorted(steps):
        t += idle[k]
        out.append((t, t + steps[k]))
        t += steps[k] + loop.get(k, 0.0)
    return np.array(out).reshape(-1, 2)


def probes(path: Path) -> dict[int, list[float]]:
    """rank -> CPU ms of its probes (start, end)."""
    out: dict[int, list[float]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["op"] == "host.probe":
            out.setdefault(r["rank"], []).append(round(1e3 * r["cpu_s"], 2))
    return out


def idle_before(path: Path) -> dict[int, float]:
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["role"] == "decode" and r["op"] == "step" and not r["shape"].get("recompute"):
            out[r["step"]] = r["shape"].get("idle_before_s", 0.0)
    return out


def step_ratios(plan_path: Path, profile: Path, path: Path) -> np.ndarray:
    """[steps] measured / priced forward ops of the decode leader's steps in the measurements file `path`."""
    return _ratios(_pricer(plan_path, profile), decode_steps(path))


def _pricer(plan_path: Path, profile: Path) -> StepPricer:
    plan = load_plan(plan_path)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    return StepPricer(CostContext(model, hw, plan.decode[0], load_profile(profile), core_share=core_share(hw, plan)))


def _ratios(pricer: StepPricer, steps: list[dict]) -> np.ndarray:
    out = []
    for s in steps:
        bd = pricer.price(_step(s["batch"], s["ctx"], s["admitted"], s["finished"], pricer)).breakdown()
        out.append(sum(s["ops"].values()) / sum(bd.get(o, 0.0) for o in COMPUTE_OPS))
    return np.array(out)


def table(out: Path, run: str) -> dict:
    path = out / run / "measurements.jsonl"
    steps, idle, spans = decode_steps(path), idle_before(path), prefill_spans(path)
    ratio = _ratios(_pricer(out / "plan.yaml", out / "cpu-local.yaml"), steps)
    t, start, beside, admit = 0.0, [], [], []
    for s in steps:
        t += idle.get(s["index"], 0.0)
        start.append(t)
        end = t + s["step_s"]
        beside.append(bool(((spans[:, 0] < end) & (spans[:, 1] > t)).any()) if len(spans) else False)
        admit.append(s["admitted"] > 0)
        t = end + s["loop_s"]
    q, st, bs, ad = ratio, np.array(start), np.array(beside), np.array(admit)
    fifths = [float(np.median(q[(st >= lo) & (st < hi)])) for lo, hi in
              zip(np.quantile(st, [0, .2, .4, .6, .8]), list(np.quantile(st, [.2, .4, .6, .8])) + [np.inf],
                  strict=True)]
    med = lambda m: float(np.median(q[m])) if m.any() else float("nan")  # noqa: E731
    return {"run": f"{out.name}/{run}", "steps": len(q), "median": float(np.median(q)), "fifths": fifths,
            "beside": (med(bs), int(bs.sum())), "alone": (med(~bs), int((~bs).sum())),
            "admit": (med(ad), int(ad.sum())), "no_admit": (med(~ad), int((~ad).sum())),
            "batch_p50": float(np.median([s["batch"] for s in steps])), "probes": probes(path)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outs", nargs="+", type=Path, help="plan_to_hardware.py --out folders")
    args = ap.parse_args(argv)
    print(f"{'run':<22} {'steps':>5} {'b p50':>5} {'median':>6}  {'by fifth of the run':<30} "
          f"{'beside prefill / alone (n)':<28} {'admitting / not (n)':<26} probe CPU ms rank: start, end")
    for out in args.outs:
        for run in serving_runs(out):
            r = table(out, run)
            f2 = lambda v: f"{v[0]:.2f} ({v[1]})"  # noqa: E731
            print(f"{r['run']:<22} {r['steps']:>5} {r['batch_p50']:>5.0f} {r['median']:>6.2f}  "
                  f"{' '.join(f'{x:.2f}' for x in r['fifths']):<30} {f2(r['beside']) + ' / ' + f2(r['alone']):<28} "
                  f"{f2(r['admit']) + ' / ' + f2(r['no_admit']):<26} "
                  + "; ".join(f"{k}: {v}" for k, v in sorted(r["probes"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
