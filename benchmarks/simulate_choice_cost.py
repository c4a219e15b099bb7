"""CPU seconds of what a bare `rackplan` does: the simulation of the seed plan and, beside it, the planner's
analytic estimate of the layout it would choose (sim/commands/simulate.py planner_choice), in one process,
each `--repeat` times (later repeats find the step-price memos warm).

Run:  python benchmarks/simulate_choice_cost.py [--plan v41-flash-gb300-nvl72] [--repeat 2]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the CLI runs them (rackplan/cli.py SERIAL_BLAS)

from rackplan.sim.commands.simulate import planner_choice  # noqa: E402
from rackplan.sim.simulator import MAX_STEADY, PRECISION, max_requests, simulate_steady  # noqa: E402
from rackplan.specs import Scenario, load_hardware, load_model, load_plan, load_workload, resolve_profile  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="simulate_choice_cost.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", default="v41-flash-gb300-nvl72")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)
    plan = load_plan(args.plan)
    model, hw, wl = load_model(plan.model), load_hardware(plan.hardware), load_workload(plan.workload)
    prof = resolve_profile(None, plan.profile, plan.hardware)
    print(f"{'run':>4} {'simulate s CPU':>15} {'planner estimate s CPU':>23}  planner's choice")
    for i in range(args.repeat):
        t = time.process_time()
        simulate_steady(Scenario(plan, model, hw, wl, prof), precision=PRECISION,
                        most=min(MAX_STEADY, max_requests(4.0)))
        sim = time.process_time() - t
        t = time.process_time()
        c = planner_choice(Scenario(plan, model, hw, wl, prof))
        est = time.process_time() - t
        what = c.get("error") or f"{c['summary']} at {c['figure']:,.0f} {c['unit']} (same layout: {c['same_layout']})"
        print(f"{i + 1:>4} {sim:15.2f} {est:23.2f}  {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
