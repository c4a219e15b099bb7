"""Prefix caches from block hashes: cost to the simulator and what the routers make of them.

A seeded synthetic Mooncake-style trace (JSONL, hash_ids of 512-token blocks): 64 system prompts
with Zipf(1.1) popularity, 2-24 blocks each; conversations of 1-6 turns, each turn appending 1-6
blocks of its own to the conversation so far; Poisson arrivals. The seed plan (4 x DEP2 prefill +
DEP64 decode, DeepSeek-V4.1-Flash on GB300 NVL72) simulates it with the hashes under each router,
and once without them (the same lengths as plain JSONL) at the flat prefix_hit_rate the hashed
least_loaded run measured: the CPU-time ratio of the two is the cost of the caches.
Run: python benchmarks/prefix_cache_speed.py [--requests N] [--rate R] [--repeats K]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from rackplan.sim.simulator import simulate
from rackplan.specs import Arrival, LengthDist, Workload, load_plan, load_profile

BLOCK = 512  # tokens per hash_ids block, as in the published Mooncake traces


def synth_trace(n: int, rate: float, seed: int = 0) -> list[dict]:
    """Mooncake-style records: shared system prompts, growing conversations, Poisson arrivals."""
    rng = np.random.default_rng(seed)
    next_id = iter(range(10**9))
    systems = [[next(next_id) for _ in range(rng.integers(2, 25))] for _ in range(64)]
    pop = np.arange(1, 65, dtype=float) ** -1.1
    pop /= pop.sum()
    t, out, live = 0.0, [], []  # live: (blocks so far, turns left)
    while len(out) < n:
        t += rng.exponential(1.0 / rate)
        if live and rng.random() < 0.6:  # a follow-up turn of an open conversation
            k = int(rng.integers(len(live)))
            blocks, left = live[k]
        else:
            blocks, left = list(systems[rng.choice(64, p=pop)]), int(rng.integers(1, 7))
            live.append((blocks, left))
            k = len(live) - 1
        blocks = blocks + [next(next_id) for _ in range(rng.integers(1, 7))]
        live[k] = (blocks, left - 1)
        if left - 1 <= 0:
            live.pop(k)
        isl = len(blocks) * BLOCK - int(rng.integers(0, BLOCK))
        out.append({"timestamp": round(t * 1000.0, 3), "input_length": isl,
                    "output_length": int(max(1, rng.lognormal(np.log(300), 0.6))), "hash_ids": blocks})
    return out


def timed(plan, wl, prof, repeats: int):
    cpu = []
    for _ in range(repeats):
        t0 = time.process_time()
        res = simulate(plan, wl, prof)
        cpu.append(time.process_time() - t0)
    return res, min(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--rate", type=float, default=250.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    prof, base = load_profile("datasheet"), load_plan("v41-flash-gb300-nvl72")
    recs = synth_trace(args.requests, args.rate)
    with tempfile.TemporaryDirectory() as tmp:
        hashed, plain = Path(tmp) / "trace.jsonl", Path(tmp) / "plain.jsonl"
        hashed.write_text("".join(json.dumps(r) + "\n" for r in recs))
        plain.write_text("".join(json.dumps({"timestamp": r["timestamp"] / 1000.0, "input_length": r["input_length"],
                                             "output_length": r["output_length"]}) + "\n" for r in recs))
        wl = Workload(name="synthetic-mooncake", arrival=Arrival(kind="trace"), isl=LengthDist(kind="trace"),
                      osl=LengthDist(kind="trace"), trace=str(hashed), num_requests=args.requests)
        simulate(base, wl, prof, num_requests=300)  # warm-up (imports, first-touch caches): not timed
        rows = []
        for router in ("least_loaded", "round_robin", "prefix_aware"):
            plan = dataclasses.replace(base, router=router)
            rows.append((f"hash_ids, {router}", *timed(plan, wl, prof, args.repeats)))
        flat_rate = rows[0][1].metrics["prefix_hit_rate"]
        flat = dataclasses.replace(wl, trace=str(plain), prefix_hit_rate=round(flat_rate, 4))
        rows.append((f"flat rate {flat_rate:.3f}, least_loaded", *timed(base, flat, prof, args.repeats)))
    isl = np.array([r["input_length"] for r in recs])
    print(f"{args.requests} requests at {args.rate:g} req/s, mean input {isl.mean():,.0f} tokens, "
          f"{sum(len(r['hash_ids']) for r in recs):,} blocks; CPU s = min of {args.repeats} runs")
    print(f"{'run':<36}{'hit rate':>9}{'TTFT p50':>10}{'TTFT p90':>10}{'prefill busy':>13}{'CPU s':>8}{'ratio':>7}")
    for name, res, cpu in rows:
        m = res.metrics
        busy = np.mean([u for k, u in res.utilisation.items() if k.startswith("prefill")])
        print(f"{name:<36}{m['prefix_hit_rate']:>9.3f}{m['ttft_p50_s']:>10.3f}{m['ttft_p90_s']:>10.3f}"
              f"{busy:>13.1%}{cpu:>8.2f}{cpu / rows[-1][2]:>7.2f}")


if __name__ == "__main__":
    main()
