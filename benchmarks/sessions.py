"""Multi-turn sessions: prefix-cache hit rate and per-turn latency by router and by KV cache size.

Simulated (sim/sessions.py): the same seeded sessions served by DeepSeek-V3 on H200 (4 x DEP8 prefill,
2 x DEP8 decode, 48 GPUs) under each router, with the prefill ranks' full KV cache and with it cut by
--gpu-memory-utilization; then tiny-moe on the CPU rig (the test's case). Prints one row per
(router, cache): session hit rate (share of prompt tokens), reuse (share of the context earlier turns
had prefilled), TTFT p50/p90 of later turns, and the simulation's wall time.

    .venv/bin/python benchmarks/sessions.py [--sessions-rate R] [--turns N]
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from rackplan.sim.deployment import validate_plan
from rackplan.sim.simulator import simulate_specs
from rackplan.specs import (
    Arrival,
    Layout,
    LengthDist,
    Plan,
    Scenario,
    Workload,
    load_hardware,
    load_model,
    load_plan,
    load_profile,
)
from rackplan.specs.session import Sessions

ROUTERS = ("least_loaded", "round_robin", "prefix_aware", "session_affine")


def agentic(rate: float, n: int) -> Workload:
    """Agentic chat sessions: first prompt lognormal mean 6k, 2-12 turns, each adding a tool result or
    user message of mean 800 tokens after a mean 10 s think/tool time, outputs mean 400."""
    return Workload(name="agentic-sessions", arrival=Arrival(kind="poisson", rate=rate),
                    isl=LengthDist(kind="lognormal", mean=6000, sigma=0.6, max=32768),
                    osl=LengthDist(kind="lognormal", mean=400, sigma=0.6, max=2048), num_requests=n,
                    sessions=Sessions(turns=LengthDist(kind="uniform", low=2, high=12),
                                      followup=LengthDist(kind="lognormal", mean=800, sigma=0.8, max=8192),
                                      think_s=10.0))


def h200_plan(router: str, util: float | None) -> Plan:
    pre = Layout(role="prefill", dp=8, replicas=4, max_tokens_per_step=8192, gpu_memory_utilization=util)
    dec = Layout(role="decode", dp=8, replicas=2, max_batch_per_rank=64)
    return Plan(name="h200-sessions", model="deepseek-v3", hardware="h200-sxm", num_gpus=48, router=router,
                prefill=(pre,), decode=(dec,))


def tiny_plan(router: str, util: float | None) -> Plan:
    plan = load_plan("tiny-disagg")
    return dataclasses.replace(plan, router=router,
                               prefill=(dataclasses.replace(plan.prefill[0], gpu_memory_utilization=util),))


def tiny_chat() -> Workload:
    return Workload(name="tiny-sessions", arrival=Arrival(kind="poisson", rate=2.0),
                    isl=LengthDist(kind="uniform", low=200, high=400), osl=LengthDist(kind="uniform", low=8, high=32),
                    num_requests=300, sessions=Sessions(turns=LengthDist(kind="uniform", low=2, high=8),
                                                        followup=LengthDist(kind="uniform", low=20, high=80),
                                                        think_s=2.0))


def row(make_plan, router, util, wl, prof):
    plan = make_plan(router, util)
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    cap = validate_plan(plan, model, hw)["prefill[0]"] * plan.prefill[0].dp
    t0 = time.perf_counter()
    res = simulate_specs(Scenario(plan, model, hw, wl, prof))
    wall = time.perf_counter() - t0
    s = res.sessions
    later = [t for t in s["per_turn"] if t["turn"] > 1]
    w = np.array([t["requests"] for t in later], dtype=float)
    p50 = float(np.average([t["ttft_p50_s"] for t in later], weights=w))
    p90 = float(np.average([t["ttft_p90_s"] for t in later], weights=w))
    print(f"{router:15s} {cap / 1e3:10,.0f}k {s['hit_rate']:8.1%} {s['reuse_hit_rate']:8.1%} {p50:10.3f} {p90:10.3f} "
          f"{res.metrics['ttft_p90_s']:10.3f} {wall:7.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions-rate", type=float, default=1.5, help="session starts per second (H200 case)")
    ap.add_argument("--turns", type=int, default=3000, help="turns simulated (H200 case)")
    args = ap.parse_args()
    head = f"{'router':15s} {'KV tok/inst':>11s} {'hit':>8s} {'reuse':>8s} {'TTFT50 t>1':>10s} {'TTFT90 t>1':>10s} " \
           f"{'TTFT90 all':>10s} {'wall s':>7s}"
    print(f"DeepSeek-V3 on H200, 4 x DEP8 prefill + 2 x DEP8 decode; {args.sessions_rate} sessions/s, "
          f"{args.turns} turns (simulated, datasheet profile h200-sxm-vllm)")
    print(head)
    prof = load_profile("h200-sxm-vllm")
    for util in (None, 0.75):
        for router in ROUTERS:
            row(h200_plan, router, util, agentic(args.sessions_rate, args.turns), prof)
    print("\ntiny-moe on the CPU rig (tests/integration/test_sessions_sim.py's case)")
    print(head)
    for util in (None, 0.005, 0.004):
        for router in ROUTERS:
            row(tiny_plan, router, util, tiny_chat(), load_profile("cpu-local"))


if __name__ == "__main__":
    main()
