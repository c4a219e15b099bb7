"""Request generation: arrival times and token lengths from a Workload spec (seeded), or a trace.

Traces are read as published: CSV with a header holding timestamp / context tokens / generated
tokens columns (Azure LLM inference trace: TIMESTAMP as a datetime, ContextTokens,
GeneratedTokens), or JSONL with timestamp (milliseconds, Mooncake trace), input_length,
output_length.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from rackplan.specs import LengthDist, SpecError, Workload


@dataclass(frozen=True)
class Requests:
    """Requests to simulate. arrival_s is NaN for closed-loop workloads (issued on completion)."""

    arrival_s: np.ndarray  # [N] seconds
    isl: np.ndarray  # [N] prompt tokens
    osl: np.ndarray  # [N] output tokens
    cached: np.ndarray  # [N] prompt tokens served from the prefix cache

    def __len__(self) -> int:
        return len(self.isl)


def _sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    if dist.kind == "fixed":
        out = np.full(n, dist.value)
    elif dist.kind == "uniform":
        out = rng.integers(dist.low, dist.high + 1, size=n)
    else:  # lognormal with the given mean: mu = ln(mean) - sigma^2 / 2
        mu = np.log(dist.mean) - dist.sigma ** 2 / 2.0
        out = np.rint(rng.lognormal(mu, dist.sigma, size=n))
    out = np.maximum(out, 1)
    if dist.max is not None:
        out = np.minimum(out, dist.max)
    return out.astype(np.int64)


def _parse_time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.strip()[:26]).timestamp()


def read_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival seconds from the first request, input lengths, output lengths) of a trace file."""
    path = Path(path)
    if not path.is_file():
        raise SpecError("", "trace", "an existing trace file (CSV or JSONL)", str(path))
    times, isl, osl = [], [], []
    try:
        if path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    times.append(float(rec["timestamp"]) / 1000.0)
                    isl.append(int(rec["input_length"]))
                    osl.append(int(rec["output_length"]))
        else:
            with path.open(newline="") as fh:
                for row in csv.DictReader(fh):
                    low = {k.strip().lower(): v for k, v in row.items()}
                    times.append(_parse_time(low["timestamp"]))
                    isl.append(int(low.get("contexttokens") or low["context_tokens"]))
                    osl.append(int(low.get("generatedtokens") or low["generated_tokens"]))
    except (KeyError, ValueError, json.JSONDecodeError) as exc:
        raise SpecError(str(path), "trace", "timestamp, context/input and generated/output columns",
                        str(exc)) from None
    if not times:
        raise SpecError(str(path), "trace", "at least one request")
    t = np.asarray(times)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    return t, np.asarray(isl)[order], np.maximum(np.asarray(osl)[order], 1)


def make_requests(wl: Workload, num_requests: int | None = None, seed: int | None = None) -> Requests:
    """Draw the workload's requests deterministically from `seed` (default: the workload's)."""
    n = num_requests or wl.num_requests
    rng = np.random.default_rng(wl.seed if seed is None else seed)
    trace = read_trace(wl.trace) if wl.trace else None
    if trace is not None:
        n = min(n, len(trace[0]))
    isl = trace[1][:n] if wl.isl.kind == "trace" else _sample_lengths(wl.isl, n, rng)
    osl = trace[2][:n] if wl.osl.kind == "trace" else _sample_lengths(wl.osl, n, rng)
    if wl.arrival.kind == "poisson":
        arrival = np.cumsum(rng.exponential(1.0 / wl.arrival.rate, size=n))
    elif wl.arrival.kind == "trace":
        arrival = trace[0][:n] * wl.arrival.time_scale
    else:
        arrival = np.full(n, np.nan)
    cached = np.floor(isl * wl.prefix_hit_rate).astype(np.int64)
    cached = np.minimum(cached, isl - 1)  # at least one token is always computed
    return Requests(arrival.astype(float), isl.astype(np.int64), osl.astype(np.int64), cached)
