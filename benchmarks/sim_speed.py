"""Simulator speed: simulated requests per CPU-second (one core), two scenarios side by side.

(a) the default rack scenario (`rackplan simulate` with no arguments);
(b) one DEP64 decode instance (DeepSeek-V3 on GB200 NVL72) kept full at 256 sequences per rank,
    ISL 1000 / OSL 1000, closed loop at 64 x 256 concurrency, fed by a DEP8 prefill instance.
Target (issue 2): >= 20,000 simulated requests per CPU-second.
Run: python benchmarks/sim_speed.py [--requests-b N]
"""
from __future__ import annotations

import argparse
import time

from rackplan.sim.simulator import simulate
from rackplan.specs import Arrival, Layout, LengthDist, Plan, Workload, load_plan, load_profile, load_workload


def timed(plan, wl, prof, n=None):
    t0, w0 = time.process_time(), time.perf_counter()
    res = simulate(plan, wl, prof, num_requests=n)
    return res, time.process_time() - t0, time.perf_counter() - w0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests-b", type=int, default=60000)
    args = ap.parse_args()
    prof = load_profile("datasheet")
    plan_a = load_plan("v41-flash-gb300-nvl72")
    wl_a = load_workload(plan_a.workload)
    plan_b = Plan(name="dep64-decode", model="deepseek-v3", hardware="gb200-nvl72", num_gpus=72,
                  prefill=(Layout(role="prefill", dp=8, max_tokens_per_step=16384),),
                  decode=(Layout(role="decode", dp=64, max_batch_per_rank=256, dbo=True),))
    wl_b = Workload(name="1k1k", arrival=Arrival(kind="concurrency", concurrency=64 * 256),
                    isl=LengthDist(kind="fixed", value=1000), osl=LengthDist(kind="fixed", value=1000),
                    num_requests=args.requests_b)
    print(f"{'scenario':<44}{'requests':>9}{'sim s':>9}{'CPU s':>8}{'req/CPU-s':>11}{'decode steps':>14}")
    for name, plan, wl, n in (("(a) default rack: " + plan_a.summary, plan_a, wl_a, None),
                              ("(b) DEP64 decode, 256/rank, 1k/1k", plan_b, wl_b, None)):
        res, cpu, _ = timed(plan, wl, prof, n)
        m = res.metrics
        dsteps = sum(v for k, v in res.steps.items() if k.startswith("decode"))
        print(f"{name[:43]:<44}{int(m['num_requests']):>9}{m['duration_s']:>9.1f}{cpu:>8.2f}"
              f"{m['num_requests'] / cpu:>11,.0f}{dsteps:>14,}")


if __name__ == "__main__":
    main()
