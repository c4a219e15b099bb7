"""Batch shapes drawn from a workload's length distributions (seeded numpy Generator; the lengths
from rackplan/specs sample_lengths, the simulator's sampler)."""
from __future__ import annotations

import numpy as np

from rackplan.specs import SpecError, sample_lengths

DEFAULT_ISL, DEFAULT_OSL = 512, 128  # tokens, when a plan names no workload


def drawn_lengths(dist, rng: np.random.Generator, n: int) -> list[int]:
    """n lengths (tokens) from a LengthDist; trace lengths are not read by the executor yet."""
    if dist.kind == "trace":
        raise SpecError("workload", "isl.kind", "fixed, uniform or lognormal for execute", dist.kind)
    return sample_lengths(dist, n, rng).tolist()


def prefill_lengths(workload, budget: int, max_batch: int, rng: np.random.Generator) -> list[int]:
    """Prompt chunks filling one rank's token budget: whole prompts while they fit, then the
    next prompt's first chunk (chunked prefill), at most `max_batch` sequences."""
    lens, left = [], budget
    while left > 0 and len(lens) < max_batch:
        n = drawn_lengths(workload.isl, rng, 1)[0] if workload else DEFAULT_ISL
        lens.append(min(n, left))
        left -= lens[-1]
    return lens


def decode_contexts(workload, batch: int, rng: np.random.Generator) -> list[int]:
    """Context lengths of `batch` running sequences: prompt + a uniform share of the output."""
    if workload is None:
        return [DEFAULT_ISL + int(rng.integers(0, DEFAULT_OSL)) for _ in range(batch)]
    isl = drawn_lengths(workload.isl, rng, batch)
    osl = drawn_lengths(workload.osl, rng, batch)
    return [i + int(rng.integers(0, o)) for i, o in zip(isl, osl, strict=True)]
