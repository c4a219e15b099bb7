"""Pricing one op: time = max(flops / (peak * eff_compute), bytes / (bw * eff_mem)) + fixed.

Compute efficiency rises with the GEMM's row count M (skinny decode GEMMs are weight-read bound);
bandwidth efficiency rises with the bytes one kernel moves (small reads are latency bound).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from rackplan.specs import HardwareSpec, Profile

OpKind = Literal["gemm", "attn", "mem", "comm", "cpu"]


@dataclass(frozen=True)
class Op:
    """One priced op of a step on one rank, summed over the layers that run it."""

    name: str
    kind: OpKind
    seconds: float
    flops: float = 0.0
    bytes: float = 0.0
    count: int = 1  # layers (or launches) it covers


@dataclass(frozen=True)
class StepCost:
    """Seconds of one step on the slowest rank, with the ops that make it up."""

    seconds: float
    ops: tuple[Op, ...]

    def breakdown(self) -> dict[str, float]:
        """Seconds per op name."""
        out: dict[str, float] = {}
        for op in self.ops:
            out[op.name] = out.get(op.name, 0.0) + op.seconds
        return out

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def bytes(self) -> float:
        return sum(op.bytes for op in self.ops)


def gemm_eff(m, prof: Profile):
    """Fraction of peak a GEMM with `m` rows reaches (saturating in m)."""
    return prof.gemm_eff_max * m / (m + prof.gemm_m_half)


def mem_eff(nbytes, prof: Profile):
    """Fraction of HBM bandwidth a kernel moving `nbytes` reaches."""
    return prof.mem_eff * nbytes / (nbytes + prof.mem_bytes_half)


def price(flops, nbytes, peak_flops: float, eff_compute, hw: HardwareSpec, prof: Profile):
    """Roofline seconds for one kernel (numpy-friendly: arrays in, arrays out)."""
    t_compute = np.divide(flops, peak_flops * np.maximum(eff_compute, 1e-9))
    t_mem = np.divide(nbytes, hw.hbm_bw * np.maximum(mem_eff(nbytes, prof), 1e-9))
    return np.maximum(t_compute, t_mem) + prof.op_fixed_s
