"""Simulate a plan under changed hardware, host settings, model or profile, against its baseline.

Example: rackplan whatif --plan plan.yaml --set hardware.nvlink_gbps=900,1800
  --set host.async_scheduling=false,true --set cpu.overhead_scale=0.5,1 --set model.moe.top_k=4,6,8 [--replan]
Every combination of the --set values is simulated at the plan's load (its verified request rate
when it has one, else its workload's) until steady state can be judged (from the run length the
planner's verification used), or re-planned with --replan; prints a table of steady-state metrics
and their change against the unchanged plan (a row whose pool saturates says which, instead of
latencies), and where one decode step's time goes (device, exposed host, waiting for the API
server: the cost model at --decode-batch sequences per rank), and writes whatif.csv, whatif.png and
whatif_step.png with --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
from dataclasses import replace
from pathlib import Path

from rackplan import economics
from rackplan.accuracy_band import headline_band
from rackplan.args import non_negative_int, positive_float, positive_int, refuse_unused
from rackplan.interrupts import process_map
from rackplan.outputs import Outputs, prepare_folder
from rackplan.specs import Scenario, SpecError, load_hardware, load_model, load_plan, load_workload, resolve_profile

from ..expert_load import with_expert_load
from ..simulator import PRECISION
from . import economy, planner, whatif
from .verify import at_rate, run_simulation

# The most combinations one study runs: each is a simulation (or with --replan a whole plan) of seconds
# to minutes on the rack plans, so 1,024 is already hours of CPU; refused before any is run (README: Bounds).
MAX_COMBINATIONS = 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default="v41-flash-gb300-nvl72", help="plan name or plan.yaml path (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=V1,V2",
                   help="a change to try (repeatable): hardware.nvlink_gbps=900,1800 (GB/s: gigabytes per second "
                        "per GPU, one way; NICs are sold in gigabits, an 800 Gb/s NIC is "
                        "hardware.scaleout_gbps=100), hardware.hbm_tbps=8 (TB/s), "
                        "host.async_scheduling=false,true, host.scheduler_scale=0.5, host.api_servers=1,4, "
                        "host.stream_interval=1,10,50, "
                        "host.cuda_graphs=false,true, cpu.overhead_scale=0.5,1 (every host part), "
                        "decode.eplb.redundant_experts=0,32, decode.mtp=0,1,3, decode.dbo=false,true (every "
                        "instance of that pool), "
                        "model.moe.top_k=4,6,8, profile.mem_eff=0.7, workload.prefix_hit_rate=0.8; at most "
                        f"{MAX_COMBINATIONS:,} combinations")
    p.add_argument("--decode-batch", type=positive_int, default=None, metavar="B",
                   help="sequences per rank of the decode step whose time split is shown (at most, and by default, "
                        "the plan's cap)")
    p.add_argument("--replan", action="store_true", help="re-plan for every combination instead of re-simulating")
    p.add_argument("--workload", default=None, help="workload (default: the plan's)")
    p.add_argument("--expert-load", default=None, metavar="FILE[,FILE...]",
                   help="expert loads to compare (each 'published' or a file of recorded counts: expert_counts.jsonl, "
                        ".npy, a vLLM EPLB load-window JSON); one: the baseline's; several: a study over them, as "
                        "--set workload.expert_load=A,B (docs/workloads.md)")
    p.add_argument("--profile", default=None,
                   help="profile (default: the plan's, else the hardware's default_profile)")
    p.add_argument("--profile-any-hardware", action="store_true",
                   help="allow a profile fitted on other hardware than the plan's")
    p.add_argument("--rate", type=positive_float, default=None,
                   help="request rate in req/s (default: the plan's planned rate; not with --replan)")
    p.add_argument("--num-requests", type=positive_int, default=None,
                   help="requests per simulation, all run to the end (default: as many as steady state needs)")
    p.add_argument("--seed", type=non_negative_int, default=None, help="simulator seed (default: the workload's)")
    p.add_argument("--workers", type=positive_int, default=min(8, os.cpu_count() or 1),
                   help="processes that run the combinations' simulations (default: the CPU count, at most 8)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write whatif.csv, whatif.png, whatif_step.png (the decode step's split) and report.html "
                   "(deltas with error bars; open it in a browser) here")
    p.add_argument("--force", action="store_true", help="replace an --out folder that holds an earlier study")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    economics.add_arguments(p)


def check_bounds(args, plan, sets) -> None:
    """Before anything runs: at most MAX_COMBINATIONS combinations, --decode-batch within the plan's
    decode cap, and no --rate with --replan (the planner chooses each combination's rate)."""
    import math

    count = math.prod(len(values) for _, values in sets)
    if count > MAX_COMBINATIONS:
        raise SpecError("whatif", "--set", f"at most {MAX_COMBINATIONS:,} combinations of values (split the study)",
                        f"{count:,} combinations")
    cap = (plan.decode or plan.aggregated)[0].max_batch_per_rank
    if args.decode_batch is not None and args.decode_batch > cap:
        raise SpecError("whatif", "--decode-batch", f"at most {cap}, the sequences per rank plan {plan.name}'s "
                        "first decode instance is capped at (max_batch_per_rank)", args.decode_batch)
    if args.replan:
        refuse_unused("whatif --replan", {"--rate": args.rate}, "no --rate (each re-plan finds the highest rate its "
                      "SLOs allow; --rate sets the load a plan is re-simulated at)")


def baseline_specs(args, plan) -> Scenario:
    wl_ref = args.workload or plan.workload
    if wl_ref is None:
        raise SpecError("", "workload", "a workload (--workload, or one named in the plan)")
    loads = [v.strip() for v in args.expert_load.split(",")] if getattr(args, "expert_load", None) else []
    wl = with_expert_load(load_workload(wl_ref), loads[0] if len(loads) == 1 else None)
    rate = args.rate or plan.predicted.get("request_rate")
    if rate and wl.arrival.kind == "poisson":
        wl = at_rate(wl, rate)
    prof = resolve_profile(args.profile, plan.profile, plan.hardware, args.profile_any_hardware)
    return Scenario(plan, load_model(plan.model), load_hardware(plan.hardware), wl, prof)


def first_requests(plan, base: Scenario) -> int | None:
    """The run length of the plan's verification, scaled to the baseline's rate (None: none known)."""
    n, rate = plan.predicted.get("sim_requests"), plan.predicted.get("request_rate")
    if not n or not rate or base.workload.arrival.kind != "poisson":
        return None
    return max(1, round(n * base.workload.arrival.rate / rate))


def _simulate(task) -> whatif.Row:
    plan, combo, base, replan, n, seed, first, batch = task
    specs = whatif.changed_specs(base, combo)
    if not replan:
        plan = specs.plan or plan
        res = run_simulation(Scenario(plan, specs.model, specs.hw, specs.workload, specs.profile), n, seed, first,
                             PRECISION)
        return whatif.Row(combo, whatif.steady_metrics(res) | whatif.step_split(specs, plan, batch))
    req = planner.Request(specs.model, specs.hw, specs.profile, specs.workload, plan.num_gpus, plan.slo,
                          plan.model, plan.hardware, plan.workload or specs.workload.name, plan.profile,
                          sim_requests=n, seed=seed)
    try:
        res = planner.plan(req, name=plan.name)
    except planner.NoFeasiblePlan as exc:
        return whatif.Row(combo, {"error": str(exc)})
    w = res.winner  # the re-planned deployment's verified steady state (or its estimate, unsimulated)
    metrics = dict(w.check.metrics) if w.check else {}
    metrics.update(request_rate=w.rate_rps, output_tps_per_gpu=w.tps_gpu, tps_per_user=w.tps_user)
    return whatif.Row(combo, metrics, res.plan)


def study(plan, base: Scenario, sets, replan=False, num_requests=None, seed=None, workers=1, batch=None):
    """(baseline row, one row per combination); deterministic for any worker count."""
    combos = whatif.combinations(sets)
    first = first_requests(plan, base)
    tasks = [(plan, c, base, replan, num_requests, seed, first, batch) for c in [()] + combos]
    if workers <= 1 or len(tasks) < 2:
        rows = [_simulate(t) for t in tasks]
    else:
        rows = list(process_map(_simulate, tasks, min(workers, len(tasks))))
    return rows[0], rows[1:]


def table(baseline: whatif.Row, rows: list[whatif.Row]) -> str:
    """Steady-state figures per row (served tokens/s per GPU; latencies only where every pool keeps
    up), their change against the baseline, and one decode step's split (device / exposed host /
    API server wait)."""
    b = baseline.metrics.get("decode_batch")
    split = f"step ms @b{b:.0f}: GPU/host/API" if b else ""
    head = (f"{'change':48s} {'GPUs':>5s} {'TTFT p90':>9s} {'TPOT p90':>9s} {'tok/s/GPU':>10s} {'tok/s/user':>10s} "
            f"{'served/offered':>15s}  {split:30s} deltas")
    out = [head]
    for r in [baseline] + rows:
        if "error" in r.metrics:
            out.append(f"{r.label:48s} {r.metrics['error']}")
            continue
        m, d = r.metrics, whatif.deltas(r.metrics, baseline.metrics)
        ds = " ".join(delta_text(k, v, whatif.delta_errors(r.metrics, baseline.metrics).get(k))
                      for k, v in d.items() if k in whatif.METRICS[:4])
        plan_txt = f"  [{r.plan.summary}]" if r.plan is not None else ""
        nan = float("nan")
        if whatif.stable(m):
            lat = (f"{m.get('ttft_p90_s', nan):8.3f}s {m.get('tpot_p90_s', nan) * 1e3:7.1f}ms "
                   f"{m.get('output_tps_per_gpu', nan):10.0f} {m.get('tps_per_user', nan):10.1f}")
        else:
            what = f"unstable: {m.get('saturated', '')} saturates"
            lat = f"{what:>19s} {m.get('output_tps_per_gpu', nan):10.0f} {'-':>10s}"
        served = f"{m.get('served_rps', nan):.4g}/{m.get('offered_rps', m.get('request_rate', nan)):.4g}"
        sp = "/".join(f"{m[k]:.2f}" for k in whatif.SPLIT) if "gpu_ms" in m else ""
        gpus = f"{m['num_gpus']:5.0f}" if "num_gpus" in m else f"{'-':>5s}"  # a layout change may add GPUs
        out.append(f"{r.label:48s} {gpus} {lat} {served:>15s}  {sp:30s} {'' if r is baseline else ds}{plan_txt}")
    return "\n".join(out + [NOISE_NOTE % whatif.NOISE_Z])


NOISE_NOTE = ("deltas: change against the baseline, +- %g standard errors of the two runs' steady-state figures "
              "(batch means, sim/metrics.py) where measured; '(noise)': inside them, no change shown")


def delta_text(key: str, delta: float, error: float | None) -> str:
    """One delta of the table: 'ttft+3.1%', with its error bar where known, marked where inside the noise."""
    text = f"{key.split('_')[0]}{delta:+.1%}"
    if error is None:
        return text
    return text + f"+-{whatif.NOISE_Z * error:.1%}" + ("(noise)" if whatif.in_noise(delta, error) else "")


SYMLOG_ABOVE = 200.0  # % change: past this whatif.png's axis is symlog (linear within +-10%)


def write_outputs(folder: str | Path, baseline: whatif.Row, rows: list[whatif.Row], plan=None,
                  base: Scenario | None = None) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    if plan is not None and base is not None:  # report.html: the deltas with error bars, the baseline's step
        from ..commands.explain import explain
        from ..htmlreport import whatif_page
        from .estimate import traffic_of

        try:
            steps = explain(plan, base.model, base.hw, base.profile, traffic_of(base.workload, base.model))
        except SpecError:
            steps = []
        (out / "report.html").write_text(whatif_page(plan, baseline, rows, steps))
    with open(out / "whatif.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        split = ["decode_batch", *whatif.SPLIT]
        w.writerow(["change", "stable", "saturated"] + list(whatif.METRICS) + [f"delta_{m}" for m in whatif.METRICS]
                   + [f"delta_se_{m}" for m in whatif.METRICS] + split + ["plan"])
        for r in [baseline] + rows:
            d, err = whatif.deltas(r.metrics, baseline.metrics), whatif.delta_errors(r.metrics, baseline.metrics)
            ok = whatif.stable(r.metrics)
            w.writerow([r.label, int(ok), r.metrics.get("saturated", "")]
                       + [r.metrics.get(m, "") if ok or m not in whatif.LATENCY else "" for m in whatif.METRICS]
                       + [d.get(m, "") for m in whatif.METRICS] + [err.get(m, "") for m in whatif.METRICS]
                       + [r.metrics.get(k, "") for k in split] + [r.plan.summary if r.plan else ""])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = ("ttft_p90_s", "tpot_p90_s", "output_tps_per_gpu", "tps_per_user")
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 3), 4.5), dpi=110)
    width = 0.8 / len(shown)
    spread = []
    for i, m in enumerate(shown):
        vals = [100 * whatif.deltas(r.metrics, baseline.metrics).get(m, 0.0) for r in rows]
        # error bars: +- NOISE_Z standard errors of the two runs' figures (whatif.delta_errors), where measured
        errs = [100 * whatif.NOISE_Z * whatif.delta_errors(r.metrics, baseline.metrics).get(m, math.nan) for r in rows]
        spread += vals
        ax.bar([j + i * width for j in range(len(rows))], vals, width, yerr=errs, error_kw={"lw": 0.8, "capsize": 2},
               label=m)
    ax.axhline(0, c="k", lw=0.8)
    symlog = max((abs(v) for v in spread), default=0.0) > SYMLOG_ABOVE  # one outlier would flatten the rest
    if symlog:
        ax.set_yscale("symlog", linthresh=10)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.18 * (hi - lo))  # a band above the bars for the notes, clear of the title
    centres = [j + 0.4 - width / 2 for j in range(len(rows))]
    for x, r in zip(centres, rows):  # a row with no latency figures says why instead of showing 0% bars
        if bar_note(r):
            ax.annotate(bar_note(r), (x, 0.98), xycoords=("data", "axes fraction"), ha="center", va="top",
                        fontsize=6, color="tab:red")
    ax.set_xticks(centres)
    ax.set_xticklabels([r.label.replace(", ", "\n") for r in rows], fontsize=6, rotation=30, ha="right")
    ax.set_ylabel("change against baseline (%" + (", symlog)" if symlog else ")") + ", +- 2 s.e.")
    ax.set_title("what-if: simulated steady state against the baseline", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out / "whatif.png")
    plt.close(fig)
    if "gpu_ms" in baseline.metrics:
        _plot_split(plt, out / "whatif_step.png", [baseline] + rows)


def bar_note(row: whatif.Row) -> str:
    """Why a row of whatif.png has no latency bars (they would read as 0% change), else ''."""
    if "error" in row.metrics:
        return "no plan"
    return "" if whatif.stable(row.metrics) else f"unstable:\n{row.metrics.get('saturated', '')}\nsaturates"


def _plot_split(plt, path: Path, rows: list[whatif.Row]) -> None:
    """Stacked bars: one decode step's device, exposed host and API-server wait per setting."""
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(rows) + 3), 4.5), dpi=110)
    bottom = [0.0] * len(rows)
    for key, label in zip(whatif.SPLIT, ("GPU", "exposed host", "API-server wait")):
        vals = [r.metrics.get(key, 0.0) for r in rows]
        ax.bar(range(len(rows)), vals, 0.6, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(rows)))  # one label per bar, slanted and wrapped at ', ': neighbours never overlap
    ax.set_xticklabels([r.label.replace(", ", "\n") for r in rows], fontsize=6, rotation=30, ha="right")
    ax.set_ylabel(f"decode step at {rows[0].metrics['decode_batch']:.0f} seqs/rank (ms)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run(args) -> int:
    if args.out:
        prepare_folder(args.out, "--out", args.force, owned=("whatif.csv", "whatif.png", "whatif_step.png",
                                                             "report.html"))
    plan = load_plan(args.plan)
    sets = [whatif.parse_set(s) for s in args.set]
    loads = [v.strip() for v in args.expert_load.split(",")] if args.expert_load else []
    if len(loads) > 1:
        sets.append(("workload.expert_load", loads))
    check_bounds(args, plan, sets)
    base = baseline_specs(args, plan)
    economics.prices_from_args(args, base.hw)  # a bad --cost or --pue fails before anything runs
    if args.num_requests:
        from ..simulator import check_request_budget
        check_request_budget(args.num_requests, flag="--num-requests")
    for combo in whatif.combinations(sets):  # validate every key and value before simulating anything
        whatif.changed_specs(base, combo)
        fixed = [k for k, _ in combo if k.split(".", 1)[-1] in whatif.HOST_LAYOUT or k.split(".")[0] in whatif.POOLS]
        if args.replan and fixed:
            raise SpecError("--set", fixed[0], "no host.* or pool layout setting with --replan (the planner chooses "
                            "them)")
    baseline, rows = study(plan, base, sets, args.replan, args.num_requests, args.seed, max(1, args.workers),
                           args.decode_batch)
    eco_lines = economy.add_to_rows(args, base, [baseline] + rows)
    if args.out:
        with Outputs() as out:
            write_outputs(out.folder(args.out, replace=args.force), baseline, rows, plan, base)
    if args.json:
        print(json.dumps([{"change": r.label, "metrics": r.metrics,
                           "deltas": whatif.deltas(r.metrics, baseline.metrics),
                           "delta_standard_errors": whatif.delta_errors(r.metrics, baseline.metrics),
                           "plan": r.plan.summary if r.plan else None,
                           "accuracy_band": headline_band(r.plan or plan, base.profile.name, base.workload).to_dict()}
                          for r in [baseline] + rows], indent=2))
    else:
        print(table(baseline, rows))
        print("\n".join(eco_lines))
        tps = baseline.metrics.get("output_tps_per_gpu")
        print(f"accuracy: baseline {tps:,.0f} output tok/s/GPU, " if tps else "accuracy: ",
              f"{headline_band(plan, base.profile.name, base.workload).line()} (benchmarks/accuracy.py)", sep="")
        note = baseline_note(plan, baseline)
        if note:
            print(note)
    return 0


def baseline_note(plan, baseline: whatif.Row) -> str:
    """How the baseline row relates to the plan's verified figure: every row is simulated until its
    figures reach the precision target, so the baseline can differ from the plan's verification run
    (`rackplan simulate --plan` repeats that run exactly)."""
    verified, n = plan.predicted.get("output_tps_per_gpu"), plan.predicted.get("sim_requests")
    m = baseline.metrics
    if not verified or not n or "num_requests" not in m or "output_tps_per_gpu" not in m:
        return ""
    return (f"every row is a simulation run to the precision target: the baseline's {m['output_tps_per_gpu']:,.0f} "
            f"tok/s/GPU over {m['num_requests']:,.0f} requests; the plan's verified {verified:,.0f} came from "
            f"{n:,.0f} requests (`rackplan simulate --plan` repeats that run)")


__all__ = ["add_arguments", "run", "study", "replace"]
