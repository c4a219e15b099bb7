"""Find the layout with the most tokens/s per GPU under the SLOs, and write plan.yaml + a report.

With no arguments it plans the seed scenario: DeepSeek-V4.1-Flash on one GB300 NVL72 rack
(72 GPUs) serving the agentic-chat workload at TTFT p90 <= 2 s and TPOT p90 <= 50 ms.
Exit codes: 2 bad input (including a GPU budget too small for the weights), 3 no layout meets
the SLOs (the message names the closest layout and its miss; no plan file is written).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from rackplan import economics
from rackplan.accuracy_band import headline_band
from rackplan.args import (
    check_writable,
    duration,
    int_at_most,
    non_negative_int,
    per_token_duration,
    positive_float,
    positive_int,
    refuse_unused,
)
from rackplan.outputs import Outputs, prepare_folder
from rackplan.specs import (
    SLO,
    SpecError,
    dump_yaml,
    load_hardware,
    load_model,
    load_workload,
    resolve_profile,
    spec_ref,
)

from ..expert_load import EXPERT_LOAD_HELP, with_expert_load
from ..request_classes import class_lines, search_slo
from . import economy, pairs, pareto_axis, planner, schedule_command, spares
from .eplb_note import eplb_line
from .space import SearchSpace

REPORT_FILES = ("report.md", "report.html", "pareto.png", "pareto.csv", "launch")  # what --report writes
SEED = {"model": "deepseek-v4.1-flash", "hardware": "gb300-nvl72", "gpus": 72, "workload": "agentic-chat"}
# The largest --gpus: 2^16 GPUs, 910 NVL72 racks, far past one serving deployment of one model (the largest
# budget benchmarks/search_speed.py plans is 576, eight racks; issue 36 timed 4,608 at 95 CPU-s); the search's
# work grows with the budget (README, "Bad input, interrupts and outputs": Bounds).
MAX_GPUS = 65536
NAME_MAX = 40  # characters of a plan name taken from --out (it reaches scripts and Kubernetes object names)


def plan_name(out: str) -> str:
    """The plan's name from its --out file: the file's stem with every run of characters other than
    letters, digits, '.', '_' and '-' as one '-', cut to NAME_MAX with a stable hash of the stem when longer."""
    import hashlib
    import re

    stem = os.path.splitext(os.path.basename(out))[0]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "plan"
    if len(name) > NAME_MAX:
        name = f"{name[:NAME_MAX - 9].rstrip('-._')}-{hashlib.sha256(stem.encode()).hexdigest()[:8]}"
    return name


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=SEED["model"],
                   help="model name under configs/models, a YAML path, or a Hugging Face config.json (a path, "
                        "a folder holding one, a repo id in the local cache) (default: %(default)s, the seed scenario)")
    p.add_argument("--hardware", default=SEED["hardware"], help="hardware name or YAML path (default: %(default)s); "
                   "several, comma-separated: plan each and compare them (sim/search/compare.py)")
    p.add_argument("--gpus", type=int_at_most(MAX_GPUS, "the planner's largest GPU budget"), default=SEED["gpus"],
                   help=f"GPU budget, at most {MAX_GPUS:,} (default: 72, one NVL72 rack)")
    p.add_argument("--workload", default=SEED["workload"], help="workload name or YAML path (default: %(default)s)")
    p.add_argument("--expert-load", default=None, metavar="FILE|published", help=EXPERT_LOAD_HELP)
    p.add_argument("--ttft-p90", type=duration, default=2.0, metavar="T",
                   help="TTFT p90 SLO, e.g. 2s or 500ms (default: 2s)")
    p.add_argument("--tpot-p90", type=per_token_duration, default=0.05, metavar="T",
                   help="TPOT p90 SLO, e.g. 50ms (default: 50ms)")
    p.add_argument("--objective", choices=planner.OBJECTIVES, default="throughput",
                   help="throughput: max tokens/s/GPU under the SLOs; min-gpus: fewest GPUs for --rate; "
                        "latency: max tokens/s/user at --rate; cost: lowest $/M output tokens on the GPU budget; "
                        "power: most output tokens/s per MW on it (sim/search/economy.py); goodput: most requests/s "
                        "within their SLO class's limits per GPU at --rate (docs/workloads.md)")
    p.add_argument("--rate", type=positive_float, default=None, metavar="RPS",
                   help="target request rate in req/s for min-gpus / latency / goodput (default: the workload's rate)")
    p.add_argument("--profile", default=None,
                   help="cost-model profile (default: the hardware's default_profile, measured where shipped)")
    p.add_argument("--profile-any-hardware", action="store_true",
                   help="allow a profile fitted on other hardware than --hardware")
    p.add_argument("--mode", choices=("any", "disagg", "agg"), default="any",
                   help="search disaggregated, aggregated or both (any) kinds of deployment (default: any)")
    p.add_argument("--out", default="plan.yaml", help="where to write the chosen plan (default: plan.yaml)")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="write report.md, report.html (interactive: open in a browser), pareto.png, pareto.csv and "
                   "launch/ (vLLM launch files) here")
    p.add_argument("--force", action="store_true", help="replace a --report folder that holds an earlier report")
    p.add_argument("--timings", action="store_true", help="also print the search's wall-clock timings (stderr; "
                   "in --json as 'timings'): reports hold none, so the same inputs give the same files")
    p.add_argument("--workers", type=positive_int, default=min(8, os.cpu_count() or 1),
                   help="processes that price the layouts (and run min-gpus / latency probes; default: the CPU "
                   "count, at most 8; the plan does not depend on it)")
    p.add_argument("--sim-requests", type=positive_int, default=None,
                   help="requests per simulator run, all run to the end (default: as many as steady state needs)")
    p.add_argument("--no-simulate", action="store_true",
                   help="skip the simulator's verification (the plan then carries the analytic estimate only)")
    p.add_argument("--seed", type=non_negative_int, default=None, help="simulator seed (default: the workload's)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    economics.add_arguments(p)
    economy.add_arguments(p)
    pairs.add_arguments(p)
    pareto_axis.add_arguments(p)
    spares.add_arguments(p)
    schedule_command.add_arguments(p)


def build_request(args) -> planner.Request:
    """Specs and knobs of one planning run from parsed arguments."""
    if args.gpus is None or args.gpus < 1:
        raise SpecError("", "gpus", "a positive GPU count", args.gpus)
    if args.objective == "throughput":
        refuse_unused("plan --objective throughput", {"--rate": args.rate}, "--objective min-gpus or latency (the "
                      "throughput objective finds the highest rate the SLOs allow; --rate is the target of the others)")
    if args.no_simulate:
        refuse_unused("plan --no-simulate", {"--sim-requests": args.sim_requests, "--seed": args.seed},
                      "a simulator verification (drop --no-simulate; the analytic estimate draws nothing)")
    if args.sim_requests:
        from ..simulator import check_request_budget
        check_request_budget(args.sim_requests, flag="--sim-requests")
    mode = getattr(args, "mode", "any")
    space = replace(SearchSpace(), disaggregated=mode != "agg", aggregated=mode != "disagg")
    hw = load_hardware(args.hardware)
    profile = resolve_profile(args.profile, None, hw, getattr(args, "profile_any_hardware", False))
    workload = with_expert_load(load_workload(args.workload), getattr(args, "expert_load", None))
    return planner.Request(
        model=load_model(args.model), hw=hw, profile=profile, workload=workload,
        num_gpus=args.gpus, slo=search_slo(SLO(args.ttft_p90, args.tpot_p90), workload),
        model_ref=spec_ref("models", args.model), hw_ref=spec_ref("hardware", args.hardware),
        workload_ref=spec_ref("workloads", args.workload),
        # pinned: plan.yaml names the profile it was verified under
        profile_ref=spec_ref("profiles", args.profile or hw.default_profile),
        objective=args.objective, target_rps=args.rate, space=space, workers=max(1, args.workers),
        sim_requests=args.sim_requests, seed=args.seed, simulate=not args.no_simulate,
        prices=economics.prices_from_args(args, hw), power_mw=economy.check_power_budget(args))


class _Bar:
    """rich progress bar, one task per pipeline stage; a no-op when stderr is not a terminal."""

    def __init__(self, enabled: bool):
        self.progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description:16s}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=Console(stderr=True), transient=True)

    def __enter__(self):
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.stop()

    def stage(self, name: str, total: int):
        if not self.progress:
            return lambda: None
        task = self.progress.add_task(name, total=total)
        return lambda: self.progress.advance(task)


def run(args) -> int:
    check_writable("--out", args.out)
    if args.schedule:  # a plan for a day (sim/search/schedule.py)
        refuse_unused("plan --schedule", {"--hardware-pairs": args.hardware_pairs, "--pareto-axis": None
                                          if args.pareto_axis == "gpu" else args.pareto_axis},
                      "a single plan (--hardware-pairs compares kinds; --pareto-axis draws one plan's front)")
        return schedule_command.run_plan(args)
    refuse_unused("plan", {"--trace": args.trace, "--trace-scale": args.trace_scale, "--base-plan": args.base_plan,
                           "--start-s": args.start_s, "--interval-requests": args.interval_requests},
                  "unset without --schedule INTERVAL (a plan for a day)")
    if "," in args.hardware or args.hardware_pairs:  # kinds (and pairs, sim/search/pairs.py) compared
        return _compare(args)
    if args.report and Path(args.report).resolve() == Path(args.out).resolve():
        raise SpecError("", "--report", "a folder other than the --out file", args.report)
    if args.report:
        prepare_folder(args.report, "--report", args.force, owned=REPORT_FILES)
    req = build_request(args)
    if args.pareto_axis != "gpu":  # refused before the search: no report to draw on, or no figures for it
        refuse_unused(f"plan --pareto-axis {args.pareto_axis}", {"--pareto-axis": None if args.report else
                      args.pareto_axis}, "--report DIR (the axis pareto.png and pareto.csv are drawn on)")
        pareto_axis.axis(req, args.pareto_axis)
    n_spare, target = spares.check(args, req)
    with _Bar(not args.quiet and sys.stderr.isatty()) as bar:
        req.progress = bar.stage
        res = spares.plan(req, plan_name(args.out), n_spare, target)
    req.progress = res.request.progress = None
    band = headline_band(res.plan, req.profile.name, req.workload)
    with Outputs() as out:  # plan.yaml and the report folder appear together, whole, or not at all
        if args.report:
            from .report import write_all

            write_all(res, out.folder(args.report, replace=args.force), args.pareto_axis)
        dump_yaml(res.plan, out.file(args.out), header=f"# {res.plan.description}\n# accuracy: {band.line()}\n"
                  + "".join(f"# {line}\n" for line in economy.lines(res)))
    if args.timings:
        print("timings: " + ", ".join(f"{k} {v:.2f}" for k, v in res.timings.items()), file=sys.stderr)
    w = res.winner
    if args.json:
        doc = {"plan": args.out, "summary": res.plan.summary, "gpus": w.cand.gpus,
               "verified": w.check is not None and w.passed, "request_rate": w.rate_rps,
               "output_tps_per_gpu": w.tps_gpu, "tps_per_user": w.tps_user,
               "estimate": {"request_rate": w.cand.rate_rps, "output_tps_per_gpu": w.cand.tps_gpu,
                            "tps_per_user": w.cand.tps_user},
               "predicted": res.plan.predicted, "profile": req.profile.name,
               "profile_source": req.profile.describe(), "accuracy_band": band.to_dict(),
               "economics": economy.to_dict(res)}
        if args.timings:
            doc["timings"] = res.timings
        print(json.dumps(doc, indent=2))
        return 0
    from .report import cluster_fill, console_table, user_gap

    print(f"profile {req.profile.name}: {req.profile.describe()}")
    print(console_table(res))
    if w.check is not None and req.objective == "latency":  # per user: what this objective is about
        m = w.check.metrics
        note = (f": {w.tps_user:.1f} tokens/s/user, TTFT p90 {m['ttft_p90_s'] * 1e3:,.1f} ms, TPOT p90 "
                f"{m['tpot_p90_s'] * 1e3:.2f} ms, verified in the simulator at steady state (analytic estimate "
                f"{w.cand.tps_user:.1f} tokens/s/user, gap {user_gap(w):+.0%})")
    elif w.check is not None:
        note = (f": {w.tps_gpu:,.0f} output tokens/s/GPU, {w.tps_user:.1f} tokens/s/user at {w.rate_rps:.4g} req/s, "
                f"verified in the simulator at steady state (analytic estimate {w.cand.tps_gpu:,.0f}, gap "
                f"{w.gap:+.0%})")
    else:
        note = f" (analytic estimate only, not simulated: {w.cand.tps_gpu:,.0f} output tokens/s/GPU)"
    print(f"\nplan: {res.plan.summary} -> {args.out}{note}")
    print(eplb_line(req, res.plan))
    if getattr(args, "expert_load", None):
        print(f"note: {args.out} names workload {req.workload.name} without --expert-load {args.expert_load}: pass "
              "it again to simulate or whatif the plan under the same expert load")
    if w.check is not None:
        print("\n".join(class_lines(w.check.metrics)) or "", end="\n" if req.workload.classes else "")
    print(f"accuracy: {w.tps_gpu:,.0f} output tok/s/GPU, {band.line()} (benchmarks/accuracy.py)")
    if fill := cluster_fill(res):
        print(fill)
    print("\n".join(economy.lines(res) + spares.line(res, target) + economy.why(res)).rstrip())
    if args.report:
        print(f"report: {Path(args.report) / 'report.md'} (and report.html: open it in a browser)")
    return 0


def _compare(args) -> int:
    """--hardware A,B,C (and --hardware-pairs): one plan per hardware kind (and pair) and one comparison table
    (sim/search/compare.py)."""
    from . import compare

    refuse_unused("plan --hardware A,B", {"--spares": args.spares or None, "--availability": args.availability},
                  "one hardware (spare nodes are whole nodes of one kind)")
    refuse_unused("plan --hardware A,B", {"--pareto-axis": None if args.pareto_axis == "gpu" else args.pareto_axis},
                  "one hardware kind (the comparison draws compare.png; each kind's front: plan it alone)")
    if args.report:
        prepare_folder(args.report, "--report", args.force, owned=("compare.md", "compare.json", "compare.png"))
    arrival = load_workload(args.workload).arrival
    target = args.rate or (arrival.rate if arrival.kind == "poisson" else None)
    with _Bar(not args.quiet and sys.stderr.isatty()) as bar:
        rows = compare.plan_each(args, build_request, bar.stage)
    compare.write(rows, target, args.report)
    for r in rows if args.timings else ():
        if r.res is not None:
            print(f"timings {r.hardware}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.res.timings.items()),
                  file=sys.stderr)
    if args.json:
        print(json.dumps([r.figures(target) for r in rows], indent=2))
    else:
        print(compare.table(rows, target))
        print("\n".join(compare.notes(rows, target)))
    return 0 if any(r.res is not None for r in rows) else planner.NoFeasiblePlan.exit_code
