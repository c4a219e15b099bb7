"""What a prefill price-cache miss costs: the prefill steps of case (a) priced afresh, and a checksum of their periods.

Case (a) of benchmarks/sim_speed.py (`rackplan simulate`'s default rack, the CLI's measured profile
gb300-nvl72-vllm) misses the step-price cache on nearly every prefill step (sim/pricer.py: the step's key is
already each rank's sufficient statistics, tokens, sequences and attention pairs, in 2% buckets; prompt steps
rarely repeat). This script runs --requests of case (a), takes the prefill pricer's keys (the step cache of
the last run, StepPricer.shared), and prices them --reps times, each with a fresh StepModel (its rank, GEMM
and EP-group memos empty, as in a simulation), printing the best CPU seconds, microseconds per key and a
SHA-256 of the periods (bit for bit: two checkouts that price alike print the same digest).
--baseline PYTHON runs the same with another checkout's interpreter, alternating, side by side.

    python benchmarks/price_misses.py [--requests 20000] [--reps 5] [--baseline OTHER/.venv/bin/python]

A CPU figure on a machine shared with other jobs moves by +-20% from run to run; the instruction count is
steadier: `valgrind --tool=callgrind --callgrind-out-file=/dev/null python benchmarks/price_misses.py --reps 1`
(and --reps 0 for the same process without the pricing: the difference is the pricing's).
"""
from __future__ import annotations

import argparse
import hashlib
import struct
import subprocess
import sys
import time
from pathlib import Path


def measure(requests: int, reps: int) -> tuple[int, float, str]:
    """(prefill keys, best CPU seconds of pricing them all with a fresh step model, digest of the periods)."""
    import numpy as np

    from rackplan.sim import pricer
    from rackplan.sim.simulator import simulate
    from rackplan.specs import load_plan, load_profile, load_workload

    plan = load_plan("v41-flash-gb300-nvl72")
    simulate(plan, load_workload(plan.workload), load_profile("gb300-nvl72-vllm"), num_requests=requests)
    # the prefill pricer's entry (the one layout with role prefill): its step model and its step cache
    (model, cache, _), = [v for v in pricer._kept.values() if v[0].cx.layout.role == "prefill"]
    keys = list(cache)
    cx = model.cx
    best, periods = float("inf"), []
    for _ in range(reps):
        pr = pricer.StepPricer(cx, np.random.default_rng(0), pricer.StepModel(cx))  # fresh memos
        t0 = time.process_time()
        periods = [pr._period(pricer._merged([(pricer._rank_work(*rk), 1) for rk in key])) for key in keys]
        best = min(best, time.process_time() - t0)
    flat = [x for p in periods for x in (p if isinstance(p, tuple) else (p,))]
    return len(keys), best, hashlib.sha256(struct.pack(f"{len(flat)}d", *flat)).hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", help="python of another checkout, run alternately with this one")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: print one result line
    args = ap.parse_args()
    if args.one or not args.baseline:
        n, cpu, digest = measure(args.requests, args.reps)
        if args.reps:
            print(f"{n} {cpu:.4f} {digest}" if args.one else
                  f"{n} prefill keys: best {cpu:.3f} CPU-s, {cpu / n * 1e6:.1f} us/key, periods sha256 {digest}")
        return
    rows = {}
    for _ in range(args.reps):  # alternate the two checkouts, one priced run each, best of --reps
        for side, python in (("this", sys.executable), ("baseline", args.baseline)):
            out = subprocess.run([python, str(Path(__file__).resolve()), "--one", "--reps", "1",
                                  "--requests", str(args.requests)], check=True, capture_output=True, text=True)
            n, cpu, digest = out.stdout.split()
            prev = rows.get(side)
            rows[side] = (int(n), min(float(cpu), prev[1]) if prev else float(cpu), digest)
    print(f"{'checkout':<10}{'keys':>7}{'best CPU s':>12}{'us/key':>8}  periods sha256")
    for side, (n, cpu, digest) in rows.items():
        print(f"{side:<10}{n:>7}{cpu:>12.3f}{cpu / n * 1e6:>8.1f}  {digest}")
    (n, a, da), (_, b, db) = rows["this"], rows["baseline"]
    print(f"speed-up {b / a:.2f}x; periods {'bit-identical' if da == db else 'DIFFER'}")


if __name__ == "__main__":
    main()
