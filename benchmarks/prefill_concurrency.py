"""Prefill-only throughput against concurrency: the vLLM GB300 R1 curves beside the simulator (issue 35 item 6).

The post's R1 prefill-only runs (benchmarks/cases/vllm-gb300-deepseek.yaml, r1-gb300-{tp2,ep2}-prefill-c*) are
`vllm bench serve --max-concurrency c` with ISL 2,048 and OSL 1: every request ends in its prefill step and its
replacement is sent then. A closed loop's response time per request is R(c) = c / X(c), X in requests/s.
Were the engine busy all the time, R(c) = c x S with S the seconds of engine work per request; what the
published curve adds beyond that, d(c) = R(c) - c x S, is time per round of the loop the engine spends idle or
on steps smaller than its budget. S is taken from the curve's own plateau (the median of X over c >= 128).

For each figure: published and simulated tok/s/GPU, their ratio, the simulated steps of the whole run (all
instance's steps; full TP2 steps carry 16 prompts, 63 for the 1,000; the EP2 instance steps its two engines
together, 4 prompts each, 125) and
d(c) published and simulated, in seconds per round.

Run:  python benchmarks/prefill_concurrency.py [--profile P]
"""
from __future__ import annotations

import argparse
import re
import statistics

from rackplan.accuracy.cases import load_cases, resolve
from rackplan.accuracy.command import DEFAULT, Profiles
from rackplan.accuracy.predict import rates_per_gpu
from rackplan.sim.simulator import simulate_specs

PATTERN = re.compile(r"^r1-gb300-(tp2|ep2)-prefill-c(\d+)$")
PLATEAU_FROM = 128  # concurrency from which the published curves are flat (the plateau S is read there)


def requests_per_s(tok_per_gpu: float, gpus: int, tokens_per_request: int) -> float:
    """Requests per second of a run whose total throughput is `tok_per_gpu` over `gpus` GPUs."""
    return tok_per_gpu * gpus / tokens_per_request


def idle_per_round(conc: int, rps: float, plateau_rps: float) -> float:
    """d(c) = R(c) - c x S: the response time beyond the engine's work, R = c / X and S = 1 / X_plateau."""
    return conc / rps - conc / plateau_rps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=DEFAULT, help="profile name (default: each hardware's default)")
    args = ap.parse_args()
    rows: dict[str, list] = {}
    for case in load_cases():
        m = PATTERN.match(case.id)
        if m:
            rows.setdefault(m.group(1), []).append((int(m.group(2)), case))
    profiles = Profiles()
    for layout, cases in sorted(rows.items(), reverse=True):
        cases.sort(key=lambda x: x[0])
        sides = [(c, case, resolve(case)) for c, case in cases]
        per_req = sides[0][2].workload.isl.value + sides[0][2].workload.osl.value
        gpus = sides[0][2].plan.gpus_used
        sims = []
        for _c, case, sc in sides:
            prof, _ = profiles.for_case(args.profile, sc.hw)
            res = simulate_specs(sc.scenario(prof), case.num_requests, 0)
            sims.append((rates_per_gpu(res.metrics, True)["total"], sum(res.steps.values())))
        pub_plateau = statistics.median(requests_per_s(case.published, gpus, per_req)
                                        for c, case, _ in sides if c >= PLATEAU_FROM)
        sim_plateau = statistics.median(requests_per_s(s[0], gpus, per_req)
                                        for (c, _, _), s in zip(sides, sims) if c >= PLATEAU_FROM)
        print(f"\n{layout.upper()} (R1 NVFP4, 2 x GB300, ISL {per_req - 1}, OSL 1), "
              f"profile {profiles.label(args.profile)}")
        print(f"{'c':>5} {'published':>10} {'simulated':>10} {'ratio':>6} {'sim steps':>9} {'d pub s':>8} "
              f"{'d sim s':>8}")
        for (c, case, _), (sim, steps) in zip(sides, sims):
            d_pub = idle_per_round(c, requests_per_s(case.published, gpus, per_req), pub_plateau)
            d_sim = idle_per_round(c, requests_per_s(sim, gpus, per_req), sim_plateau)
            print(f"{c:5d} {case.published:10,.0f} {sim:10,.0f} {sim / case.published:6.3f} {int(steps):9d} "
                  f"{d_pub:8.3f} {d_sim:8.3f}")


if __name__ == "__main__":
    main()
