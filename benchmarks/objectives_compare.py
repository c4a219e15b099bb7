"""Do the cost and power objectives choose another plan than throughput? Plan a scenario once (the
three objectives share the same at-capacity verification), then let each objective choose among the
verified front points, and print the choices side by side with their tokens/s/GPU, $/M output
tokens and output tokens/s per MW on the GPU budget (sim/search/economy.py).

    python benchmarks/objectives_compare.py [--case seed-80|h200-40]
"""
from __future__ import annotations

import argparse
import dataclasses

from rackplan.sim.search import economy, planner
from rackplan.specs import SLO, load_hardware, load_model, load_workload, resolve_profile

CASES = {  # (model, hardware, GPU budget, workload, TTFT p90 s, TPOT p90 s)
    "seed-80": ("deepseek-v4.1-flash", "gb300-nvl72", 80, "agentic-chat", 2.0, 0.05),
    "h200-40": ("deepseek-v3", "h200-sxm", 40, "isl4k-osl1k", 2.0, 0.05),
}


def run_case(name: str) -> None:
    model, hw_name, gpus, wl, ttft, tpot = CASES[name]
    hw = load_hardware(hw_name)
    req = planner.Request(load_model(model), hw, resolve_profile(None, None, hw), load_workload(wl), gpus,
                          SLO(ttft, tpot), model, hw_name, wl, hw.default_profile, workers=2)
    res = planner.plan(req)
    print(f"== {name}: {model} on {gpus} x {hw_name}, {wl}; {sum(v.passed for v in res.verified)} front points "
          f"verified")
    print(f"{'objective':11s} {'deployment':60s} {'GPUs':>4s} {'tok/s/GPU':>9s} {'$/M out (budget)':>16s} "
          f"{'tok/s/MW (budget)':>17s}")
    for obj in ("throughput", "cost", "power"):
        r = dataclasses.replace(req, objective=obj)
        _row(obj, r, planner.choose(r, res.verified))
    for v in (v for v in res.verified if v.passed):  # every verified point, for the record
        _row("(verified)", req, v)


def _row(what: str, req, v) -> None:
    b = economy.budget_of(req, v)
    print(f"{what:11s} {v.cand.summary:60s} {v.cand.gpus:4d} {v.tps_gpu:9,.0f} ${b.usd_per_m_output:15,.3f} "
          f"{b.output_tps_per_mw:17,.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    for name in ap.parse_args().case or sorted(CASES):
        run_case(name)


if __name__ == "__main__":
    main()
