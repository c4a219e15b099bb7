"""What step pricing costs in case (a), and so what any faster pricer can buy: the ceiling of a speed-up.

Case (a) of benchmarks/sim_speed.py (`rackplan simulate`'s default rack, the CLI's measured profile
gb300-nvl72-vllm) is simulated in process --requests requests, cold (every step-price cache empty, as a
simulation starts), then again with the step-price caches (sim/pricer.py StepPricer) of the prefill
pricer, of the decode pricers, or of both, filled beforehand with every key the cold run priced. A cached
step's price is a function of its key alone and the run draws the same random numbers whether a step hits
or misses, so the runs give the same figures (checked) and differ only by the pricing of the misses: the
difference is what those misses cost, and cold / warm is the most that any cheaper pricing of them, exact
or not, compiled or vectorised, can speed the simulation up. Alternating, best of --reps, CPU seconds
(time.process_time).

--profile then profiles the all-filled run (cProfile, CPU timer): its self time by where it runs (the serving
policy, SimPy, the simulator's modules) and its top functions: where the simulation goes besides pricing.

    python benchmarks/pricing_share.py [--requests 20000] [--reps 3] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import time

from rackplan.sim import pricer
from rackplan.sim.simulator import simulate
from rackplan.specs import load_plan, load_profile, load_workload

_shared = pricer.StepPricer.shared.__func__  # type: ignore[attr-defined]
FILL: dict[tuple, dict] = {}  # (role, with draws) -> the step cache a pricer starts with
SEEN: dict[tuple, pricer.StepPricer] = {}  # (role, with draws) -> the last run's pricer


def _filled(cls, cx, rng=None):
    """StepPricer.shared, its step cache filled from FILL (and kept in SEEN)."""
    pr = _shared(cls, cx, rng)
    key = (cx.layout.role, rng is not None)
    pr._cache.update(FILL.get(key, {}))
    SEEN[key] = pr
    return pr


def run(plan, wl, prof, n: int, fill: dict) -> tuple[float, dict]:
    """(CPU s, metrics) of one simulation whose step caches start from `fill`."""
    pricer._kept.clear()  # no step model or cache of an earlier run
    FILL.clear()
    FILL.update(fill)
    SEEN.clear()
    gc.collect()
    t0 = time.process_time()
    res = simulate(plan, wl, prof, num_requests=n)
    return time.process_time() - t0, res.metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="then profile the all-filled run")
    args = ap.parse_args()
    pricer.StepPricer.shared = classmethod(_filled)  # type: ignore[method-assign]
    plan = load_plan("v41-flash-gb300-nvl72")
    wl, prof = load_workload(plan.workload), load_profile("gb300-nvl72-vllm")
    run(plan, wl, prof, 200, {})  # imports, imbalance points
    _, ref = run(plan, wl, prof, args.requests, {})
    full = {k: dict(v._cache) for k, v in SEEN.items()}
    cases = {"cold": {}, "prefill cache filled": {k: v for k, v in full.items() if k[0] == "prefill"},
             "decode caches filled": {k: v for k, v in full.items() if k[0] != "prefill"}, "all filled": full}
    best = dict.fromkeys(cases, float("inf"))
    same = True
    for _ in range(args.reps):
        for name, fill in cases.items():
            cpu, metrics = run(plan, wl, prof, args.requests, fill)
            best[name] = min(best[name], cpu)
            same = same and repr(metrics) == repr(ref)  # (repr: a NaN figure equals itself)
    n = args.requests
    keys = ", ".join(f"{role}{' (draws)' if draws else ''} {len(c):,}" for (role, draws), c in sorted(full.items()))
    print(f"case (a) in process, {n:,} requests, best of {args.reps} (load average "
          f"{os.getloadavg()[0]:.1f}); keys priced by the cold run: {keys}")
    print(f"{'step caches':<24}{'CPU s':>8}{'us/request':>12}{'cold / this':>13}")
    for name in cases:
        print(f"{name:<24}{best[name]:>8.2f}{best[name] / n * 1e6:>12.1f}{best['cold'] / best[name]:>12.2f}x")
    print(f"same metrics in every run: {same}")
    if args.profile:
        profile_filled(plan, wl, prof, n, full)


def _where(path: str, name: str) -> str:
    """The group a profiled function's self time is counted in."""
    if "/sim/cost/" in path or path.endswith("/sim/pricer.py"):
        return "pricing (cache hits)"
    for part, group in (("/simpy/", "simpy"), ("/rackplan/policy/", "rackplan/policy")):
        if part in path:
            return group
    if "/sim/" in path:
        return "sim/" + path.split("/sim/")[-1]
    return f"C: {name}" if path == "~" else path.rsplit("/", 1)[-1]


def profile_filled(plan, wl, prof, n: int, full: dict) -> None:
    """cProfile (CPU timer) of the run with every step cache filled: self time by group, top functions."""
    pricer._kept.clear()
    FILL.clear()
    FILL.update(full)
    gc.collect()
    prof_ = cProfile.Profile(time.process_time)
    prof_.enable()
    simulate(plan, wl, prof, num_requests=n)
    prof_.disable()
    stats = pstats.Stats(prof_).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())
    groups: dict[str, float] = {}
    for (path, _, name), (_, _, tt, _, _) in stats.items():
        groups[_where(path, name)] = groups.get(_where(path, name), 0.0) + tt
    print(f"\nall filled, profiled (self time {total:.2f} s; the profiler inflates small Python calls)")
    for group, t in sorted(groups.items(), key=lambda x: -x[1])[:12]:
        print(f"{t / total:7.1%}  {group}")
    print("top functions (self time, calls)")
    top = sorted(((v[2], v[1], k) for k, v in stats.items()), key=lambda x: -x[0])[:12]
    for tt, calls, (path, line, name) in top:
        print(f"{tt / total:7.1%} {calls:>9}  {path.rsplit('/', 2)[-2:][-1]}:{line}({name})")


if __name__ == "__main__":
    main()
