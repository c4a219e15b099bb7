"""The engine's CPU-overhead fixes on the seed scenario: where host work is exposed, and each knob.

1. The seed plan's decode step (DEP64 on GB300, measured gb300-nvl72-vllm profile, the workload's
   mean context) over the batch per rank: device seconds, host work (every part), what the step
   exposes with async scheduling (the plan's setting) and without, and the API server's time.
2. `rackplan whatif` rows, one knob at a time against the unchanged plan, simulated at the plan's
   load: TTFT/TPOT p90, tokens/s per GPU and per user, and the decode step's split (device,
   exposed host, API-server wait) at --decode-batch. Writes whatif.csv, whatif.png (changes) and
   whatif_step.png (stacked split) to --out.

    python benchmarks/host_whatif.py --out runs/host_whatif [--decode-batch 128]
"""
from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace

from rackplan.sim.search import whatif
from rackplan.sim.search.whatif_command import baseline_specs, study, table, write_outputs
from rackplan.specs import load_plan

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
KNOBS = [  # one study each; the baseline is the plan as written (async scheduling, CUDA graphs, vLLM defaults)
    ("host.async_scheduling", [False]),
    ("host.scheduler_scale", [0.5]),
    ("host.prepare_scale", [0.0]),
    ("host.api_servers", [1, 4]),
    ("host.stream_interval", [10, 50]),
    ("host.cuda_graphs", [False]),
    ("cpu.overhead_scale", [0.5, 2.0]),
]
SYNC_HALF = [("host.async_scheduling", [False]), ("cpu.overhead_scale", [0.5])]


def exposure(base: whatif.Specs, plan) -> None:
    sync = whatif.apply(base, "host.async_scheduling", False)
    print(f"{'batch/rank':>10s} {'GPU ms':>8s} {'host ms':>8s} {'host/GPU':>8s} {'exposed async':>13s} "
          f"{'exposed sync':>12s} {'API ms':>7s}")
    for b in BATCHES:
        a, s = whatif.step_split(base, plan, b), whatif.step_split(sync, sync.plan, b)
        host = _host_total(base, plan, b)
        print(f"{b:10d} {a['gpu_ms']:8.2f} {host:8.2f} {host / a['gpu_ms']:8.2f} {a['host_exposed_ms']:13.2f} "
              f"{s['host_exposed_ms']:12.2f} {_api(base, plan, b):7.2f}")


def _cost(specs: whatif.Specs, plan, b: int):
    from rackplan.sim.cost.step import CostContext, decode_step
    from rackplan.sim.search.estimate import traffic_of

    tr = traffic_of(specs.workload)
    return decode_step(CostContext(specs.model, specs.hw, plan.decode[0], specs.profile, tr.skew), b, b * tr.ctx_mean)


def _host_total(specs, plan, b: int) -> float:
    return _cost(specs, plan, b).host.total_s * 1e3


def _api(specs, plan, b: int) -> float:
    return _cost(specs, plan, b).host.api_s * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default="v41-flash-gb300-nvl72")
    ap.add_argument("--decode-batch", type=int, default=None, help="default: the plan's cap per rank")
    ap.add_argument("--out", default="runs/host_whatif")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    plan = load_plan(args.plan)
    base = baseline_specs(SimpleNamespace(workload=None, rate=None, profile=None, profile_any_hardware=False), plan)
    print(f"{plan.name}: decode {plan.decode[0].tag}, profile {base.profile.name}\n")
    exposure(base, plan)
    rows, baseline = [], None
    for sets in [[k] for k in KNOBS] + [SYNC_HALF]:
        baseline, part = study(plan, base, sets, workers=args.workers, batch=args.decode_batch)
        rows += part
    print()
    print(table(baseline, rows))
    write_outputs(args.out, baseline, rows)
    print(f"\nwrote {args.out}/whatif.csv, whatif.png, whatif_step.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
