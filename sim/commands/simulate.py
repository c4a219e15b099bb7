"""Simulate a plan serving a workload: TTFT/TPOT/ITL/E2E percentiles, tokens/s per GPU and per user.

With no arguments: the seed scenario, DeepSeek-V4.1-Flash on one GB300 NVL72 rack
(configs/plans/v41-flash-gb300-nvl72.yaml) under its agentic-chat workload.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

from rackplan.args import non_negative_int, positive_float, positive_int
from rackplan.specs import load_plan, load_workload, profile_origin, resolve_profile

DEFAULT_PLAN = "v41-flash-gb300-nvl72"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default=DEFAULT_PLAN, help="plan YAML path or embedded name (default: %(default)s)")
    p.add_argument("--workload", help="workload YAML path or name (default: the plan's)")
    p.add_argument("--profile", help="profile name or YAML (default: the plan's, else the hardware's "
                   "default_profile: measured where configs/profiles/ has one, else datasheet)")
    p.add_argument("--profile-any-hardware", action="store_true",
                   help="allow a profile fitted on other hardware than the plan's")
    p.add_argument("--requests", type=positive_int, help="number of requests (default: the workload's)")
    p.add_argument("--rate", type=positive_float, help="override the arrival rate with Poisson at this many req/s")
    p.add_argument("--seed", type=non_negative_int, help="random seed (default: the workload's)")
    p.add_argument("--memory-gib", type=positive_float, default=4.0, metavar="GIB",
                   help="memory budget: a run of more requests than fit in it is refused up front (default: "
                   "%(default)s GiB, about 3.5 million requests)")
    p.add_argument("--timings", action="store_true", help="print the simulation's wall time (stderr)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    return x


def report_json(plan, workload, profile, seed, result) -> str:
    """The machine-readable report (deterministic: sorted keys, no timings)."""
    return json.dumps(_clean({
        "plan": plan.name, "layout": plan.summary, "model": plan.model, "hardware": plan.hardware,
        "workload": workload.name, "profile": profile.name, "profile_source": profile.describe(), "seed": seed,
        "metrics": result.metrics, "utilisation": result.utilisation, "steps": result.steps,
    }), sort_keys=True)


def print_table(plan, workload, profile, result, origin: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    m = result.metrics
    con = Console(width=None if sys.stdout.isatty() else 110)
    con.print(f"[bold]{plan.name}[/]: {plan.model} on {plan.hardware}, {plan.summary} "
              f"({int(m['num_gpus'])} GPUs)")
    con.print(f"workload {workload.name}: {int(m['num_requests'])} requests")
    con.print(f"profile {profile.name} ({origin + ', ' if origin else ''}{profile.describe()})")
    lat = Table(title="latency (s)")
    lat.add_column("metric")
    for q in ("p50", "p90", "p99"):
        lat.add_column(q, justify="right")
    for name in ("ttft", "tpot", "itl", "e2e"):
        lat.add_row(name.upper(), *(f"{m[f'{name}_{q}_s']:.4f}" for q in ("p50", "p90", "p99")))
    con.print(lat)
    thr = Table(title="throughput")
    thr.add_column("metric")
    thr.add_column("value", justify="right")
    rows = [("output tokens/s per GPU", m["output_tps_per_gpu"]), ("input tokens/s per GPU", m["input_tps_per_gpu"]),
            ("prefill (uncached) tokens/s per GPU", m["prefill_tps_per_gpu"]),
            ("tokens/s per user (median)", m["tps_per_user"]), ("requests/s", m["request_rate"]),
            ("goodput req/s (TTFT p90 <= %gs, TPOT <= %gs)" % (plan.slo.ttft_p90_s, plan.slo.tpot_p90_s),
             m["goodput_rps"]), ("SLO attainment", m["slo_attainment"]),
            ("prefix-cache hits (share of prompt tokens)", m["prefix_hit_rate"])]
    for name, val in rows:
        thr.add_row(name, f"{val:,.2f}")
    con.print(thr)
    util = Table(title="utilisation per instance")
    util.add_column("instance")
    util.add_column("busy", justify="right")
    util.add_column("steps", justify="right")
    for name, u in result.utilisation.items():
        util.add_row(name, f"{u:.1%}", str(result.steps[name]))
    con.print(util)
    con.print(f"[dim]simulated {m['duration_s']:.1f} s of traffic[/]")


def run(args) -> int:
    plan = load_plan(args.plan)
    from ..simulator import with_rate

    workload = load_workload(args.workload or plan.workload or "isl4k-osl1k")
    if args.rate is not None:
        workload = with_rate(workload, args.rate)
    elif not args.workload and "request_rate" in plan.predicted:
        workload = with_rate(workload, plan.predicted["request_rate"])  # the load the planner checked
    profile = resolve_profile(args.profile, plan.profile, plan.hardware, args.profile_any_hardware)
    origin = profile_origin(args.profile, plan.profile, plan.hardware)
    from ..simulator import check_request_budget, simulate

    check_request_budget(args.requests or workload.num_requests, args.memory_gib)
    t0 = time.perf_counter()
    result = simulate(plan, workload, profile, num_requests=args.requests, seed=args.seed)
    wall = time.perf_counter() - t0
    seed = workload.seed if args.seed is None else args.seed
    if args.json:
        sys.stdout.write(report_json(plan, workload, profile, seed, result) + "\n")
    else:
        print_table(plan, workload, profile, result, origin)
    if args.timings:
        print(f"timings: simulate {wall:.2f} s wall", file=sys.stderr)
    return 0
