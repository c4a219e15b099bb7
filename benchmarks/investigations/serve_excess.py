"""Where a serving run's decode steps spend the time the fitted profile does not price.

For every executed decode step of a `benchmarks/plan_to_hardware.py` run (OUT/serve-*pct) the decode
leader's loop period (its `step` record + the `serve/host` record: the loop's time outside the step)
is split into parts and each part set beside the fitted profile's price of the same step (the
simulator's pricer, sim/pricer.StepPricer.decode, with the step's batch, context, admitted and
finished requests; no spread):

  ops        the forward's ops (attn.*, dense_ffn, router, moe.*, shared_expert, lm_head) measured vs priced
  in-step    the step record's wall time less its ops: host.prepare, host.sample and whatever else runs
             inside the timed step, vs the priced host.prepare + host.sample + host.launch
  loop       the serve/host record (schedule, broadcast, booking, the executor's own bookkeeping: timelines,
             KV receive headers, records) vs the priced host.schedule + host.dp_sync + host.output
  shape      the priced step at the run's contexts vs at the sweep's contexts of the same batch (what the
             serving steps' longer or shorter contexts move in the price)

and the ops of serving steps are compared with the sweep's steps of the same batch (the sweep ran one busy
rank at a time; serving runs the prefill rank beside): same shape, same machine minutes apart.

Usage: python benchmarks/investigations/serve_excess.py OUT [--runs serve-50pct serve-80pct ...]
Prints one table per run (sums over its decode steps, ms per step) and the 1-minute load average now.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from rackplan.sim.cost.step import CostContext
from rackplan.sim.pricer import StepPricer
from rackplan.specs import load_hardware, load_model, load_plan, load_profile
from rackplan.specs.ops import COMPUTE_OPS

LOOP_PARTS = ("host.schedule", "host.dp_sync", "host.output")
STEP_PARTS = ("host.prepare", "host.sample", "host.launch")


def decode_steps(path: Path) -> list[dict]:
    """Per decode step of the run (the decode leader's records): shape, step seconds, ops, host parts, loop."""
    steps: dict[int, dict] = defaultdict(lambda: {"ops": {}, "host": {}})
    loop: dict[int, float] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("source") != "measured":
            continue
        if r["role"] == "serve" and r["op"] == "host" and "decode_steps" in r["shape"]:
            loop[r["step"]] = r["seconds"]
        if r["role"] != "decode" or r["shape"].get("recompute"):
            continue
        s = steps[r["step"]]
        shp = r["shape"]
        s.update(batch=shp["batch"], ctx=shp["ctx_sum"], admitted=shp.get("admitted_global", 0),
                 finished=shp.get("finished_global", 0))
        if r["op"] == "step":
            s["step_s"] = r["seconds"]
        elif r["op"].startswith("host."):
            s["host"][r["op"]] = r["seconds"]
        elif r["op"] in COMPUTE_OPS:
            s["ops"][r["op"]] = r["seconds"]
    out = []
    for k in sorted(steps):
        s = steps[k]
        if "step_s" in s and k in loop and s["batch"] > 0:
            out.append(dict(s, loop_s=loop[k], index=k))
    return out


def sweep_ops(out: Path) -> dict[int, dict]:
    """Median per-op seconds and context per sequence of the sweep's decode steps, by batch."""
    by_b: dict[int, list[dict]] = defaultdict(list)
    for run in sorted((out / "sweep").glob("decode-b*")):
        m = run / "measurements.jsonl"
        if not m.exists():
            continue
        steps: dict[int, dict] = defaultdict(dict)
        for line in m.read_text().splitlines():
            r = json.loads(line)
            if r["role"] == "decode" and (r["op"] in COMPUTE_OPS or r["op"] == "step"):
                steps[r["step"]][r["op"]] = r["seconds"]
                steps[r["step"]]["_ctx"] = r["shape"]["ctx_sum"] / max(r["shape"]["batch"], 1)
                steps[r["step"]]["_b"] = r["shape"]["batch"]
        for s in steps.values():
            by_b[s["_b"]].append(s)
    return {b: {k: float(np.median([s[k] for s in ss if k in s])) for k in {k for s in ss for k in s}}
            for b, ss in by_b.items()}


def table(out: Path, run: str) -> None:
    plan = load_plan(out / "plan.yaml")
    prof = load_profile(out / "cpu-local.yaml")
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    from rackplan.sim.cost.cores import core_share
    cx = CostContext(model, hw, plan.decode[0], prof, core_share=core_share(hw, plan))
    pricer = StepPricer(cx)
    sweep = sweep_ops(out)
    steps = decode_steps(out / run / "measurements.jsonl")
    if not steps:
        print(f"{run}: no decode steps")
        return
    acc = defaultdict(float)
    n_sw = 0
    for s in steps:
        b, ctx = s["batch"], s["ctx"]
        sc = pricer.price(_step(b, ctx, s["admitted"], s["finished"], pricer))
        bd = sc.breakdown()
        period = pricer.decode([b], [ctx], admitted=s["admitted"], finished=s["finished"])
        ops_m = sum(s["ops"].values())
        ops_p = sum(bd.get(o, 0.0) for o in COMPUTE_OPS)
        acc["period_m"] += s["step_s"] + s["loop_s"]
        acc["period_p"] += period
        acc["ops_m"] += ops_m
        acc["ops_p"] += ops_p
        acc["instep_m"] += s["step_s"] - ops_m
        acc["instep_p"] += sum(sc.host.part(p) for p in STEP_PARTS)
        acc["prep_m"] += s["host"].get("host.prepare", 0.0)
        acc["sample_m"] += s["host"].get("host.sample", 0.0)
        acc["loop_m"] += s["loop_s"]
        acc["loop_p"] += sum(sc.host.part(p) for p in LOOP_PARTS)
        for p in LOOP_PARTS:
            acc[p] += s["host"].get(p, 0.0)
        sw = sweep.get(b)
        if sw is not None:  # the same batch in the sweep: its ops, and the price at its contexts
            n_sw += 1
            acc["sw_ops_serve"] += ops_m
            acc["sw_ops_sweep"] += sum(sw.get(o, 0.0) for o in COMPUTE_OPS)
            acc["sw_price_serve"] += period
            acc["sw_price_sweepctx"] += pricer.decode([b], [b * sw["_ctx"]])
            acc["sw_ctx_serve"] += ctx / b
            acc["sw_ctx_sweep"] += sw["_ctx"]
            for o in COMPUTE_OPS:
                acc[f"op_serve:{o}"] += s["ops"].get(o, 0.0)
                acc[f"op_sweep:{o}"] += sw.get(o, 0.0)
    n = len(steps)
    ms = lambda k, d=n: 1e3 * acc[k] / max(d, 1)  # noqa: E731
    pct = lambda a, b: 100.0 * (acc[a] / acc[b] - 1.0) if acc[b] else float("nan")  # noqa: E731
    load = Path("/proc/loadavg").read_text().split()[0]
    batches = np.array([s["batch"] for s in steps])
    print(f"\n{run}: {n} decode steps (batch p50 {np.median(batches):.0f}, max {batches.max()}); "
          f"1-min load now {load}")
    print(f"{'part (ms per step)':<44} {'executed':>9} {'priced':>9} {'excess':>9} {'% of excess':>11}")
    excess = acc["period_m"] - acc["period_p"]
    rows = [("loop period (step + loop record)", "period_m", "period_p"),
            ("  forward ops", "ops_m", "ops_p"),
            ("  in-step host (step - ops; prepare, sample)", "instep_m", "instep_p"),
            ("  loop outside the step (serve/host record)", "loop_m", "loop_p")]
    for name, m, p in rows:
        share = "" if m == "period_m" else f"{100 * (acc[m] - acc[p]) / excess:10.0f}%" if excess else ""
        print(f"{name:<44} {ms(m):9.2f} {ms(p):9.2f} {ms(m) - ms(p):+9.2f} {share:>11}")
    print(f"{'    of which host.prepare / host.sample':<44} {ms('prep_m'):9.2f} {ms('sample_m'):9.2f}")
    print(f"{'    of which schedule / dp_sync / output':<44} " + " ".join(f"{ms(p):9.2f}" for p in LOOP_PARTS))
    if n_sw:
        print(f"same batch in the sweep ({n_sw} steps): forward ops serving {ms('sw_ops_serve', n_sw):.2f} vs sweep "
              f"{ms('sw_ops_sweep', n_sw):.2f} ms ({pct('sw_ops_serve', 'sw_ops_sweep'):+.1f}%); context/seq serving "
              f"{acc['sw_ctx_serve'] / n_sw:.0f} vs sweep {acc['sw_ctx_sweep'] / n_sw:.0f}: price "
              f"{ms('sw_price_serve', n_sw):.2f} vs {ms('sw_price_sweepctx', n_sw):.2f} ms "
              f"({pct('sw_price_serve', 'sw_price_sweepctx'):+.1f}%)")
        print("  per op, serving vs sweep: " + ", ".join(
            f"{o} {pct(f'op_serve:{o}', f'op_sweep:{o}'):+.0f}%" for o in COMPUTE_OPS if acc[f"op_sweep:{o}"]))


def _step(b: int, ctx: float, admitted: int, finished: int, pricer: StepPricer):
    from rackplan.sim.cost.batch import RankWork, Step
    st = Step((RankWork(float(b), float(ctx)),), (1,))
    return Step(st.works, st.ranks, admitted=float(admitted), finished=float(finished)) if pricer.turnover else st


def serving_runs(out: Path) -> list[str]:
    """The serving runs of a plan_to_hardware.py --out folder, relative to it: serve-<pct>pct (one run per rate,
    before session 19) or serve-<pct>pct/s<k> (its segments)."""
    return sorted(str(p.parent.relative_to(out)) for p in out.glob("serve-*pct/**/measurements.jsonl"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a plan_to_hardware.py --out folder")
    ap.add_argument("--runs", nargs="*", default=None, help="serving runs in it (default: every one)")
    args = ap.parse_args(argv)
    runs = args.runs or serving_runs(args.out)
    for run in runs:
        table(args.out, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
