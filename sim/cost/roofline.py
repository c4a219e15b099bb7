"""Pricing one op: time = max(flops / (peak * eff_compute), bytes / (bw * eff_mem)) + fixed.

Efficiencies over shape come from efficiency.py (compute efficiency rises with a GEMM's row count M,
bandwidth efficiency with the bytes one kernel moves).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rackplan.specs import HardwareSpec, Profile
from rackplan.specs.ops import OpKind

from . import efficiency


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


def price(flops, nbytes, peak_flops: float, eff_compute, hw: HardwareSpec, prof: Profile):
    """Roofline seconds for one kernel (numpy-friendly: arrays in, arrays out)."""
    t_compute = np.divide(flops, peak_flops * np.maximum(eff_compute, 1e-9))
    t_mem = np.divide(nbytes, hw.hbm_bw * np.maximum(efficiency.memory(prof, nbytes), 1e-9))
    return np.maximum(t_compute, t_mem) + prof.op_fixed_s
