"""Fit a profile (efficiencies, all-to-all, host overheads) from measurements, tables or a microbenchmark.

Examples:
  rackplan calibrate --plan tiny-cpu --measurements runs/sweep --out configs/profiles/cpu-local.yaml \\
      --holdout decode:4,12
  rackplan calibrate --a2a-table calibration/data/deepep_h800_a2a.csv --hardware h800 \\
      --out configs/profiles/h800-deepep.yaml
  rackplan calibrate --microbench --hardware cpu-local --out-hardware configs/hardware/cpu-local.yaml
  rackplan calibrate --vllm-bench results/bench.json --plan plan.yaml --out fitted.yaml
  rackplan calibrate --op-database gb300 --framework vllm --hardware gb300-nvl72 --base gb200-nvl72-trtllm \\
      --out configs/profiles/gb300-nvl72-vllm.yaml     # needs the opdb extra (aiconfigurator-core)

A `vllm bench serve --save-result --save-detailed` JSON of a plan's deployment (launch/bench.sh)
fits what end-to-end latencies identify (bench_fit.py: per-phase scales, host time per step, KV
transfer cost) on top of the base profile (--base, else the plan's, else datasheet).

Nothing is written unless every input reads and every fit succeeds; files are replaced atomically.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math

from rackplan.args import check_writable, refuse_unused
from rackplan.outputs import write_spec
from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_profile, plan_hash
from rackplan.specs.profile import BENCH_ERROR_PREFIX

from . import io
from .opdb import FRAMEWORK, add_table_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", help="plan the measurements ran (name or YAML path)")
    p.add_argument("--measurements", action="append", default=[],
                   help="measurements.jsonl or run folder (repeatable; all from one plan)")
    p.add_argument("--holdout", action="append", default=[], metavar="ROLE:N,N",
                   help="hold these step sizes out of the fit, e.g. decode:4,12 or prefill:128")
    p.add_argument("--no-holdout", action="store_true",
                   help="fit a measurement run on every step size (by default a fit whose --holdout leaves no "
                        "held-out steps is refused: it would have no held-out error to validate)")
    p.add_argument("--host-sweep", action="store_true",
                   help="the --measurements are serving runs of one model and hardware over several plans (DP "
                        "sizes, draft depths): fit only the profile's host block from their per-part host records "
                        "(sim/cost/host.py); --holdout sizes (sequences on the busiest rank) are held out")
    p.add_argument("--host-prefill-measurements", action="append", default=[], metavar="RUN",
                   help="with --host-sweep: runs the prefill loop's block is fitted from (repeatable); given, the "
                        "decode block is fitted from --measurements only and the prefill block from these only "
                        "(default: both from --measurements)")
    p.add_argument("--host-probe", action="store_true",
                   help="with --host-sweep: fit the host parts in probe-normalised time where every run recorded the "
                        "executor's CPU-speed probe (calibration/host_fit.py probe_fit; default: as measured: on a "
                        "loaded machine the probe did not lower the held-out error, benchmarks/RESULTS.md)")
    p.add_argument("--a2a-table", action="append", default=[], help="published all-to-all table (CSV)")
    p.add_argument("--vllm-bench", action="append", default=[],
                   help="`vllm bench serve --save-result --save-detailed` JSON of the plan's deployment (repeatable): "
                        "fit per-phase scales, host time per step and KV transfer cost")
    p.add_argument("--hardware", help="hardware the tables or microbenchmark describe (default: the plan's)")
    p.add_argument("--base", help="profile whose values seed the fit and fill the rest (default: datasheet; for "
                   "--vllm-bench alone the plan's profile, else datasheet)")
    p.add_argument("--name", help="name of the written profile (default: from --out)")
    p.add_argument("--out", help="profile YAML to write")
    p.add_argument("--microbench", action="store_true", help="measure matmul rate and copy bandwidth here")
    p.add_argument("--device", choices=("cpu", "cuda"), help="device for --microbench (cpu or cuda; default cpu)")
    p.add_argument("--out-hardware", help="hardware YAML to write from --microbench")
    add_table_arguments(p, "fit a measured profile from aiconfigurator-core's per-op tables of SYSTEM "
                        "(gb300, h200_sxm)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def parse_holdout(items: list[str]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for item in items:
        role, _, sizes = item.partition(":")
        if role not in ("decode", "prefill") or not sizes:
            raise SpecError("--holdout", "holdout", "ROLE:N,N with ROLE decode or prefill", item)
        try:
            out.setdefault(role, set()).update(int(x) for x in sizes.split(","))
        except ValueError:
            raise SpecError("--holdout", "holdout", "integer sizes", item) from None
        if min(out[role]) < 1:
            raise SpecError("--holdout", "holdout", "sizes >= 1 (sequences or tokens of a step)", item)
    return out


def check_combination(args: argparse.Namespace) -> None:
    """Every flag given must feed the fit that runs: one line naming the first that would do nothing."""
    if args.op_database:
        refuse_unused("calibrate --op-database", {"--measurements": args.measurements, "--a2a-table": args.a2a_table,
                      "--vllm-bench": args.vllm_bench, "--microbench": args.microbench, "--plan": args.plan,
                      "--holdout": args.holdout, "--host-sweep": args.host_sweep, "--out-hardware": args.out_hardware},
                      "no other input (--op-database fits a profile from its tables alone)")
        args.framework = args.framework or FRAMEWORK
    else:
        refuse_unused("calibrate", {"--framework": args.framework, "--version": args.version,
                                    "--op-database-root": args.op_database_root},
                      "--op-database SYSTEM (it names the op-database tables)")
    if not args.host_sweep:
        refuse_unused("calibrate", {"--host-prefill-measurements": args.host_prefill_measurements,
                                    "--host-probe": args.host_probe}, "--host-sweep (it fits only the host block)")
    if not args.measurements:
        refuse_unused("calibrate", {"--holdout": args.holdout, "--host-sweep": args.host_sweep,
                                    "--no-holdout": args.no_holdout},
                      "--measurements (step sizes are held out of a measurement fit)")
    if args.no_holdout:
        refuse_unused("calibrate", {"--holdout": args.holdout, "--host-sweep": args.host_sweep},
                      "no --no-holdout (it fits on every step size)")
    if not args.microbench:
        refuse_unused("calibrate", {"--out-hardware": args.out_hardware, "--device": args.device},
                      "--microbench (it writes what it measured, on the device it measured)")


def run(args: argparse.Namespace) -> int:
    check_combination(args)
    for flag, path in (("--out", args.out), ("--out-hardware", args.out_hardware)):
        if path:
            check_writable(flag, path)  # before any input is read or fitted
    if args.op_database:
        from .opdb_command import run_op_database

        return run_op_database(args)
    if not (args.microbench or args.measurements or args.a2a_table or args.vllm_bench):
        raise SpecError("calibrate", "inputs", "--measurements, --a2a-table, --vllm-bench, --op-database or "
                        "--microbench")
    result: dict = {}
    if args.microbench:
        result["microbench"] = _microbench(args)
        args.launch_s = result["microbench"]["launch_s"]  # host cost of one op feeds the host fit
    if args.measurements or args.a2a_table or args.vllm_bench:
        if not args.out:
            raise SpecError("calibrate", "--out", "a profile YAML path to write")
        prof, summary = build_profile(args)
        write_spec(prof, args.out, "profiles", header=f"# Fitted by `rackplan calibrate` on {io.utc_date()} (UTC); "
                                          "provenance and fit error (MAPE %) below.\n")
        result["profile"] = {"out": args.out, **summary}
    _print(result, args.json)
    return 0


def build_profile(args):
    """Read every input, fit, and return (profile, summary) without writing anything."""
    base = load_profile(args.base or _bench_base(args))
    name = args.name or (args.out.rsplit("/", 1)[-1].rsplit(".", 1)[0] if args.out else "fitted")
    inputs, extra, summary = [], {}, {}
    prof = base
    if args.measurements and args.host_sweep:
        prof, extra, summary = _from_host_sweep(args, base, name)
        inputs += [io.measurement_file(m) for m in args.measurements + args.host_prefill_measurements]
    elif args.measurements:
        prof, extra, summary = _from_measurements(args, base, name)
        inputs += [io.measurement_file(m) for m in args.measurements]
    if args.a2a_table:
        hw = load_hardware(args.hardware or (load_plan(args.plan).hardware if args.plan else "h800"))
        prof, a2a_extra = _from_tables(args.a2a_table, hw, prof, name)
        extra.update(a2a_extra)
        summary["a2a_max_error_pct"] = a2a_extra["a2a_fit"]["max_error_pct"]
        inputs += args.a2a_table
    if args.vllm_bench:
        base_ref = None if (args.measurements or args.a2a_table) else (args.base or _bench_base(args))
        prof, bench_extra, bench_summary = _from_vllm_bench(args, prof, name, base_ref)
        extra.update(bench_extra)
        summary.update(bench_summary)
        inputs += args.vllm_bench
    prov = io.provenance(inputs, **extra)
    return dataclasses.replace(prof, name=name, provenance=prov), summary


def _bench_base(args) -> str:
    """Default base: for a bench-only fit the profile the plan was priced with (its own, else its
    hardware's default), else datasheet."""
    if args.vllm_bench and args.plan and not (args.measurements or args.a2a_table):
        plan = load_plan(args.plan)
        return plan.profile or load_hardware(plan.hardware).default_profile
    return "datasheet"


def _from_vllm_bench(args, prof, name, base_ref):
    """Fit bench_fit.PARAMS to the bench runs on top of `prof`; base_ref names `prof` if it is a saved one."""
    from .bench_fit import PARAMS, fit, read_bench

    if not args.plan:
        raise SpecError("calibrate", "--plan", "the plan the vllm bench run served")
    plan = load_plan(args.plan)
    benches = [read_bench(p, plan) for p in args.vllm_bench]
    f = _with_status(lambda: fit(plan, benches, prof, name), len(benches))
    pct = lambda d: {k: round(v * 100, 2) for k, v in d.items()}  # noqa: E731
    params = {k: {"value": f.values[k], "identified": f.identified[k], "sd_log": round(f.sd[k], 4)}
              for k in PARAMS}
    extra = {"plan": plan.name, "plan_hash": plan_hash(plan), "vllm_bench_fit": {
        "base_profile": base_ref, "parameters": params, "error_before_pct": pct(f.before),
        "error_after_pct": pct(f.after), "simulations": f.sims,
        "benches": [{k: v for k, v in b.summary.items() if k != "flags"} for b in benches],
        "method": "each bench's requests replayed through the simulator; Gauss-Newton on log-parameters "
                  "(finite differences) with a log(3) prior around the base; identified = posterior sd < "
                  "prior sd / 3; per-phase scales are op_scale 'op/prefill' and 'op/decode' of every device op"}}
    fit_error = {**prof.fit_error, **{f"{BENCH_ERROR_PREFIX}{k}": abs(v) for k, v in pct(f.after).items()}}
    summary = {"base_profile": base_ref or prof.name,
               "vllm_bench": {k: f"{f.values[k]:.4g}" + ("" if f.identified[k] else " (not identified: base)")
                              for k in PARAMS},
               "error_before_pct": pct(f.before), "error_after_pct": pct(f.after)}
    return dataclasses.replace(f.profile, fit_error=fit_error), extra, summary


def _with_status(fn, benches: int):
    """Run a bench fit under a rich status line when stderr is a terminal."""
    import sys

    if not sys.stderr.isatty():
        return fn()
    from rich.console import Console

    with Console(stderr=True).status(f"fitting {benches} vllm bench run(s) through the simulator"):
        return fn()


def _from_measurements(args, base, name):
    from .fit import Fitter, fit_iteration, fit_loop_host, fit_prefill_intake, fit_profile, loop_steps
    from .samples import raw_steps, samples_of, split_holdout
    from .speed import normalise
    from .spread import step_spread

    if not args.plan:
        raise SpecError("calibrate", "--plan", "the plan the measurements ran")
    plan = load_plan(args.plan)
    records, speed_probe = normalise(io.read_runs(args.measurements, plan))  # at one reference speed (speed.py)
    raw = raw_steps(records, plan)
    samples = samples_of(raw)
    fit, held = split_holdout(samples, parse_holdout(args.holdout))
    if not held and not args.no_holdout:
        sizes = {r: sorted({s.size for s in samples if s.role == r}) for r in ("decode", "prefill")}
        raise SpecError("calibrate", "--holdout", "sizes that hold some measured steps out of the fit (measured: "
                        + "; ".join(f"{r} {v}" for r, v in sizes.items() if v) + "), or --no-holdout",
                        " ".join(args.holdout) or "none")
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    fx = Fitter(plan, model, hw, fit)
    prof = fit_profile(fx, base, name, getattr(args, "launch_s", None))
    iteration, loop = fit_iteration(records), fit_loop_host(records)
    if loop is not None:  # the loop's fixed part and its per-request terms, from the serving steps
        prof = dataclasses.replace(prof, host=dataclasses.replace(
            prof.host, schedule_step_s=loop[0], schedule_per_admit_s=loop[1], output_per_finish_s=loop[2]))
    elif iteration is not None:
        prof = dataclasses.replace(prof, host=dataclasses.replace(prof.host, schedule_step_s=_sig(iteration)))
    intake = fit_prefill_intake(records)
    if intake is not None:  # the prefill leader's per-request intake (routing, headers), from its serving steps
        prof = dataclasses.replace(prof, host=dataclasses.replace(prof.host, schedule_per_arrival_s=intake))
    fit_shapes = {(s.role, s.size) for s in fit}
    sd, corr, spread_info = step_spread([s for s in raw if s.serve or (s.role, s.size) in fit_shapes],
                                        lambda s: fx.step_seconds(prof, s.alone(hw)))
    prof = dataclasses.replace(prof, step_time_spread=sd, step_time_corr=corr)
    first = records[0]
    extra = {"plan": plan.name, "plan_hash": plan_hash(plan),
             "run_plan_hashes": sorted({r["plan_hash"] for r in records}), "device": first["device"],
             "run_versions": first["versions"],
             "speed_probe": speed_probe,
             "fit_sizes": {r: sorted({s.size for s in fit if s.role == r}) for r in ("decode", "prefill")},
             "held_out_sizes": {r: sorted({s.size for s in held if s.role == r}) for r in ("decode", "prefill")},
             "method": "per op: op_fixed x layers + op_scale x roofline (shared curves), soft-L1 relative "
                       "least squares on medians of per-run medians; a2a alpha + bytes/bw; host by step time",
             "note": "fit_error: MAPE % on the fit set; `rackplan validate` reports held-out error",
             "loop_host": {"method": "serving runs' decode-leader steps: loop record + host.exposed = "
                                     "schedule_step_s + schedule_per_admit_s x admitted + output_per_finish_s x "
                                     "finished, soft-L1 relative least squares (calibration/fit.py fit_loop_host)",
                           "steps": len(loop_steps(records))} if loop is not None else
                          {"method": "median loop record per step (fit_iteration)"} if iteration is not None else None,
             "prefill_intake": {"method": "serving runs' prefill-leader steps: loop record + host.exposed = fixed + "
                                          "schedule_per_arrival_s x admitted, soft-L1 relative least squares, the "
                                          "slope kept (calibration/fit.py fit_prefill_intake)",
                                "steps": len(loop_steps(records, "prefill"))} if intake is not None else None,
             "step_time_spread": {"method": "per kind, serving steps (>= 10) r = log(step / fitted price) less "
                                            "its median, else the fit set's sweep steps r = log(step / its shape's "
                                            "median); sd = (q90 - q10) / 2.563 of r, corr = lag-1 correlation of r "
                                            "within a run (calibration/spread.py)", **spread_info}}
    return prof, extra, {"fit_error": dict(prof.fit_error), "fit_steps": len(fit), "held_out_steps": len(held),
                         "step_time_spread": sd, "step_time_corr": corr}


def _from_host_sweep(args, base, name):
    """The base profile with its host block fitted from a host-loop sweep (calibration/host_fit.py)."""
    from .host_fit import MIN_STEPS, WARMUP_STEPS, HostPredictor, fit_loops, host_steps, run_probes

    paths = list(args.measurements) + list(args.host_prefill_measurements)
    records = []
    for i, m in enumerate(paths):
        records += [dict(r, _run=i) for r in io.read_measurements(m)]
    specs = sorted({(r["model"], r["hardware"]) for r in records})
    if len(specs) != 1:
        raise SpecError("--measurements", "model", "runs of one model on one hardware for --host-sweep", specs)
    model, hw = load_model(specs[0][0]), load_hardware(specs[0][1])
    steps = host_steps(records)
    if not steps:
        raise SpecError("--measurements", "host parts", "serving runs that record host.* parts per step")
    held = set().union(*parse_holdout(args.holdout).values()) if args.holdout else set()
    pre_runs = set(range(len(args.measurements), len(paths))) if args.host_prefill_measurements else None
    probes = run_probes(records) if args.host_probe else None
    dec, pre = fit_loops(HostPredictor(model, hw), steps, base.host, base.host_for("prefill"), held, pre_runs, probes)
    probe_ref = dec.probe_ref
    errs = {**dec.fit_error, **{f"prefill/{k}": v for k, v in pre.fit_error.items()}}
    held_errs = {**dec.held_error, **{f"prefill/{k}": v for k, v in pre.held_error.items()}}
    points = {**dec.points, **{f"prefill/{k}": v for k, v in pre.points.items()}}
    prof = dataclasses.replace(base, hardware=hw.name, host=dec.host, host_prefill=pre.host if pre.points else None,
                               fit_error={**base.fit_error, **errs})
    extra = {"hardware": hw.name, "host_fit": {
        "method": "per part and role: HostParams of sim/cost/host.py, soft-L1 relative least squares on medians of "
                  "per-run medians of the steps of one shape (role, DP size, draft depth, sequences on the busiest "
                  f"rank) with at least {MIN_STEPS} steps after each instance's first {WARMUP_STEPS} (its host "
                  "code cold) that do not follow an idle wait of their loop (cold again), each shape predicted "
                  "from its steps the same way; "
                  "each part's thread CPU time on the busiest rank (host.dp_sync: the collective's own work; "
                  "its wait for the other ranks, OS scheduling on the CPU executor, is not fitted)",
        "probe_ref_s": probe_ref, "probe_slopes": dec.slopes,
        "prefill_probe_ref_s": pre.probe_ref, "prefill_probe_slopes": pre.slopes,
        "probe": "each part but the DP wait scaled by (probe_ref_s / its run's CPU-speed probe) ** its slope "
                 "(executor/probe.py: the VM's run-to-run speed drift; the slope, 0-1.5, how much of the probe's "
                 "ratio the part follows over the fit set's runs), held-out shapes by their own runs' probes; "
                 "probe_ref_s is the runs' median probe, so the block is in this machine's seconds at its median "
                 "speed" if probe_ref else "none: the parts as measured (no --host-probe, or runs without it)",
        "prefill_runs": "the --host-prefill-measurements runs only" if args.host_prefill_measurements
                        else "the --measurements runs",
        "steps": len(steps), "fit_error_pct": errs, "held_out_error_pct": held_errs,
        "shapes_fit_held": {k: list(v) for k, v in points.items()}, "held_out_sizes": sorted(held),
        "kept_from_base": "launch_s, kernels_per_layer, graph_launch_s, dp_jitter, api_* (the CPU executor has "
                          "no API server)"}}
    summary = {"host_fit_error_pct": errs, "host_held_out_error_pct": held_errs, "steps": len(steps),
               "probe_ref_s": probe_ref}
    return prof, extra, summary


def _from_tables(paths, hw, prof, name):
    from .a2a import fit_a2a, read_points

    model = load_model("deepseek-v3")
    points = [p for path in paths for p in read_points(path, model)]
    fit = fit_a2a(points, hw, model, floor=True, prior=prof)
    kept = [e for e in prof.a2a if (e.kernel, e.link) not in {(f.kernel, f.link) for f in fit.entries}]
    entries = [dataclasses.replace(e, alpha_s=_sig(e.alpha_s), bw_eff=_sig(e.bw_eff)) for e in fit.entries]
    prof = dataclasses.replace(prof, a2a=tuple(kept + entries), hardware=hw.name)
    errs = {f"a2a.{r['kernel']}.ep{r['ep']}.{r['phase']}": 0.0 for r in fit.rows}
    for r in fit.rows:
        key = f"a2a.{r['kernel']}.ep{r['ep']}.{r['phase']}"
        errs[key] = round(max(errs[key], abs(r["err_linear"]) * 100), 2)
    floors = [{"kernel": k[0], "link": k[1], "phase": k[2], "ep": k[3], "floor_s": round(v, 9),
               **{f: getattr(e, f) for f in ("alpha_s", "bw_eff")}}
              for (k, v), e in zip(fit.floor_s.items(), fit.floor_entries)]
    extra = {"hardware": hw.name, "a2a_fit": {
        "method": "minimax relative error through sim.cost.alltoall.a2a_seconds (DeepSeek-V3 shapes, DEP-n)",
        "points": len(points), "max_error_pct": round(fit.max_error() * 100, 2),
        "max_error_with_floor_pct": round(fit.max_error("err_floor") * 100, 2),
        "floor_variant": floors,
        "floor_note": "proposed A2AParams.floor_s: t = max(floor_s, alpha_s + bytes/(bw*bw_eff))"}}
    prof = dataclasses.replace(prof, fit_error={**prof.fit_error, **errs})
    return prof, extra


def _sig(x: float) -> float:
    """Four significant digits: readable YAML, well under the fit's error."""
    return float(f"{x:.4g}")


def _microbench(args) -> dict:
    from . import microbench

    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():  # as `execute --device cuda` says it, before anything is measured
            raise SpecError("calibrate --microbench", "--device", "cpu (no CUDA device here: this torch "
                            f"{torch.__version__} {'has no CUDA' if torch.version.cuda is None else 'sees no GPU'})",
                            "cuda")
    meas = microbench.measure(args.device or "cpu")
    out = {k: (round(v, 9) if isinstance(v, float) else v) for k, v in meas.items()}
    if args.out_hardware:
        base = load_hardware(args.hardware or "cpu-local")
        hw, header = microbench.hardware_yaml(meas, base, io.utc_date())
        write_spec(hw, args.out_hardware, "hardware", header=header)
        out["out"] = args.out_hardware
    return out


def _print(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    for key, val in result.items():
        print(f"{key}:")
        val = dict(val) if isinstance(val, dict) else {}
        before, after = val.pop("error_before_pct", None), val.pop("error_after_pct", None)
        _print_tree(val, "  ")
        if before is not None:  # a bench fit: each statistic's error under the base profile and the fitted one
            print("  error % (simulated / measured - 1; each bench's requests replayed through the simulator):")
            print(f"    {'statistic':<20} {'base':>8} {'fitted':>8}")
            for stat in after:
                print(f"    {stat:<20} {before.get(stat, math.nan):>+8.2f} {after[stat]:>+8.2f}")


def _print_tree(val: dict, indent: str) -> None:
    """One 'key: value' line per leaf, nested mappings indented under their key (no Python reprs)."""
    for k, v in val.items():
        if isinstance(v, dict):
            print(f"{indent}{k}:")
            _print_tree(v, indent + "  ")
        else:
            print(f"{indent}{k}: {v}")


