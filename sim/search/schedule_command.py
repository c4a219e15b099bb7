"""`plan --trace FILE --schedule 1h` (write a schedule) and `simulate --schedule FILE` (verify one):
the command-line side of sim/search/schedule.py."""
from __future__ import annotations

import argparse
import sys

from rackplan.args import positive_float, positive_int
from rackplan.specs import SpecError, dump_yaml, from_dict, load_hardware, load_model, load_plan, resolve_profile
from rackplan.specs.reading import read_yaml

from . import schedule as sch

DEFAULT_BASE = "v41-flash-gb300-nvl72"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """plan's schedule flags (sim/search/command.py adds them)."""
    g = p.add_argument_group("a plan for a day (docs/sessions_and_schedules.md)")
    g.add_argument("--schedule", metavar="INTERVAL", help="instance counts per interval of --trace (e.g. 1h, 30m): "
                   "each interval verified in the simulator; writes the schedule to --out")
    g.add_argument("--trace", metavar="FILE", help="request trace whose load over time the schedule follows "
                   "(Azure, BurstGPT, Mooncake or JSONL; sim/traces.py)")
    g.add_argument("--trace-scale", type=positive_float, default=None, metavar="K",
                   help="the trace is a 1/K sample of the traffic to plan for: rates x K (default: 1)")
    g.add_argument("--base-plan", default=None, metavar="PLAN", help="plan whose instance shapes, router and SLOs "
                   f"the schedule keeps (default: {DEFAULT_BASE})")
    g.add_argument("--start-s", type=float, default=None, metavar="S", help="start-up of an added instance, s "
                   f"(default: {sch.WIDE_EP_START_S:g}, a Wide-EP instance's cold start: sim/search/schedule.py)")
    g.add_argument("--interval-requests", type=positive_int, default=None, metavar="N",
                   help="requests per interval probe (default: 2000)")


def _specs(base, profile_name=None):
    hw = load_hardware(base.hardware)
    return load_model(base.model), hw, resolve_profile(profile_name, base.profile, hw)


def run_plan(args) -> int:
    """plan --schedule: size every interval, write the schedule, print it. The model, hardware, GPUs and
    SLOs are the base plan's (--model, --hardware, --gpus, --workload, --ttft-p90, --tpot-p90 are not read)."""
    from rackplan.args import refuse_unused

    if not args.trace:
        raise SpecError("plan", "--trace", "a trace file with --schedule")
    refuse_unused("plan --schedule", {"--json": args.json, "--report": args.report, "--rate": args.rate,
                                      "--no-simulate": args.no_simulate, "--sim-requests": args.sim_requests},
                  "unset with --schedule (every interval is simulated; --interval-requests sets its probes)")
    from ..traces import load_trace

    interval = sch.parse_interval(args.schedule)
    if args.start_s is not None and not args.start_s >= 0:
        raise SpecError("plan", "--start-s", "seconds >= 0", args.start_s)
    base = load_plan(args.base_plan or DEFAULT_BASE)
    model, hw, prof = _specs(base, args.profile)
    wl = sch.trace_workload(args.trace)
    trace = load_trace(wl)
    n_int = len(sch.trace_rows(trace, interval))
    from .command import _Bar, plan_name

    with _Bar(not args.quiet and sys.stderr.isatty()) as bar:
        s = sch.plan_schedule(base, (model, hw, prof, wl), trace, args.trace, interval, args.trace_scale or 1.0,
                              sch.WIDE_EP_START_S if args.start_s is None else args.start_s,
                              args.interval_requests or 2000, args.seed or 0, plan_name(args.out),
                              bar.stage("intervals", n_int))
    from rackplan.outputs import Outputs

    with Outputs() as out:
        dump_yaml(s, out.file(args.out), header=f"# schedule of {base.name} over {args.trace} "
                  f"({interval:g} s intervals); rackplan simulate --schedule {args.out} verifies it\n")
    print_schedule(s, list(s.intervals), "sized")
    print(f"schedule -> {args.out}")
    return 0 if all(iv.meets_slo for iv in s.intervals) else 3


def run_simulate(args) -> int:
    """simulate --schedule FILE: every interval again, its SLOs checked; exit 3 if one misses."""
    from rackplan.args import refuse_unused

    from ..traces import load_trace

    refuse_unused("simulate --schedule", {"--workload": args.workload, "--rate": args.rate, "--requests": args.requests,
                                          "--report": args.report}, "unset with --schedule (the schedule names its "
                  "trace, rates and requests per interval)")
    s = from_dict(sch.Schedule, read_yaml(args.schedule), args.schedule)
    model, hw, prof = _specs(s.base, args.profile)
    wl = sch.trace_workload(s.trace)
    trace = load_trace(wl)
    from .command import _Bar

    with _Bar(sys.stderr.isatty()) as bar:
        got = sch.verify(s, (model, hw, prof, wl), trace, bar.stage("intervals", len(s.intervals)))
    print_schedule(s, got, "verified")
    return 0 if all(iv.meets_slo for iv in got) else 3


def print_schedule(s: sch.Schedule, intervals: list, verb: str) -> None:
    """The schedule's table (per interval: load, instances, GPUs, simulated p90s) and its GPU-hours."""
    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 120)
    slo = s.base.slo
    t = Table(title=f"{s.base.name} shapes ({s.base.summary}) over {s.trace}, x{s.trace_scale:g}: {verb} in the "
              f"simulator ({s.sim_requests} requests per interval; SLO TTFT p90 <= {slo.ttft_p90_s:g} s, TPOT p90 <= "
              f"{slo.tpot_p90_s * 1e3:g} ms)")
    pools = [p for p in sch.POOLS if getattr(s.base, p)]
    for col in ["interval (h)", "req/s"] + pools + ["GPUs", "TTFT p90 (s)", "TPOT p90 (ms)", "SLOs"]:
        t.add_column(col, justify="right")
    for iv in intervals:
        cell = lambda x, k=1.0: "-" if x is None else f"{x * k:.3f}"  # noqa: E731
        t.add_row(f"{iv.start_s / 3600:.2f}-{iv.end_s / 3600:.2f}", f"{iv.rate_rps:,.2f}",
                  *(str(iv.counts()[p]) for p in pools), str(iv.gpus), cell(iv.ttft_p90_s), cell(iv.tpot_p90_s, 1e3),
                  "met" if iv.meets_slo else "[red]missed[/]")
    con.print(t)
    for line in sch.transitions(s):
        con.print(line, highlight=False)
    h = sch.gpu_hours(s)
    con.print(f"GPU-hours (arithmetic over the schedule): {h['schedule']:,.1f} ({h['running']:,.1f} serving + "
              f"{h['startups']:,.1f} starting instances) against {h['static']:,.1f} for the static plan sized for the "
              f"peak ({h['static_gpus']:.0f} GPUs all day): {h['saved']:,.1f} saved ({h['saved_share']:.1%})",
              highlight=False)
    missed = [iv for iv in intervals if not iv.meets_slo]
    if missed:
        con.print(f"[red]{len(missed)} of {len(intervals)} intervals miss their SLOs[/]")
