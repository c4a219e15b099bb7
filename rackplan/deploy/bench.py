"""bench.sh and its request trace: `vllm bench serve` at the planned load with the plan's workload.

The requests are the ones the simulator draws for the plan (same workload, seed and planned rate,
sim/workload.py), written as a timed trace in the Mooncake JSONL form vLLM's `timed_trace` dataset
reads (timestamp in ms, input_length, output_length, hash_ids). Prompts are built from hash ids of
CHUNK tokens each: the first `cached` tokens of every request share ids (a common prefix, so the
prefix cache serves the planned hit rate) and the rest are unique. `--ignore-eos` makes every output
its planned length. The result JSON (`--save-result --save-detailed`) is what
`rackplan calibrate --vllm-bench` fits.
"""
from __future__ import annotations

import json

from rackplan.specs import Workload, plan_hash

from .engine import Context
from .scripts import checked, continued

CHUNK = 256  # tokens per trace hash id (--timed-trace-chunk-hash-size)
UNIQUE_IDS = 1_000_000  # hash ids at and above this are private to one request


def planned_workload(cx: Context) -> Workload:
    """The plan's workload at the request rate the planner verified (open-loop workloads)."""
    from rackplan.sim.simulator import with_rate

    rate = cx.plan.predicted.get("request_rate")
    if cx.workload.arrival.kind == "poisson" and rate:
        return with_rate(cx.workload, float(rate))
    return cx.workload


def trace_lines(cx: Context) -> list[str]:
    """One JSON line per request, in arrival order (closed-loop workloads: timestamps 0)."""
    import numpy as np

    from rackplan.sim.workload import make_requests

    reqs = make_requests(planned_workload(cx))
    nxt, out = UNIQUE_IDS, []
    for t, isl, osl, cached in zip(reqs.arrival_s, reqs.isl, reqs.osl, reqs.cached):
        n_all, n_shared = -(-int(isl) // CHUNK), int(cached) // CHUNK
        ids = list(range(n_shared)) + list(range(nxt, nxt + n_all - n_shared))
        nxt += n_all - n_shared
        ms = 0.0 if np.isnan(t) else round(float(t) * 1e3, 3)
        out.append(json.dumps({"timestamp": ms, "input_length": int(isl), "output_length": int(osl),
                               "hash_ids": ids}, separators=(",", ":")))
    return out


def _load_flags(cx: Context) -> list[str]:
    """Closed loop: the planned concurrency, every request sent at once. Open loop: each request at its
    own timestamp in bench_trace.jsonl (`--self-timed`, vllm/benchmarks/serve.py: "replaying traces
    faithfully based on their timestamps"; without it the bench draws its own Poisson arrivals)."""
    wl = planned_workload(cx)
    if wl.arrival.kind == "concurrency":
        return ["--max-concurrency", str(wl.arrival.concurrency), "--request-rate", "inf", "--no-self-timed"]
    return ["--self-timed"]


def _rate_metadata(cx: Context) -> list[str]:
    """The planned open-loop rate, recorded with the result (the trace's timestamps carry it)."""
    wl = planned_workload(cx)
    return [f"rackplan_request_rate={wl.arrival.rate:.6g}"] if wl.arrival.kind == "poisson" else []


def _tokenizer_flags(cx: Context) -> list[str]:
    """The family's tokenizer flags that `vllm bench serve` takes too (prompts are token ids)."""
    extra, out = list(cx.family.extra), []
    if "--trust-remote-code" in extra:
        out.append("--trust-remote-code")
    if "--tokenizer-mode" in extra:
        out += ["--tokenizer-mode", extra[extra.index("--tokenizer-mode") + 1]]
    return out


def bench_words(cx: Context, num_requests: int) -> list[str]:
    """The `vllm bench serve` words of bench.sh."""
    target = ["--backend", "openai", "--base-url", '"http://$ROUTER_HOST:$ROUTER_PORT"', "--endpoint",
              "/v1/completions", "--model", '"$MODEL"'] + _tokenizer_flags(cx)
    requests = ["--dataset-name", "timed_trace", "--dataset-path", '"$HERE/bench_trace.jsonl"',
                "--timed-trace-chunk-hash-size", str(CHUNK), "--timed-trace-sec-multiplier", "0.001",
                "--num-prompts", str(num_requests), "--ignore-eos"] + _load_flags(cx)
    result = ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
              "--metadata", f"rackplan_plan={cx.plan.name}", f"rackplan_plan_hash={plan_hash(cx.plan)}",
              f"rackplan_workload={cx.workload.name}", *_rate_metadata(cx), "--save-result", "--save-detailed",
              "--result-dir", '"$RESULTS"', "--result-filename", "bench.json", "--seed", str(cx.workload.seed)]
    return checked("vllm bench serve", ["vllm", "bench", "serve"] + target + requests + result)


def bench_script(cx: Context, num_requests: int) -> str:
    return "\n".join(["#!/usr/bin/env bash",
                      f"# Benchmark plan {cx.plan.name} at its planned load with workload {cx.workload.name} "
                      f"({num_requests} requests from bench_trace.jsonl).",
                      "# Run once router.sh is up; the detailed result JSON is what `rackplan calibrate "
                      "--vllm-bench` fits.",
                      "set -euo pipefail", 'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
                      'source "$HERE/env.sh"', 'RESULTS="${RESULTS:-$HERE/results}"', 'mkdir -p "$RESULTS"',
                      continued(bench_words(cx, num_requests), "  "),
                      'echo "result: $RESULTS/bench.json; fit it with: rackplan calibrate --vllm-bench '
                      '$RESULTS/bench.json --plan PLAN.yaml --out profile.yaml"', ""])
