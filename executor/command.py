"""Run a plan's layouts for real (gloo on CPU, NCCL on GPU) and write measurements.jsonl.

Benchmark mode: every prefill (decode) instance shape of the plan runs prefill (decode) steps at
its token budget (batch) per rank, with its TP / DEP shape, EPLB placement and speculation
(context lengths from the workload). Serving mode (--workload W): W's requests
(sim.workload.make_requests, W's seed) arrive on the wall clock and go through chunked prefill ->
KV hand-off -> continuous-batching decode with per-request TTFT/TPOT/E2E records: every prefill
and decode replica on its own ranks with its own process groups, KV sent point-to-point
(disagg.py), or, for a `colocated: true` plan, prefill and decode time-sharing the same ranks
(serve.py). DEP instances with more ranks than the machine are replayed at one rank's exact
shapes (records say what was measured and what was modelled). Under torchrun the same command
runs one rank per process (RANK / WORLD_SIZE from the environment). Test hook:
RACKPLAN_EXEC_FAULT=raise:R|kill:R.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from rackplan.args import non_negative_float, non_negative_int, positive_float, positive_int, probability, refuse_unused

RUN_FILES = ("measurements.jsonl", "expert_counts.jsonl", "ran.json")  # what a run writes into --out
DEFAULT_STEPS = 5  # timed benchmark steps per instance when --steps is not given


def add_arguments(p) -> None:
    p.add_argument("--plan", required=True, help="plan YAML (path or name under configs/plans)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: gloo ranks; cuda: NCCL (default: cpu)")
    p.add_argument("--steps", type=positive_int, help=f"benchmark mode: timed steps per instance (after --warmup; "
                   f"not used in serving mode; default: {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=non_negative_int, default=1,
                   help="untimed steps before the timed ones (default: 1)")
    p.add_argument("--step-gap", type=non_negative_float, default=0.0, metavar="S",
                   help="idle seconds before each benchmark step, as a lightly loaded instance waits for "
                   "arrivals between steps (cold caches make such steps slower); default 0")
    p.add_argument("--workload", help="serving mode: run this workload's requests (path or name under "
                   "configs/workloads) through prefill -> KV hand-off -> decode")
    p.add_argument("--requests", type=positive_int, help="serving mode: at most this many requests (default: the "
                   "workload's num_requests)")
    p.add_argument("--paced", action="store_true", help="serving mode, open loop, one prefill instance: the "
                   "requests of one arrival instant (a burst) arrive together the moment the prefill instance has "
                   "started every earlier request, not on the wall clock: the same steps on a fast or a slow host, "
                   "back to back (benchmarks/host_sweep.py's prefill part)")
    p.add_argument("--out", required=True, help="output folder for measurements.jsonl (serving mode also "
                   "writes expert_counts.jsonl)")
    p.add_argument("--ranks", type=positive_int,
                   help="world size (default: the largest that the plan and machine allow)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of weights, batches and routing (default: 0)")
    p.add_argument("--timeout", type=positive_float, default=120.0,
                   help="seconds before the run is killed (default: 120)")
    p.add_argument("--max-dense-layers", type=positive_int, help="run at most this many dense layers (replays)")
    p.add_argument("--max-moe-layers", type=positive_int, help="run at most this many MoE layers (replays)")
    p.add_argument("--skip-prefill", action="store_true", help="benchmark mode: run only the decode instances")
    p.add_argument("--skip-decode", action="store_true", help="benchmark mode: run only the prefill instances")
    p.add_argument("--model", help="run the plan's layouts on this model's shapes instead of the plan's model "
                   "(e.g. tiny-moe for a rack plan on CPU; a drafter comes from the plan's model if this one "
                   "has none)")
    p.add_argument("--expert-counts", help="EPLB placement from this recorded expert_counts.jsonl instead of "
                   "the workload's routing skew")
    p.add_argument("--acceptance-rate", type=probability, help="speculation: probability each draft token is kept "
                   "(default: the rate giving the plan's acceptance_length; random weights accept nothing)")
    p.add_argument("--no-cuda-graphs", action="store_true", help="CUDA benchmark mode: skip the CUDA-graph decode "
                   "timing")
    p.add_argument("--no-fp8", action="store_true", help="CUDA: keep every weight in bf16 (default: the spec's "
                   "8-bit or narrower weights run as FP8 through torch._scaled_mm on sm89+)")
    p.add_argument("--force", action="store_true", help="replace an --out folder that holds an earlier run")
    p.add_argument("--timings", action="store_true", help="add the run's wall time to the --json summary")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")


def default_world(plan, device: str, serving: bool) -> int:
    """Ranks to start. Serving: every instance's ranks (no replays; replicas that do not fit are
    dropped). Benchmark: the largest instance, capped by the machine's GPUs (CPU: its cores) for
    DEP instances, which are replayed beyond that; a TP instance always runs on real ranks."""
    import torch

    from .topology import benchmark_instances, max_ranks, serving_instances, world_size
    if serving:
        return world_size(serving_instances(plan, max_ranks(device)))
    insts = benchmark_instances(plan)
    have = torch.cuda.device_count() if device == "cuda" else (os.cpu_count() or 1)
    dep = max(min(i.layout.gpus, have) for i in insts)
    tp = max((i.layout.gpus for i in insts if i.layout.tp > 1), default=1)
    return max(1, dep, tp)


def run(args) -> int:
    plan = load_plan_checked(args)
    cfg = _config(args, plan)
    out = Path(args.out)
    t0 = time.perf_counter()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        records = _run_torchrun(cfg)
        if records is None:
            return 0
    else:
        from .launch import RunFailed, launch
        world = args.ranks or default_world(plan, args.device, bool(args.workload))
        try:
            records = launch(cfg, world)
        except RunFailed as exc:
            print(f"rackplan execute: {exc}", file=sys.stderr)
            return 1
    from .fields import plan_record
    ran = plan_record(plan, args.device, bool(args.workload))
    return _report(records, out, time.perf_counter() - t0, args.json, args.timings, args.force, ran)


def load_plan_checked(args):
    """The plan, with every argument and the whole plan checked before any rank starts
    (check_plan), then this machine: a CUDA device for --device cuda, host memory for CPU ranks."""
    plan = check_plan(args, fields=False)  # the fields last: a full-size plan on CPU first hears of --model
    from rackplan.specs import SpecError, load_model

    from .topology import benchmark_instances, skipped
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise SpecError("execute", "--device", "cpu (no CUDA device here)", "cuda")
    elif not args.workload:  # serving mode starts every instance's ranks: sized by its own checks
        from .hostmem import check_host_memory
        runs = load_model(args.model or plan.model)
        run = [i for i in benchmark_instances(plan) if not skipped(i, args.skip_prefill, args.skip_decode)]
        world = args.ranks or default_world(plan, "cpu", False)
        check_host_memory(runs, run, world, args.max_dense_layers, args.max_moe_layers)
    check_fields(plan, args)
    return plan


def check_plan(args, fields: bool = True):
    """The plan, with every argument and the whole plan checked, whatever machine runs it: the
    simulator's plan checks (HBM fit, experts over EP ranks), TP widths of the model that runs,
    --ranks against the plan's instances, the output folder; with `fields`, the plan fields the executor
    would not run (check_fields)."""
    from rackplan.outputs import prepare_folder
    from rackplan.sim.deployment import validate_plan
    from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_workload
    prepare_folder(args.out, "--out", args.force, owned=RUN_FILES)
    plan = load_plan(args.plan)
    validate_plan(plan, load_model(plan.model), load_hardware(plan.hardware))
    runs = load_model(args.model) if args.model else load_model(plan.model)  # an unknown model fails here
    if args.model:  # the plan's layouts on --model's shapes must fit the plan's hardware too (else ranks time out)
        try:
            validate_plan(plan, runs, load_hardware(plan.hardware))
        except SpecError as exc:
            raise SpecError(f"execute --model {args.model}", exc.field, exc.expected) from None
    from .topology import benchmark_instances, skipped
    from .tp import check_shardable
    insts = benchmark_instances(plan)
    for inst in insts:
        lay = inst.layout
        check_shardable(runs, lay.tp, lay.gpus // lay.ep_size, f"model {runs.name} ({inst.name})")
    _check_mode_flags(plan, args)
    if args.workload:
        _check_serving(plan, load_workload(args.workload), args)
    elif args.ranks is not None:
        most = max(i.layout.gpus for i in insts)
        if args.ranks > most:
            raise SpecError("execute", "--ranks", f"at most {most}, the largest instance of plan {plan.name}",
                            args.ranks)
        for inst in insts:
            if inst.layout.tp > 1 and inst.layout.gpus > args.ranks and not skipped(inst, args.skip_prefill,
                                                                                   args.skip_decode):
                raise SpecError("execute", "--ranks", f"at least {inst.layout.gpus} for the TP instance "
                                f"{inst.name} (a TP instance is not replayed)", args.ranks)
    if args.expert_counts:
        from rackplan.sim.routing import read_expert_trace
        read_expert_trace(args.expert_counts)  # a missing or corrupt trace fails here, not in every rank
    if fields:
        check_fields(plan, args)
    return plan


def check_fields(plan, args) -> None:
    """Plan fields the executor would not run on this device and mode, and serving replicas that do
    not fit: refused naming the field (executor/fields.py, docs/plan_fields.md)."""
    from .fields import check_plan_fields, check_replicas
    check_plan_fields(plan, args.device, bool(args.workload), str(args.plan))
    if args.workload:  # every serving replica runs on its own ranks, or the run is refused
        from .topology import max_ranks
        check_replicas(plan, str(args.plan), max_ranks(args.device))


def _check_mode_flags(plan, args) -> None:
    """A flag given where it does nothing is an error: serving-mode flags without --workload,
    benchmark-mode flags with it, both roles skipped, an acceptance rate with no speculation."""
    if args.workload:
        refuse_unused("execute", {"--skip-prefill": args.skip_prefill, "--skip-decode": args.skip_decode,
                                  "--step-gap": args.step_gap or None, "--steps": args.steps,
                                  "--no-cuda-graphs": args.no_cuda_graphs},
                      "benchmark mode (no --workload; serving runs every instance as its requests arrive)")
    else:
        refuse_unused("execute", {"--requests": args.requests, "--paced": args.paced}, "serving mode (--workload W)")
        if args.skip_prefill:
            refuse_unused("execute", {"--skip-decode": args.skip_decode},
                          "at most one of --skip-prefill / --skip-decode (both leave nothing to run)")
    if args.device == "cpu":
        refuse_unused("execute", {"--no-cuda-graphs": args.no_cuda_graphs, "--no-fp8": args.no_fp8},
                      "--device cuda (CPU ranks run neither CUDA graphs nor FP8 weights)")
    if all(lay.speculation is None for lay in plan.prefill + plan.decode + plan.aggregated):
        refuse_unused("execute", {"--acceptance-rate": args.acceptance_rate},
                      f"a plan with speculation (plan {plan.name} has none)")


def _check_serving(plan, workload, args) -> None:
    """What serving mode cannot run, as one line naming the field (before any rank starts)."""
    from rackplan.specs import SpecError

    from .topology import max_ranks, serving_instances, world_size
    if workload.sessions is not None:
        raise SpecError(workload.name, "sessions", "unset for execute (the executor replays independent requests; "
                        "multi-turn sessions are simulated only: rackplan simulate)")
    if workload.arrival.kind == "trace" or "trace" in (workload.isl.kind, workload.osl.kind):
        from rackplan.sim.traces import load_trace
        load_trace(workload)  # a missing or malformed trace fails here, not in every rank
    if args.paced:
        if workload.arrival.kind == "concurrency":
            raise SpecError("execute", "--paced", "an open-loop workload (trace or poisson arrivals; a closed loop "
                            "is paced by its finishes)", workload.arrival.kind)
        fronts = sum(lay.replicas for lay in plan.prefill)
        if plan.colocated or not plan.disaggregated or fronts != 1:
            raise SpecError("execute", "--paced", "a disaggregated plan with one prefill instance (the instance "
                            "that paces the arrivals)", f"{fronts} prefill instances" if fronts != 1 else "colocated")
    if plan.colocated or not plan.disaggregated:
        from .serve import check_plan
        check_plan(plan, str(args.plan))  # the time-shared engine: one instance per pool, no TP / PP / speculation
    from rackplan.sim.deployment import check_requests_fit
    from rackplan.sim.workload import make_requests
    from rackplan.specs import load_hardware, load_model
    check_requests_fit(plan, load_model(plan.model), load_hardware(plan.hardware), workload,  # one that never fits
                       make_requests(workload, args.requests))  # a rank's KV blocks is refused, not waited for
    need = world_size(serving_instances(plan, max_ranks(args.device)))
    from .topology import torchrun_world
    if torchrun_world() not in (None, need):
        raise SpecError("execute", "WORLD_SIZE", f"{need} under torchrun in serving mode (every instance's ranks of "
                        f"plan {plan.name}: --nnodes x --nproc-per-node)", torchrun_world())
    if args.ranks is not None and args.ranks != need:
        raise SpecError("execute", "--ranks", f"{need} in serving mode (every instance's ranks, no replays)",
                        args.ranks)


def _config(args, plan):
    from .runner import RunConfig
    cores = None
    if args.workload and args.device == "cpu":
        from .topology import cpu_cores, max_ranks, serving_instances
        insts = serving_instances(plan, max_ranks("cpu"))
        cores = tuple(cpu_cores(insts, default_world(plan, "cpu", True)))
    return RunConfig(plan=str(args.plan), device=args.device, steps=args.steps or DEFAULT_STEPS, warmup=args.warmup,
                     workload=args.workload, serve=bool(args.workload), requests=args.requests,
                     seed=args.seed, timeout_s=args.timeout,
                     max_dense=args.max_dense_layers, max_moe=args.max_moe_layers,
                     cuda_graphs=not args.no_cuda_graphs, skip_prefill=args.skip_prefill,
                     skip_decode=args.skip_decode,
                     fault=os.environ.get("RACKPLAN_EXEC_FAULT"), model=args.model,
                     expert_counts=args.expert_counts, acceptance_rate=args.acceptance_rate, cores=cores,
                     fp8=not args.no_fp8, step_gap_s=args.step_gap, paced=args.paced)


def _run_torchrun(cfg):
    """One rank of a torchrun job (one or several hosts); rank 0 gets the records, the others None.
    Pinned as the local launcher pins its ranks (launch.pin_rank), by its rank on this host."""
    import torch.distributed as dist

    from .launch import pin_rank
    from .parallel import init_from_env
    from .runner import run_rank
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
    single_host = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])) == int(os.environ["WORLD_SIZE"])
    pin_rank(cfg, rank if single_host else None, local)
    rank, world = init_from_env("nccl" if cfg.device == "cuda" else "gloo", cfg.timeout_s)
    records = run_rank(cfg, rank, world)
    dist.destroy_process_group()
    return records if rank == 0 else None


def _report(records: list[dict], out: Path, wall_s: float, as_json: bool, timings: bool = False,
            force: bool = False, ran: dict | None = None) -> int:
    from rackplan.outputs import Outputs

    from .records import summary_table, write_jsonl
    from .schema import read_measurements
    trace = [r for r in records if r.get("kind") == "expert_counts"]
    records = [r for r in records if r.get("kind") != "expert_counts"]
    path = out / "measurements.jsonl"
    with Outputs() as staged:  # the run folder appears whole (measurements + expert counts) or not at all
        folder = staged.folder(out, replace=force)
        write_jsonl(records, folder / path.name)
        if trace:
            write_jsonl(trace, folder / "expert_counts.jsonl")
        if ran is not None:  # what ran of the plan (executor/fields.py)
            (folder / "ran.json").write_text(json.dumps(ran, indent=1) + "\n")
        read_measurements(folder / path.name)  # the schema check calibration will run
    if as_json:
        summary = {"out": str(path), "records": len(records)}
        if timings:
            summary["wall_s"] = round(wall_s, 3)
        reqs = [r for r in records if r["op"] == "request"]
        if reqs:
            import numpy as np
            summary["requests"] = len(reqs)
            for key in ("ttft_s", "tpot_s", "e2e_s"):
                vals = [r[key] for r in reqs]
                summary[key[:-2] + "_p50_s"] = float(np.percentile(vals, 50))
                summary[key[:-2] + "_p90_s"] = float(np.percentile(vals, 90))
        print(json.dumps(summary))
    else:
        print(summary_table(records))
        print(f"{len(records)} records -> {path}")
        if timings:
            print(f"timings: {wall_s:.1f} s wall", file=sys.stderr)
    return 0
