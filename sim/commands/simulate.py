"""Simulate a plan serving a workload: TTFT/TPOT/ITL/E2E percentiles, tokens/s per GPU and per user.

Every figure is measured at steady state, over a window that leaves out the warm-up and the
cool-down (sim/steady.py; the window is printed). Without --requests the run is made long enough
to judge that and to measure throughput to a 1% and p90s to a 4% standard error; a plan written by
`rackplan plan`, at its verified rate, runs exactly as its verification did, so it reproduces the
report. A rate a pool cannot keep up with is reported unstable (which pool saturates) instead of
latency percentiles.

Beside the simulation, the planner's analytic estimate of the layout it would choose on the same inputs
(`planner_choice`, one line where it differs; "planner_estimate" in --json). It costs seconds, so it is
kept in the cache folder (rackplan/diskcache.py, keyed by a hash of the inputs and the package's
code) and a later run on the same inputs reads it instead of computing it again.

With no arguments: the seed scenario, DeepSeek-V4.1-Flash on one GB300 NVL72 rack
(configs/plans/v41-flash-gb300-nvl72.yaml) under its agentic-chat workload.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from contextlib import nullcontext

from rackplan import economics
from rackplan.accuracy_band import headline_band
from rackplan.args import non_negative_int, positive_float, positive_int
from rackplan.interrupts import in_background
from rackplan.specs import (
    Scenario,
    SpecError,
    load_hardware,
    load_model,
    load_plan,
    load_workload,
    profile_origin,
    resolve_profile,
)

from ..expert_load import EXPERT_LOAD_HELP, describe, routing_load, with_expert_load
from ..metrics import not_known
from ..request_classes import class_lines

DEFAULT_PLAN = "v41-flash-gb300-nvl72"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default=DEFAULT_PLAN, help="plan YAML path or embedded name (default: %(default)s)")
    p.add_argument("--workload", help="workload YAML path or name (default: the plan's)")
    p.add_argument("--expert-load", default=None, metavar="FILE|published", help=EXPERT_LOAD_HELP)
    p.add_argument("--profile", help="profile name or YAML (default: the plan's, else the hardware's "
                   "default_profile: measured where configs/profiles/ has one, else datasheet)")
    p.add_argument("--profile-any-hardware", action="store_true",
                   help="allow a profile fitted on other hardware than the plan's")
    p.add_argument("--requests", type=positive_int, help="number of requests, all run to the end (default: as many as "
                   "steady state needs, starting from the plan's verification run or the workload's count)")
    p.add_argument("--rate", type=positive_float, help="override the arrival rate with Poisson at this many req/s")
    p.add_argument("--seed", type=non_negative_int, help="random seed (default: the workload's)")
    p.add_argument("--memory-gib", type=positive_float, default=4.0, metavar="GIB",
                   help="memory budget: a run of more requests than fit in it is refused up front (default: "
                   "%(default)s GiB, about 3.5 million requests)")
    p.add_argument("--timings", action="store_true", help="print the simulation's wall time (stderr)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--report", metavar="FILE", help="also write report.html here: utilisation over the run, TTFT / "
                   "TPOT distributions, a step by op (self-contained; open it in a browser)")
    p.add_argument("--schedule", metavar="FILE", help="verify a schedule written by `plan --schedule`: every interval "
                   "simulated on its instance counts, its SLOs checked (exit 3 if one misses)")
    economics.add_arguments(p)


LATENCY = ("ttft", "tpot", "itl", "e2e")


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _shown_metrics(result) -> dict:
    """The metrics as reported: an unstable run's latency percentiles are null (they only grow
    with the run's length), and so is a figure the run could not measure (metrics.not_known)."""
    unknown = not_known(result.metrics)
    if result.stable:
        return {k: (None if k in unknown else v) for k, v in result.metrics.items()}
    hidden = lambda k: (k.split("_")[0] in LATENCY and k.endswith("_s")) or k in ("goodput_rps", "slo_attainment",
                                                                                   "tps_per_user")  # noqa: E731
    return {k: (None if hidden(k) or k in unknown else v) for k, v in result.metrics.items()}


def report_json(plan, workload, profile, seed, result, eco=None) -> str:
    """The machine-readable report (deterministic: sorted keys, no timings)."""
    w, st = result.window, result.stability
    return json.dumps(_clean({
        "plan": plan.name, "layout": plan.summary, "model": plan.model, "hardware": plan.hardware,
        "workload": workload.name, "profile": profile.name, "profile_source": profile.describe(), "seed": seed,
        "stable": st.stable, "saturated": list(st.saturated), "converged": st.converged,
        "queue_growth": st.growth,
        "window": {"start_s": w.start_s, "end_s": w.end_s, "last_arrival_s": w.last_arrival_s,
                   "requests": w.requests},
        "metrics": _shown_metrics(result), "not_known": not_known(result.metrics),
        "utilisation": result.utilisation, "steps": result.steps,
        "accuracy_band": headline_band(plan, profile.name, workload).to_dict(),
        "economics": eco.to_dict() if eco is not None else None,
        "sessions": result.sessions,
    }), sort_keys=True)


def _throughput_rows(plan, m, stable: bool) -> list[tuple[str, str, float]]:
    """(label, metric key, value) of the throughput table."""
    pool = [("prefill pool: prompt tokens/s per prefill GPU", "prefill_pool_input_tps_per_gpu"),
            ("decode pool: output tokens/s per decode GPU", "decode_pool_output_tps_per_gpu")] \
        if plan.disaggregated else []
    # requests/s served: completed, and (disaggregated) prompts done and sequences seated by each pool
    served = [("requests/s served (completed)", "served_rps")] + (
        [("requests/s the prefill pool served", "prefill_served_rps"),
         ("requests/s the decode pool seated", "decode_served_rps")] if plan.disaggregated else [])
    slo = "goodput req/s (TTFT p90 <= %g s, TPOT p90 <= %g ms)" % (plan.slo.ttft_p90_s, plan.slo.tpot_p90_s * 1e3)
    rows = [("whole plan: output tokens/s per GPU", "output_tps_per_gpu"),
            ("whole plan: prompt tokens/s per GPU", "input_tps_per_gpu"),
            ("whole plan: uncached prompt tokens/s per GPU", "prefill_tps_per_gpu")] + pool + [
            ("requests/s offered", "offered_rps")] + served + ([
            ("tokens/s per user (median)", "tps_per_user"), (slo, "goodput_rps"),
            ("SLO attainment (share of requests)", "slo_attainment")] if stable else []) + [
            ("prefix-cache hits (share of prompt tokens)", "prefix_hit_rate")]
    return [(label, key, m[key]) for label, key in rows]


def print_table(plan, workload, profile, result, origin: str = "", eco_lines: tuple[str, ...] = ()) -> None:
    from rich.console import Console
    from rich.table import Table

    m, w, st = result.metrics, result.window, result.stability
    con = Console(width=None if sys.stdout.isatty() else 110)
    con.print(f"[bold]{plan.name}[/]: {plan.model} on {plan.hardware}, {plan.summary} "
              f"({int(m['num_gpus'])} GPUs)")
    arrival = workload.arrival
    unit = "sessions/s" if workload.sessions is not None else "req/s"
    drawn = f", {arrival.kind} at {arrival.rate:,.4g} {unit}" if arrival.kind == "poisson" else ""
    con.print(f"workload {workload.name}: {int(m['num_requests'])} requests{drawn} "
              f"({m['offered_rps']:,.4g} req/s arrived in the window)")
    con.print(f"profile {profile.name} ({origin + ', ' if origin else ''}{profile.describe()})")
    con.print(f"expert load: {describe(routing_load(workload, load_model(plan.model)))}", markup=False)
    con.print(f"simulation (discrete-event), measured over [{w.start_s:.1f} s, {w.end_s:.1f} s) of "
              f"{w.last_arrival_s:.1f} s of arrivals ({w.requests} requests; warm-up and cool-down left out)")
    if st.stable and not st.converged:
        con.print("[yellow]the run never settled (its warm-up is not over in its first half): these figures are "
                  "not steady-state yet; run longer (more --requests, or none to let the simulator choose)[/]")
    if st.stable:
        con.print(f"steady state: {st.describe()}")
        lat = Table(title="latency (s)")
        lat.add_column("metric")
        for q in ("p50", "p90", "p90 std. error", "p99"):
            lat.add_column(q, justify="right")
        cell = lambda x: f"{x:.4f}" if math.isfinite(x) else "-"  # noqa: E731
        for name in LATENCY:
            lat.add_row(name.upper(), *(cell(m[f"{name}_{q}_s"]) for q in ("p50", "p90")),
                        cell(m.get(f"{name}_p90_se_s", math.nan)), cell(m[f"{name}_p99_s"]))
        con.print(lat)
        unfinished = int(m.get("window_unfinished", 0))
        if unfinished:  # their E2E is unknown, longer than any finished one (simulator.Run.result)
            con.print(f"E2E: {unfinished} of the window's {w.requests} requests were still decoding when the run "
                      "stopped (it stops once each has its first token), so E2E percentiles that need them are "
                      "not known (-); --requests N runs every request to the end")
    else:
        con.print(f"[bold red]{st.describe()}[/]: the {' and '.join(st.saturated)} pool cannot keep up with "
                  f"{m['offered_rps']:,.4g} req/s, so latency percentiles only grow with the run's length "
                  "(not shown); the throughput below is what the pools serve at saturation")
    thr = Table(title="throughput (served in the window)")
    thr.add_column("metric")
    thr.add_column("value", justify="right")
    unknown, notes = not_known(m), []
    for name, key, val in _throughput_rows(plan, m, st.stable):
        thr.add_row(name, "not known" if key in unknown else f"{val:,.2f}")
        notes += [f"{name}: not known: {unknown[key]}"] if key in unknown else []
    con.print(thr)
    for note in notes:
        con.print(note)
    if result.sessions is not None:
        con.print(session_table(result.sessions))
    for line in class_lines(m):  # per request class (sim/request_classes.py), simulated
        con.print(line, markup=False, highlight=False)
    con.print(f"accuracy: {m['output_tps_per_gpu']:,.0f} output tok/s/GPU (whole plan), "
              f"{headline_band(plan, profile.name, workload).line()} (benchmarks/accuracy.py)")
    util = Table(title="utilisation per instance (in the window)")
    util.add_column("instance")
    util.add_column("busy", justify="right")
    util.add_column("steps", justify="right")
    for name, u in result.utilisation.items():
        util.add_row(name, f"{u:.1%}", str(result.steps[name]))
    con.print(util)
    for line in eco_lines:
        con.print(line, markup=False, highlight=False)
    con.print(f"[dim]simulated {m['duration_s']:.1f} s of traffic[/]")


def kinds(plan, hw) -> tuple:
    """The plan's hardware kinds: the prefill pool's first where it has its own (sim/mixed.py)."""
    return (load_hardware(plan.prefill_hardware), hw) if plan.prefill_hardware else (hw,)


def session_table(fig: dict):
    """The session figures of a run (sim/sessions.session_figures) as a table: hit rate and latency per turn."""
    from rich.table import Table

    t = Table(title=f"sessions (simulated, every turn of the run): {fig['sessions']} sessions, {fig['turns']} turns; "
              f"prefix-cache hits {fig['hit_rate']:.1%} of prompt tokens, {fig['reuse_hit_rate']:.1%} of the "
              "context earlier turns prefilled")
    for col in ("turn", "requests", "hit rate", "TTFT p50 (s)", "TTFT p90 (s)", "E2E p50 (s)"):
        t.add_column(col, justify="right")
    for row in fig["per_turn"]:
        t.add_row(str(row["turn"]), str(row["requests"]), f"{row['hit_rate']:.1%}",
                  *(f"{row[k]:.4f}" for k in ("ttft_p50_s", "ttft_p90_s", "e2e_p50_s")))
    return t


def planner_choice(sc: Scenario) -> dict:
    """What the planner's analytic estimate (no simulation: `rackplan plan --no-simulate`) chooses for the
    plan's model, hardware, GPU budget, workload, SLOs and profile, among deployments of the plan's kind
    (disaggregated or aggregated: half the search's cost, so it runs beside the simulation): {"summary",
    "figure", "unit", "objective", "kind", "same_layout"}, or {"error": why} where it cannot plan them.
    Throughput objective, or latency for a closed-loop (concurrency) workload, whose figure is per user."""
    from dataclasses import replace

    from ..search import planner
    from ..search.space import SearchSpace

    plan, model, hw, workload, profile = sc.plan, sc.model, sc.hw, sc.workload, sc.profile
    if plan.prefill_hardware:
        return {"error": "not compared with the planner's choice: this plan's prefill pool runs on other hardware "
                "(compare hardware pairs with `rackplan plan --hardware-pairs PREFILL:DECODE`)"}
    objective = "latency" if workload.arrival.kind == "concurrency" else "throughput"
    kind = "disaggregated" if plan.disaggregated else "aggregated"
    space = replace(SearchSpace(), disaggregated=plan.disaggregated, aggregated=not plan.disaggregated)
    req = planner.Request(model, hw, profile, workload, plan.num_gpus, plan.slo, plan.model, plan.hardware,
                          workload.name, objective=objective, space=space, simulate=False)
    try:
        res = planner.plan(req)
    except planner.NoFeasiblePlan as exc:
        return {"error": f"its analytic estimate finds no layout that meets the SLOs on these inputs ({exc})"}
    except SpecError as exc:  # e.g. trace lengths: no mean request to plan for
        return {"error": f"not compared with the planner's choice: it cannot plan these inputs ({exc})"}
    w, mine = res.winner, (plan.prefill, plan.decode, plan.aggregated)
    figure, unit = (w.cand.tps_user, "tokens/s/user") if objective == "latency" else (w.cand.tps_gpu,
                                                                                         "output tokens/s/GPU")
    return {"summary": w.cand.summary, "figure": figure, "unit": unit, "objective": objective, "kind": kind,
            "same_layout": (res.plan.prefill, res.plan.decode, res.plan.aggregated) == mine}


def _choice_file(sc: Scenario):
    """Where the planner estimate of these inputs is remembered (None: no disk cache, see
    rackplan/diskcache.py): a file named by a hash of the inputs (with a CPU rig's detected cores)
    and the code."""
    import hashlib

    from rackplan.diskcache import cache_dir, code_version

    folder = cache_dir()
    if folder is None:
        return None
    hw = sc.hw
    cores = hw.rank_cores if hw.kind == "cpu" else None  # a CPU rig's detected cores cap its ranks (core_share)
    key = repr((sc.plan, sc.model, hw, cores, sc.workload, sc.profile, code_version())).encode()
    return folder / "planner-estimate" / f"{hashlib.sha256(key).hexdigest()[:32]}.json"


def remembered_choice(sc: Scenario) -> tuple[object, dict | None]:
    """(its cache file, the planner estimate an earlier `simulate` computed on exactly these inputs and
    code, or None): `planner_choice` is a pure function of them and costs seconds, so a later run reads
    it instead of computing it again beside the simulation."""
    path = _choice_file(sc)
    if path is None or not path.is_file():
        return path, None
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return path, None  # unreadable or corrupt: computed again (and overwritten)
    return path, found if isinstance(found, dict) else None


def remember_choice(path, choice: dict) -> None:
    """Keep a planner estimate in its cache file (rackplan/diskcache.store: atomic, best effort)."""
    from rackplan.diskcache import store

    store(path, json.dumps(choice, sort_keys=True))


def choice_line(plan, result, choice: dict) -> str:
    """One line where the planner's estimate would choose another layout than the plan's (else '')."""
    if "error" in choice:
        return f"planner: {choice['error']}"
    if choice["same_layout"]:
        return ""
    m = result.metrics
    mine = m["tps_per_user"] if choice["unit"] == "tokens/s/user" else m["output_tps_per_gpu"]
    return (f"planner: `rackplan plan` would not choose this layout: among {choice['kind']} deployments of the "
            f"same model on {plan.num_gpus} GPUs under this workload and SLOs, its analytic estimate "
            f"({choice['objective']} objective) picks {choice['summary']} at "
            f"{choice['figure']:,.0f} {choice['unit']} (estimate, not simulated; this run measured {mine:,.0f} in the "
            f"simulator); `rackplan plan` verifies its choice")


def write_report(path: str, sc: Scenario, result) -> None:
    """report.html of this run (sim/htmlreport.py), written whole or not at all."""
    plan, model, hw, workload, profile = sc.plan, sc.model, sc.hw, sc.workload, sc.profile
    from rackplan.outputs import Outputs

    from ..commands.explain import explain
    from ..htmlreport import simulate_page
    from ..search.estimate import traffic_of

    try:
        steps = explain(plan, model, hw, profile, traffic_of(workload, model))
    except SpecError:  # trace lengths: no mean request to price a step at
        steps = []
    with Outputs() as out:
        out.file(path).write_text(simulate_page(plan, workload, profile, result, steps))


def _availability_lines(plan, hw) -> list[str]:
    """rackplan/availability.py's lines of the table (imported here: --json does not print them)."""
    from rackplan import availability

    return availability.lines(plan, hw)


def run(args) -> int:
    if args.schedule:
        from ..search.schedule_command import run_simulate

        return run_simulate(args)
    plan = load_plan(args.plan)
    if args.report:
        from rackplan.args import check_writable

        check_writable("--report", args.report)
    from ..simulator import (
        MAX_STEADY,
        PRECISION,
        check_request_budget,
        max_requests,
        simulate_specs,
        simulate_steady,
        with_rate,
    )

    workload = with_expert_load(load_workload(args.workload or plan.workload or "isl4k-osl1k"), args.expert_load)
    planned = not args.workload and not args.expert_load and args.rate is None and "request_rate" in plan.predicted
    if args.rate is not None:
        workload = with_rate(workload, args.rate)
    elif planned:
        workload = with_rate(workload, plan.predicted["request_rate"])  # the load the planner verified
    profile = resolve_profile(args.profile, plan.profile, plan.hardware, args.profile_any_hardware)
    origin = profile_origin(args.profile, plan.profile, plan.hardware)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    economics.prices_from_args(args, hw)  # bad flags before the run
    if args.requests is not None:
        check_request_budget(args.requests, args.memory_gib)
    most = min(MAX_STEADY, max_requests(args.memory_gib))  # steady-state runs grow up to this many requests
    t0 = time.perf_counter()
    sc = Scenario(plan, model, hw, workload, profile)
    where, known = remembered_choice(sc)
    beside = in_background(planner_choice, sc) if known is None \
        else nullcontext(lambda: known)  # the estimate beside the simulation, unless an earlier run made it
    with beside as choice:
        if args.requests is not None:
            result = simulate_specs(sc, num_requests=args.requests, seed=args.seed)
        elif planned and "sim_requests" in plan.predicted:  # what the planner verified, run as it ran: same figures
            n = int(plan.predicted["sim_requests"])
            check_request_budget(n, args.memory_gib, "plan.predicted.sim_requests")
            result = simulate_steady(sc, seed=args.seed, first=n, most=n)
        else:
            result = simulate_steady(sc, seed=args.seed, precision=PRECISION, most=most)
        chosen = choice()
    if known is None:
        remember_choice(where, chosen)
    wall = time.perf_counter() - t0
    seed = workload.seed if args.seed is None else args.seed
    eco = economics.of_plan_metrics(plan, hw, args, result.metrics, result.utilisation)
    if args.report:  # before stdout, which may be a pipe closed early (`| head`)
        write_report(args.report, sc, result)
    if args.json:
        doc = json.loads(report_json(plan, workload, profile, seed, result, eco))
        sys.stdout.write(json.dumps({**doc, "planner_estimate": chosen}, sort_keys=True) + "\n")
    else:
        print_table(plan, workload, profile, result, origin,
                    tuple(economics.lines(eco, kinds(plan, hw)) + _availability_lines(plan, hw)))
        if line := choice_line(plan, result, chosen):
            print(line)
    if args.timings:
        print(f"timings: simulate {wall:.2f} s wall", file=sys.stderr)
    return 0
