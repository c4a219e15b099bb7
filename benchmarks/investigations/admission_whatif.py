"""What-if: vLLM V1's KV admission (blocks as tokens arrive, recompute preemption) against the
simulator's (isl + osl reserved at admission, never preempted), on one aggregated instance of an
accuracy case, both priced step by step by the cost model (sim/cost/step.py `step_cost`).

The simulator admits a request only with room for all its tokens (sim/decode.py, accuracy3); vLLM
(v1/core/sched/scheduler.py) admits on the prompt's blocks, allocates a 64-token block whenever a
running request needs one, and when none is free preempts the last running request (frees its
blocks, sends it to the front of the queue to be recomputed from scratch, prompt and tokens so far)
and admits nothing more that step. This script runs one closed loop (the case's concurrency and
request count, fixed ISL / OSL, FCFS, the layout's token budget per step, 1,024 sequences at most)
under both rules at a given KV capacity, for bounding how much the simulator's rule misses where a
case is KV-bound. It is a what-if beside the simulator, not a second simulator: no arrivals, one DP
rank, no host time, no prefix cache.

Run:  python benchmarks/investigations/admission_whatif.py --case v32-gb300-mixed-tp4-fp8 --kv-tokens 1008846 \
          [--override '{"model_overrides": {...}}']
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: accuracy_sweep, the tool it reuses

from accuracy_sweep import overridden  # noqa: E402

from rackplan.accuracy.cases import load_cases, resolve  # noqa: E402
from rackplan.sim.cost.batch import RankWork, Step  # noqa: E402
from rackplan.sim.cost.step import CostContext, step_cost  # noqa: E402
from rackplan.specs import SpecError, load_profile  # noqa: E402

BLOCK = 64  # tokens per KV block (vLLM's FlashMLA sparse block size)
MAX_SEQS = 1024  # vLLM's default max_num_seqs on >= 70 GiB GPUs


class Loop:
    """One closed loop of `requests` prompts, `concurrency` in flight, under `rule` ("reserve" or "vllm")."""

    def __init__(self, isl: int, osl: int, kv_tokens: int, budget: int, rule: str):
        self.isl, self.osl, self.budget, self.rule = isl, osl, budget, rule
        self.free = kv_tokens // BLOCK
        self.reqs: list[dict] = []
        self.waiting: list[int] = []
        self.running: list[int] = []
        self.preemptions = self.recomputed = 0

    def add(self) -> None:
        self.reqs.append({"done": 0, "gen": 0, "blocks": 0})
        self.waiting.append(len(self.reqs) - 1)

    def _need(self, r: dict) -> int:
        return self.isl + r["gen"] - r["done"]  # tokens to compute before the next token is sampled

    def _blocks(self, r: dict, new: int, admitting: bool) -> int:
        if self.rule == "reserve":
            return math.ceil((self.isl + self.osl) / BLOCK) if admitting and not r["blocks"] else 0
        return math.ceil((r["done"] + new) / BLOCK) - r["blocks"]

    def _preempt_for(self, rid: int, blocks: int) -> bool:
        """Free blocks by preempting the last running requests; False when `rid` itself went."""
        while blocks > self.free:
            victim = self.running.pop()
            v = self.reqs[victim]
            self.free += v["blocks"]
            self.recomputed += v["done"]
            v["blocks"] = v["done"] = 0
            self.waiting.insert(0, victim)
            self.preemptions += 1
            if victim == rid:
                return False
        return True

    def schedule(self) -> list[tuple[int, int]]:
        """(request, tokens) of one step: running requests first, then the queue's head if nothing was preempted."""
        left, out, i, preempted = self.budget, [], 0, self.preemptions
        while i < len(self.running) and left > 0:
            rid = self.running[i]
            r = self.reqs[rid]
            new = min(self._need(r), left)
            blocks = self._blocks(r, new, False)
            if not self._preempt_for(rid, blocks):
                break
            self.free -= blocks
            r["blocks"] += blocks
            out.append((rid, new))
            left -= new
            i += 1
        while self.preemptions == preempted and self.waiting and left > 0 and len(self.running) < MAX_SEQS:
            rid = self.waiting[0]
            r = self.reqs[rid]
            new = min(self._need(r), left)
            blocks = self._blocks(r, new, True)
            if blocks > self.free:
                break
            self.free -= blocks
            r["blocks"] += blocks
            self.running.append(self.waiting.pop(0))
            out.append((rid, new))
            left -= new
        return out

    def work(self, sched: list[tuple[int, int]]) -> RankWork:
        """The step as the cost model takes it: decoding sequences (one new token) and prefill chunks."""
        dec = [rid for rid, n in sched if self.reqs[rid]["gen"] and self._need(self.reqs[rid]) == 1]
        chunks = tuple((1.0, float(n), float(self.reqs[rid]["done"])) for rid, n in sched if rid not in dec)
        return RankWork(float(len(dec)), float(sum(self.reqs[rid]["done"] for rid in dec)), chunks)

    def advance(self, sched: list[tuple[int, int]]) -> tuple[int, int]:
        """Apply a step: tokens computed, one sampled per request whose prompt is done; (sampled, finished)."""
        sampled = finished = 0
        for rid, n in sched:
            r = self.reqs[rid]
            r["done"] += n
            if self._need(r) == 0:
                r["gen"] += 1
                sampled += 1
                if r["gen"] >= self.osl:
                    self.running.remove(rid)
                    self.free += r["blocks"]
                    r["blocks"] = 0
                    finished += 1
        return sampled, finished


def run(case, kv_tokens: int, rule: str) -> dict:
    """Output tok/s per GPU over the whole run, steps and preemptions of the case's closed loop under `rule`."""
    sc = resolve(case)
    lay = sc.plan.aggregated[0]
    cx = CostContext(sc.model, sc.hw, lay, load_profile(sc.hw.default_profile))
    isl, osl = int(sc.workload.isl.expected), int(sc.workload.osl.expected)
    loop = Loop(isl, osl, kv_tokens, lay.max_tokens_per_step, rule)
    total, conc = case.num_requests, int(sc.workload.arrival.concurrency)
    for _ in range(min(conc, total)):
        loop.add()
    seconds = out = done = steps = 0
    while done < total:
        sched = loop.schedule()
        seconds += step_cost(cx, Step.uniform(lay.dp, loop.work(sched))).seconds
        sampled, finished = loop.advance(sched)
        out, done, steps = out + sampled, done + finished, steps + 1
        for _ in range(finished):
            if len(loop.reqs) < total:
                loop.add()
    return {"rule": rule, "out_tps_per_gpu": out / seconds / lay.total_gpus, "seconds": seconds, "steps": steps,
            "preemptions": loop.preemptions, "recomputed_tokens": loop.recomputed}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="admission_whatif.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--case", required=True, help="a simulate case with one aggregated instance and fixed ISL / OSL")
    p.add_argument("--kv-tokens", type=int, required=True, help="KV capacity of the instance in tokens")
    p.add_argument("--override", default="{}", help="JSON mapping of case fields (as accuracy_sweep.py)")
    p.add_argument("--requests", type=int, help="requests (default: the case's num_requests)")
    args = p.parse_args(argv)
    try:
        cases = [c for c in load_cases() if c.id == args.case]
        if not cases or not cases[0].plan.get("aggregated"):
            raise SpecError("", "--case", "the id of a case with an aggregated instance", args.case)
        case = overridden(cases[0], json.loads(args.override))
        if args.requests:
            case = replace(case, num_requests=args.requests)
    except (SpecError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.case}, KV capacity {args.kv_tokens:,} tokens, concurrency "
          f"{case.workload['arrival']['concurrency']}, {case.num_requests} requests")
    for rule in ("reserve", "vllm"):
        r = run(case, args.kv_tokens, rule)
        print(f"  {rule:8s} {r['out_tps_per_gpu']:8,.0f} output tok/s/GPU over {r['seconds']:7.1f} s, "
              f"{r['steps']:,} steps, {r['preemptions']} preemptions ({r['recomputed_tokens']:,} tokens recomputed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
