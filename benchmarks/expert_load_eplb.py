"""What EPLB redundant experts buy a plan's decode instance under each expert load, side by side.

Prices the decode step of a plan's first decode layout (the step pricer the planner and the
simulator use, sim/cost/step.py) at `--batch` sequences per DP rank and the workload's mean decode
context, with no redundant experts and with one per EP rank (what the search tries,
sim/search/space.py), under: uniform routing, the model family's published expert load
(rackplan/data/expert_load.yaml), power laws of --skew, and any recorded count files (--counts).
Prints the busiest EP rank's expert load over the mean and the milliseconds per output token.
Analytic (the cost model at the mean imbalance), not a simulation.

Run:  python benchmarks/expert_load_eplb.py [--plan v41-flash-gb300-nvl72] [--decode DEP16] [--batch 410]
"""
from __future__ import annotations

import argparse
import dataclasses

from rackplan.sim.expert_load import describe, from_counts, published
from rackplan.sim.search.eplb_note import decode_figures
from rackplan.sim.search.estimate import traffic_of
from rackplan.specs import EPLBConfig, load_hardware, load_model, load_plan, load_profile, load_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default="v41-flash-gb300-nvl72")
    ap.add_argument("--dp", type=int, default=16, help="decode DEP size to price (default: 16, the seed plan's)")
    ap.add_argument("--batch", type=float, default=410.0, help="sequences per rank (default: the seed plan's 410)")
    ap.add_argument("--skew", type=float, nargs="*", default=[0.6, 1.2])
    ap.add_argument("--counts", nargs="*", default=[], help="recorded count files (expert_counts.jsonl, .npy, ...)")
    args = ap.parse_args()
    plan = load_plan(args.plan)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    prof = load_profile(plan.profile or hw.default_profile)
    tr = traffic_of(load_workload(plan.workload), model)
    base = dataclasses.replace(plan.decode[0], dp=args.dp, eplb=EPLBConfig())
    lays = (base, dataclasses.replace(base, eplb=EPLBConfig(redundant_experts=args.dp, policy="hierarchical")))
    loads = [0.0, published(model)] + list(args.skew) + [from_counts(c) for c in args.counts]
    print(f"{model.name} on {hw.name}, decode DEP{args.dp} ({base.speculation.num_tokens if base.speculation else 0} "
          f"draft tokens), {args.batch:g} sequences per rank, mean context {tr.ctx_mean:,.0f} tokens; "
          f"profile {prof.name}")
    print(f"{'expert load':<60} {'max/mean':>9} {'+EPLB':>7} {'ms/tok':>8} {'+EPLB':>8} {'EPLB':>7}")
    for load in loads:
        (f0, t0), (f1, t1) = (decode_figures(model, hw, prof, lay, load, args.batch, tr.ctx_mean) for lay in lays)
        name = describe(load).split(" (max/mean")[0][:60]
        print(f"{name:<60} {f0:9.3f} {f1:7.3f} {t0 * 1e3:8.2f} {t1 * 1e3:8.2f} {t1 / t0 - 1:+7.1%}")


if __name__ == "__main__":
    main()
