"""Compare a profile's predictions with measurements: per op, per step, TTFT/TPOT (MAPE).

Examples:
  rackplan validate --plan tiny-cpu --measurements runs/heldout --measurements runs/serve \\
      --profile configs/profiles/cpu-local.yaml --max-mape 10
  rackplan validate --plan plan.yaml --vllm-bench results/bench.json --profile fitted.yaml
  rackplan validate --op-database gb300 --hardware gb300-nvl72 --profile datasheet --profile gb300-nvl72-vllm
      # each profile against the per-op tables of aiconfigurator-core, side by side (the opdb extra)

A `vllm bench serve` result is checked by replaying its own requests through the simulator; for a
profile fitted from a bench (`calibrate --vllm-bench`) the error of its base profile is shown beside
it (before -> after). Several --profile print side by side: every op class's (or step set's) MAPE
under each.

Steps whose sizes the profile was not fitted on are reported as held-out, and --max-mape gates
those (all steps when there are none). Exit 1 when a gated MAPE exceeds --max-mape.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys

from rackplan.args import non_negative_float, refuse_unused
from rackplan.specs import SpecError, load_hardware, load_plan, load_profile, resolve_profile

from . import io
from .opdb import FRAMEWORK, add_table_arguments
from .samples import step_samples
from .speed import at_reference
from .validate import Report, bench_tag, compare_serving, compare_steps, compare_vllm_bench


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", help="plan the measurements ran (name or YAML path)")
    p.add_argument("--measurements", action="append", default=[],
                   help="measurements.jsonl or run folder (repeatable)")
    p.add_argument("--profile", action="append", default=[],
                   help="profile to validate (repeatable: side by side; default: the plan's, else the "
                        "hardware's default_profile, and for --op-database also datasheet)")
    p.add_argument("--profile-any-hardware", action="store_true",
                   help="allow a profile fitted on other hardware than the plan's")
    add_table_arguments(p, "validate against aiconfigurator-core's per-op tables of SYSTEM (gb300, h200_sxm)")
    p.add_argument("--hardware", help="hardware of the op-database tables")
    p.add_argument("--vllm-bench", action="append", default=[],
                   help="`vllm bench serve --save-result --save-detailed` JSON of the plan's deployment (repeatable)")
    p.add_argument("--max-mape", type=non_negative_float,
                   help="exit 1 when a gated MAPE (%%) is above this or not a number (gated: per op and per step "
                   "on the held-out sizes where there are any, else on all, and TTFT / TPOT p50)")
    p.add_argument("--raw-ops", action="store_true",
                   help="predict without the profile's per-op terms (op_scale, op_fixed): the shared curves alone")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    if args.op_database:
        refuse_unused("validate --op-database", {"--plan": args.plan, "--measurements": args.measurements,
                      "--vllm-bench": args.vllm_bench, "--max-mape": args.max_mape, "--raw-ops": args.raw_ops},
                      "no plan input (--op-database compares profiles with its tables per op class)")
        args.framework = args.framework or FRAMEWORK
    else:
        refuse_unused("validate", {"--hardware": args.hardware, "--framework": args.framework,
                                   "--version": args.version, "--op-database-root": args.op_database_root},
                      "--op-database SYSTEM (the hardware of a plan's validation is the plan's)")
    if args.op_database:
        return _op_database(args)
    if not args.plan or not (args.measurements or args.vllm_bench):
        raise SpecError("validate", "--plan/--measurements", "a plan and its measurements and/or --vllm-bench "
                        "(or --op-database)")
    plan = load_plan(args.plan)
    profiles = [resolve_profile(p, None, plan.hardware, args.profile_any_hardware) for p in args.profile] or \
        [resolve_profile(None, plan.profile, plan.hardware, args.profile_any_hardware)]
    if len(profiles) > 1 and args.measurements:
        _side_by_side_steps(plan, args, profiles)
    prof = profiles[0]
    # each run at the speed the profile was fitted at (its in-place CPU-speed probes, calibration/speed.py)
    records = at_reference(io.read_runs(args.measurements, plan), prof) if args.measurements else []
    if args.raw_ops:
        prof = dataclasses.replace(prof, op_scale={}, op_fixed={})
    samples = step_samples(records, plan) if records else []
    rep = compare_steps(plan, samples, prof) if samples else Report({}, {})
    rep.serving = compare_serving(plan, records, prof) if records else {}
    serving, bench_table = _vllm_bench(plan, args.vllm_bench, [prof] + profiles[1:])
    rep.serving.update(serving)
    gated = rep.gated()
    if args.json:
        print(json.dumps({"fit_sizes": rep.fit_sizes, "held_out_sizes": rep.held_sizes, "ops": rep.ops,
                          "steps": rep.steps, "step_mape": rep.step_mape, "serving": rep.serving,
                          **({"vllm_bench": bench_table} if bench_table else {}), "gated": gated}, indent=2))
    else:
        print_report(rep, prof.name, not args.raw_ops, bench_table)
    if args.max_mape is not None:
        say = functools.partial(print, file=sys.stderr if args.json else sys.stdout)  # --json: stdout is JSON only
        over = gate(gated, args.max_mape)
        if over:
            worst = max(over, key=lambda k: math.inf if math.isnan(over[k]) else over[k])
            say(f"validate: FAIL {len(over)} MAPE(s) above {args.max_mape}% or not a number "
                f"(worst {worst}: {over[worst]:.1f}%)")
            return 1
        if not gated:
            say("validate: FAIL no gated MAPE to check")
            return 1
        say(f"validate: OK every gated MAPE <= {args.max_mape}%")
    return 0


def gate(gated: dict[str, float], max_mape: float) -> dict[str, float]:
    """The gated MAPEs that fail: above `max_mape`, or NaN (an error that could not be measured is
    a failure, never a pass)."""
    return {k: v for k, v in gated.items() if not v <= max_mape}


def _vllm_bench(plan, paths: list[str], profiles: list) -> tuple[dict[str, float], dict]:
    """(serving, table) of the bench runs replayed under each profile. serving: 'vllm.{stat}_*' for the
    first profile and, when it was fitted from a bench, 'vllm.before.{stat}_*' for its base profile
    (several benches: the first one's keys, then 'vllm{i}.'), what --max-mape gates. table: every
    column's error side by side (_bench_columns), {} without benches."""
    from .bench_fit import read_bench, read_summary

    columns = _bench_columns(profiles)
    base = _base_profile(profiles[0])
    out: dict[str, float] = {}
    table: dict = {"columns": [label for label, _ in columns], "replayed": {}, "rows": []} if paths else {}
    for i, path in enumerate(paths):
        tag = bench_tag(i)
        summary = read_summary(path, plan)  # a run without --save-detailed: replayed at its means
        bench = read_bench(path, plan) if summary["detailed"] else summary
        got = [compare_vllm_bench(plan, bench, prof) for _, prof in columns]  # one per column
        first = got[next(j for j, (_, p) in enumerate(columns) if p is profiles[0])]
        out.update({f"{tag}.{k}": v for k, v in first.items()})
        if base is not None:
            before = next(g for g, (_, p) in zip(got, columns) if p.name == base.name)
            out.update({f"{tag}.before.{k}": v for k, v in before.items()})
        table["replayed"][tag] = f"{path}: {first['workload']}"  # what was replayed: each request, or the means
        for stat in sorted(k[:-4] for k in first if k.endswith("_err")):
            table["rows"].append({"bench": tag, "statistic": stat, "measured_s": first[f"{stat}_measured_s"],
                                  "err": [g.get(f"{stat}_err", math.nan) for g in got]})
    return out, table


def _bench_columns(profiles: list) -> list[tuple[str, object]]:
    """(label, profile) of each bench table column: every --profile, the one a bench fit started from
    (calibrate --vllm-bench, its provenance) just before it unless that one is given too."""
    names = {p.name for p in profiles}
    cols: list[tuple[str, object]] = []
    for prof in profiles:
        base = _base_profile(prof)
        if base is not None and base.name not in names:
            cols.append((f"{base.name} (base)", base))
            names.add(base.name)
        cols.append((prof.name, prof))
    return cols


def _base_profile(prof):
    """The profile a bench fit started from (provenance vllm_bench_fit.base_profile), if it loads."""
    ref = (prof.provenance.get("vllm_bench_fit") or {}).get("base_profile")
    try:
        return load_profile(ref) if ref else None
    except (SpecError, OSError):
        return None


def print_report(rep: Report, name: str, scaled: bool, bench_table: dict | None = None) -> None:
    if rep.ops or rep.steps or rep.fit_sizes:
        print(f"profile {name}: fitted on {_sizes(rep.fit_sizes) or 'unknown sizes'}; "
              f"held out: {_sizes(rep.held_sizes) or 'none'}")
    else:
        print(f"profile {name}")
    if rep.ops:
        print(f"\nper op (seconds per step, mean; {'with' if scaled else 'without'} per-op op_fixed/op_scale)")
        print(f"  {'op':<14} {'set':<9} {'n':>3} {'predicted':>11} {'measured':>11} {'MAPE%':>7}")
        for r in rep.ops:
            print(f"  {r['op']:<14} {r['set']:<9} {r['n']:>3} {r['predicted_s']:>11.3e} {r['measured_s']:>11.3e} "
                  f"{r['mape']:>7.1f}")
    if rep.steps:
        print("\nper step (medians of repeats)")
        print(f"  {'role':<8} {'size':>5} {'set':<9} {'rep':>3} {'predicted':>11} {'measured':>11} {'err%':>7}")
        for r in rep.steps:
            print(f"  {r['role']:<8} {r['size']:>5} {r['set']:<9} {r['repeats']:>3} {r['predicted_s']:>11.3e} "
                  f"{r['measured_s']:>11.3e} {r['err'] * 100:>7.1f}")
        print("  step MAPE: " + ", ".join(f"{k} {v:.1f}%" for k, v in rep.step_mape.items()))
    if bench_table:
        _print_bench(bench_table)
    if any(not k.startswith("vllm") for k in rep.serving):
        print("\nserving (simulated vs measured)")
        for key in sorted(k for k in rep.serving if k.endswith("_err") and not k.startswith("vllm")):
            stem = key[:-4]
            print(f"  {stem:<16} predicted {rep.serving[stem + '_predicted_s']:.4f} s  measured "
                  f"{rep.serving[stem + '_measured_s']:.4f} s  err {rep.serving[key] * 100:+.1f}%")


def _print_bench(table: dict) -> None:
    """vLLM bench replay: measured, then each profile's error (simulated / measured - 1) side by side."""
    cols = table["columns"]
    width = max([9] + [len(c) + 1 for c in cols])
    print("\nvllm bench serve (its requests replayed through the simulator; error = simulated / measured - 1)")
    for tag, said in table["replayed"].items():
        print(f"  {tag}: {said}")
    print(f"  {'statistic':<24} {'measured':>10}" + "".join(f" {c:>{width}}" for c in cols))
    for r in table["rows"]:
        errs = "".join(f" {'-':>{width}}" if math.isnan(e) else f" {e * 100:>+{width - 1}.1f}%" for e in r["err"])
        print(f"  {r['bench'] + '.' + r['statistic']:<24} {r['measured_s']:>9.4f}s{errs}")


def _sizes(d: dict) -> str:
    names = {"decode": "decode batches", "prefill": "prefill tokens"}
    return "; ".join(f"{names.get(k, k)} {v}" for k, v in d.items() if v)


def _side_by_side_steps(plan, args, profiles) -> None:
    """Step and per-op MAPE of each profile on the same measurements, one column per profile."""
    records = io.read_runs(args.measurements, plan)
    samples = step_samples(records, plan)
    reps = [compare_steps(plan, samples, p) for p in profiles]
    names = [p.name for p in profiles]
    print("side by side (MAPE %): " + " | ".join(f"{p.name}: {p.describe()}" for p in profiles))
    print(f"  {'':<22}" + "".join(f"{n:>22}" for n in names))
    for key in reps[0].step_mape:
        print(f"  {'step ' + key:<22}" + "".join(f"{r.step_mape.get(key, float('nan')):>21.1f}%" for r in reps))
    ops = {(o["op"], o["set"]) for r in reps for o in r.ops}
    for op, st in sorted(ops):
        vals = [next((o["mape"] for o in r.ops if (o["op"], o["set"]) == (op, st)), float("nan")) for r in reps]
        print(f"  {op + ' ' + st:<22}" + "".join(f"{v:>21.1f}%" for v in vals))
    print()


def _op_database(args) -> int:
    """Each profile's predictions against the op-database tables, per op class, side by side."""
    from .opdb import check_hardware, data_root, locate
    from .validate import compare_op_database

    if not args.hardware:
        raise SpecError("validate --op-database", "--hardware", "the hardware the tables were measured on")
    hw = load_hardware(args.hardware)
    names = args.profile or ["datasheet", hw.default_profile]
    profiles = [resolve_profile(n, None, hw, args.profile_any_hardware) for n in dict.fromkeys(names)]
    tables = locate(data_root(args.op_database_root), args.op_database, args.framework, args.version)
    check_hardware(args.op_database, tables, hw.name)
    elsewhere = _graph_timed_tables(args, hw)
    rows = compare_op_database(tables, hw, profiles, elsewhere)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for p in profiles:
        print(f"{p.name}: {p.describe()}")
    head = "".join(f"{p.name[:24]:>26}" for p in profiles)
    w = max([24] + [len(r["class"]) for r in rows])
    print(f"\nMAPE % per op class, all rows (held-out rows)\n  {'op class':<{w}} {'rows':>6}{head}")
    for r in rows:
        cells = "".join(_cell(r.get(p.name)) for p in profiles)
        print(f"  {r['class']:<{w}} {r['rows']:>6}{cells}")
    for key, (label, _) in elsewhere.items():
        print(f"  {key} [{label}]: the graph-timed table the importer fits {key} from on this architecture "
              f"(opdb_import.GRAPH_TIMED_SOURCE); the {args.framework} table's {key} rows are timed eagerly")
    return 0


def _graph_timed_tables(args, hw) -> dict:
    """{class: (label, table)}: for vLLM tables, the other framework's gemm_perf table the importer fits a class
    from on hw's architecture (opdb_import.GRAPH_TIMED_SOURCE, newest version), where the system has one."""
    from .opdb import data_root, locate
    from .opdb_import import GRAPH_TIMED_SOURCE
    from .opdb_ops import ARCH

    out = {}
    for (key, arch), other in GRAPH_TIMED_SOURCE.items():
        if args.framework != "vllm" or arch != ARCH.get(hw.name):
            continue
        try:
            table = locate(data_root(args.op_database_root), args.op_database, other).get("gemm_perf")
        except SpecError:  # the system has no table of that framework: nothing to add
            table = None
        if table is not None:
            out[key] = (f"{other} {table.version}", table)
    return out


def _cell(v) -> str:
    if not v:
        return f"{'-':>26}"
    held = f"({v['held_out']:.1f})" if v["held_out"] is not None else ""
    return f"{v['all']:>18.1f} {held:>7}"
