"""One decode step of a plan's decode layout, op by op, at several NVLink (scale-up) bandwidths.

Prices the step as the planner and the simulator do (sim/search/estimate.Pricer.decode) with the hardware's
`scaleup_bw` replaced, so the ops a link what-if moves (moe.dispatch, moe.combine) show next to those it does
not, at the workload's mean decode context. E.g. usertrial3's 16 x B200 Qwen3-235B-A22B plan (benchmarks/RESULTS.md):

    rackplan plan --model qwen3-235b-a22b --hardware b200 --gpus 16 --workload isl4k-osl1k --ttft-p90 2s \
        --tpot-p90 50ms --out q/plan.yaml
    python benchmarks/link_ops.py --plan q/plan.yaml [--batch 64] [--gbps 450 900 1800]
"""
from __future__ import annotations

import argparse
import dataclasses

from rackplan.sim.search.estimate import Pricer, traffic_of
from rackplan.specs import load_hardware, load_model, load_plan, load_profile, load_workload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="plan YAML with a decode layout (e.g. what `rackplan plan` wrote)")
    p.add_argument("--batch", type=float, default=64.0, help="sequences per decode rank")
    p.add_argument("--gbps", type=float, nargs="+", default=[450.0, 900.0, 1800.0], help="NVLink GB/s, one way")
    a = p.parse_args()
    plan = load_plan(a.plan)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    prof = load_profile(plan.profile or hw.default_profile)
    tr = traffic_of(load_workload(plan.workload or "isl4k-osl1k"))
    lay = (plan.decode + plan.aggregated)[0]
    costs = [Pricer(model, dataclasses.replace(hw, scaleup_bw=g * 1e9), prof, tr.skew).decode(lay, a.batch, tr.ctx_mean)
             for g in a.gbps]
    ops = sorted(costs[0].breakdown(), key=lambda k: -abs(costs[0].breakdown()[k]))
    print(f"{plan.model} on {plan.hardware}, {lay.tag} decode at {a.batch:g} sequences per rank, context "
          f"{tr.ctx_mean:.0f}, profile {prof.name} (analytic estimate, the simulator's step pricing)")
    print("| op | " + " | ".join(f"{g:g} GB/s" for g in a.gbps) + " |\n|---|" + "---:|" * len(a.gbps))
    for op in ops:
        print(f"| {op} | " + " | ".join(f"{c.breakdown().get(op, 0.0) * 1e3:.2f}" for c in costs) + " |")
    print("| step | " + " | ".join(f"{c.seconds * 1e3:.2f}" for c in costs) + " |")


if __name__ == "__main__":
    main()
