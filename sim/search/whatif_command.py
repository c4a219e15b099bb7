"""Simulate a plan under changed hardware, CPU overhead, model or profile, against its baseline.

Example: rackplan whatif --plan plan.yaml --set hardware.nvlink_gbps=900,1800
  --set cpu.overhead_scale=0.5,1 --set model.moe.top_k=4,6,8 [--replan]
Every combination of the --set values is simulated at the plan's load (its planned request rate
when it has one, else its workload's), or re-planned with --replan; prints a table of metrics
and their change against the unchanged plan, and writes whatif.csv and whatif.png with --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
from dataclasses import replace
from pathlib import Path

from rackplan.args import non_negative_int, positive_float, positive_int
from rackplan.interrupts import process_map
from rackplan.outputs import Outputs, prepare_folder
from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_workload, resolve_profile

from . import planner, whatif
from .verify import at_rate, run_simulation


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default="v41-flash-gb300-nvl72", help="plan name or plan.yaml path")
    p.add_argument("--set", action="append", default=[], metavar="KEY=V1,V2",
                   help="a change to try (repeatable): hardware.nvlink_gbps=900,1800, cpu.overhead_scale=0.5,1, "
                        "model.moe.top_k=4,6,8, profile.mem_eff=0.7, workload.prefix_hit_rate=0.8")
    p.add_argument("--replan", action="store_true", help="re-plan for every combination instead of re-simulating")
    p.add_argument("--workload", default=None, help="workload (default: the plan's)")
    p.add_argument("--profile", default=None,
                   help="profile (default: the plan's, else the hardware's default_profile)")
    p.add_argument("--profile-any-hardware", action="store_true",
                   help="allow a profile fitted on other hardware than the plan's")
    p.add_argument("--rate", type=positive_float, default=None, help="request rate (default: the plan's planned rate)")
    p.add_argument("--num-requests", type=positive_int, default=None, help="requests per simulation")
    p.add_argument("--seed", type=non_negative_int, default=None)
    p.add_argument("--workers", type=positive_int, default=min(8, os.cpu_count() or 1))
    p.add_argument("--out", default=None, metavar="DIR", help="write whatif.csv and whatif.png here")
    p.add_argument("--force", action="store_true", help="replace an --out folder that holds an earlier study")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def baseline_specs(args, plan) -> whatif.Specs:
    wl_ref = args.workload or plan.workload
    if wl_ref is None:
        raise SpecError("", "workload", "a workload (--workload, or one named in the plan)")
    wl = load_workload(wl_ref)
    rate = args.rate or plan.predicted.get("request_rate")
    if rate and wl.arrival.kind == "poisson":
        wl = at_rate(wl, rate)
    prof = resolve_profile(args.profile, plan.profile, plan.hardware, args.profile_any_hardware)
    return whatif.Specs(load_model(plan.model), load_hardware(plan.hardware), prof, wl)


def _simulate(task) -> whatif.Row:
    plan, combo, base, replan, n, seed = task
    specs = whatif.changed_specs(base, combo)
    if not replan:
        return whatif.Row(combo, run_simulation(plan, specs.model, specs.hw, specs.workload, specs.profile, n, seed))
    req = planner.Request(specs.model, specs.hw, specs.profile, specs.workload, plan.num_gpus, plan.slo,
                          plan.model, plan.hardware, plan.workload or specs.workload.name, plan.profile,
                          sim_requests=n, seed=seed)
    try:
        res = planner.plan(req, name=plan.name)
    except planner.NoFeasiblePlan as exc:
        return whatif.Row(combo, {"error": str(exc)})
    w = res.winner
    metrics = dict(w.check.metrics) if w.check else {}
    metrics.update(request_rate=w.rate_rps, output_tps_per_gpu=w.tps_gpu)
    return whatif.Row(combo, metrics, res.plan)


def study(plan, base: whatif.Specs, sets, replan=False, num_requests=None, seed=None, workers=1):
    """(baseline row, one row per combination); deterministic for any worker count."""
    combos = whatif.combinations(sets)
    tasks = [(plan, c, base, replan, num_requests, seed) for c in [()] + combos]
    if workers <= 1 or len(tasks) < 2:
        rows = [_simulate(t) for t in tasks]
    else:
        rows = list(process_map(_simulate, tasks, min(workers, len(tasks))))
    return rows[0], rows[1:]


def table(baseline: whatif.Row, rows: list[whatif.Row]) -> str:
    head = f"{'change':48s} {'TTFT p90':>9s} {'TPOT p90':>9s} {'tok/s/GPU':>10s} {'tok/s/user':>10s}  deltas"
    out = [head]
    for r in [baseline] + rows:
        if "error" in r.metrics:
            out.append(f"{r.label:48s} {r.metrics['error']}")
            continue
        m, d = r.metrics, whatif.deltas(r.metrics, baseline.metrics)
        ds = " ".join(f"{k.split('_')[0]}{v:+.1%}" for k, v in d.items() if k != "request_rate")
        plan_txt = f"  [{r.plan.summary}]" if r.plan is not None else ""
        ttft, tpot = m.get("ttft_p90_s", float("nan")), m.get("tpot_p90_s", float("nan"))
        out.append(f"{r.label:48s} {ttft:8.3f}s {tpot * 1e3:7.1f}ms "
                   f"{m.get('output_tps_per_gpu', float('nan')):10.0f} {m.get('tps_per_user', float('nan')):10.1f}  "
                   f"{'' if r is baseline else ds}{plan_txt}")
    return "\n".join(out)


def write_outputs(folder: str | Path, baseline: whatif.Row, rows: list[whatif.Row]) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "whatif.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["change"] + list(whatif.METRICS) + [f"delta_{m}" for m in whatif.METRICS] + ["plan"])
        for r in [baseline] + rows:
            d = whatif.deltas(r.metrics, baseline.metrics)
            w.writerow([r.label] + [r.metrics.get(m, "") for m in whatif.METRICS]
                       + [d.get(m, "") for m in whatif.METRICS] + [r.plan.summary if r.plan else ""])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = ("ttft_p90_s", "tpot_p90_s", "output_tps_per_gpu", "tps_per_user")
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 3), 4.5), dpi=110)
    width = 0.8 / len(shown)
    for i, m in enumerate(shown):
        vals = [100 * whatif.deltas(r.metrics, baseline.metrics).get(m, 0.0) for r in rows]
        ax.bar([j + i * width for j in range(len(rows))], vals, width, label=m)
    ax.axhline(0, c="k", lw=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_xticklabels([r.label.replace(", ", "\n") for r in rows], fontsize=6)
    ax.set_ylabel("change against baseline (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "whatif.png")
    plt.close(fig)


def run(args) -> int:
    if args.out:
        prepare_folder(args.out, "--out", args.force, owned=("whatif.csv", "whatif.png"))
    plan = load_plan(args.plan)
    sets = [whatif.parse_set(s) for s in args.set]
    base = baseline_specs(args, plan)
    from ..simulator import check_request_budget
    check_request_budget(args.num_requests or base.workload.num_requests, flag="--num-requests")
    for combo in whatif.combinations(sets):  # validate every key and value before simulating anything
        whatif.changed_specs(base, combo)
    baseline, rows = study(plan, base, sets, args.replan, args.num_requests, args.seed, max(1, args.workers))
    if args.out:
        with Outputs() as out:
            write_outputs(out.folder(args.out, replace=args.force), baseline, rows)
    if args.json:
        print(json.dumps([{"change": r.label, "metrics": r.metrics,
                           "deltas": whatif.deltas(r.metrics, baseline.metrics),
                           "plan": r.plan.summary if r.plan else None} for r in [baseline] + rows], indent=2))
    else:
        print(table(baseline, rows))
    return 0


__all__ = ["add_arguments", "run", "study", "replace"]
