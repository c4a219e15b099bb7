"""The requests a `vllm bench serve` run without per-request data sent, as a Workload the simulator
replays (a --save-detailed run is replayed request by request at its own send times: bench_fit.replay).

Lengths: every request gets the bench's mean input and output lengths (total_input_tokens and
total_output_tokens over completed), and the workload's description says so. Load: closed loop at
max_concurrency when the bench capped it, else Poisson at request_rate (vLLM's burstiness 1), else
(request_rate inf, no cap) every request at once. No prefix-cache hits are assumed (bench prompts
are distinct); routing skew is the plan's workload's.
"""
from __future__ import annotations

import math
from pathlib import Path

from rackplan.specs import Arrival, LengthDist, Plan, SpecError, Workload, load_workload


def bench_workload(bench: dict, plan: Plan) -> Workload:
    """The bench's requests at its mean lengths (calibration/io.read_vllm_bench's summary `bench`), at
    its load."""
    src = bench["source"]
    n = int(bench.get("completed") or 0)
    if n < 1:
        raise SpecError(src, "completed", "at least one completed request", bench.get("completed"))
    mean_in, mean_out = (_mean(bench, key, n) for key in ("total_input_tokens", "total_output_tokens"))
    lengths = dict(isl=LengthDist(kind="fixed", value=mean_in), osl=LengthDist(kind="fixed", value=mean_out))
    said = (f"mean lengths of {n} requests: {mean_in} in / {mean_out} out (no --save-detailed "
            "input_lens/output_lens)")
    arrival, load = _arrival(bench, n)
    skew = load_workload(plan.workload).routing_skew if plan.workload else 0.0
    return Workload(name=f"vllm-bench {Path(src).name}", arrival=arrival, num_requests=n, routing_skew=skew,
                    description=f"{said}; {load}", **lengths)


def _mean(bench: dict, key: str, n: int) -> int:
    total = bench.get(key)
    if isinstance(total, bool) or not isinstance(total, (int, float)) or not math.isfinite(total) or total < n:
        raise SpecError(bench["source"], key, f"a token count >= completed ({n})", total)
    return max(round(total / n), 1)


def _arrival(bench: dict, n: int) -> tuple[Arrival, str]:
    """The bench's load as an Arrival, and how it was read."""
    rate, cap, burst = bench.get("request_rate"), bench.get("max_concurrency"), bench.get("burstiness")
    if rate in (None, "inf"):
        rate = math.inf
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise SpecError(bench["source"], "request_rate", "a positive number or 'inf'", rate)
    if cap:
        note = f" (its request_rate {rate:g} req/s not modelled)" if math.isfinite(rate) else ""
        return Arrival(kind="concurrency", concurrency=int(cap)), f"closed loop at max_concurrency {cap}{note}"
    if math.isfinite(rate):
        note = f" (burstiness {burst:g} simulated as 1)" if burst not in (None, 1, 1.0) else ""
        return Arrival(kind="poisson", rate=float(rate)), f"Poisson at request_rate {rate:g} req/s{note}"
    return Arrival(kind="concurrency", concurrency=n), f"all {n} requests at once (request_rate inf)"
