"""Pricing one op: time = max(flops / (peak * eff_compute), bytes / (bw * eff_mem)) + fixed.

Every op of the cost model is priced by `price`. Efficiencies over shape come from efficiency.py
(compute efficiency rises with a GEMM's row count M, bandwidth efficiency with the bytes one kernel
moves).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from rackplan.specs import HardwareSpec, Profile
from rackplan.specs.ops import OpKind

from . import efficiency

if TYPE_CHECKING:
    from .host import HostTime


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
    """Seconds of one step on the slowest rank, with the ops that make it up.

    `seconds` is the engine's step, back to back with the next (device + exposed host time; the
    ops sum to it); `host` its host parts (sim/cost/host.py). `period_s` is what the simulator and
    the planner's estimate advance by: the step, or the API server's time to stream the step's
    tokens when that is longer (it runs beside the engine and bounds what a step delivers)."""

    seconds: float
    ops: tuple[Op, ...]
    host: Optional["HostTime"] = None

    @property
    def period_s(self) -> float:
        return max(self.seconds, self.host.api_s) if self.host is not None else self.seconds

    @property
    def api_wait_s(self) -> float:
        """Seconds the step waits for the API server beyond the engine step (0 when it keeps up)."""
        return self.period_s - self.seconds

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


def price(flops: float, nbytes: float, peak_flops: float, eff_compute: float, hw: HardwareSpec,
          prof: Profile) -> float:
    """Roofline seconds of one kernel: the slower of compute and memory, plus the profile's fixed
    per-kernel time (the one roofline of the cost model). Floats in, float out on the pricing path;
    numpy arrays of kernels (one per row of a measured table, calibration/opdb_ops.py) go through
    the same expression elementwise."""
    # (three floats, the pricing path's case, skip the array checks)
    if not (flops.__class__ is float and nbytes.__class__ is float and eff_compute.__class__ is float) and (
            isinstance(flops, np.ndarray) or isinstance(nbytes, np.ndarray) or isinstance(eff_compute, np.ndarray)):
        return _price_rows(flops, nbytes, peak_flops, eff_compute, hw, prof)
    t_compute = flops / (peak_flops * (eff_compute if eff_compute > 1e-9 else 1e-9))
    t_mem = 0.0
    if nbytes > 0:
        eff_mem = efficiency.memory(prof, nbytes)
        t_mem = nbytes / (hw.hbm_bw * (eff_mem if eff_mem > 1e-9 else 1e-9))
    return (t_compute if t_compute > t_mem else t_mem) + prof.op_fixed_s


def price_gemm(flops, nbytes, peak_flops: float, dtype: str, m, n, k, hw: HardwareSpec, prof: Profile):
    """Seconds of one weight GEMM [m, k] x [k, n] in `dtype` moving `nbytes` (weights + activations).

    Under a measured GEMM curve (efficiency.gemm_curve_streams) the curve is the whole kernel: it
    was fitted on whole-kernel times, and its m-, n- and k-terms are the GEMM's own weight-read and
    activation traffic (rackplan.specs.Curve), so the profile's generic streaming side (mem_eff,
    fitted on other kernels) is not applied on top. Without one: the roofline `price`."""
    eff = efficiency.gemm(prof, dtype, m, n, k, hw.num_sms)
    return price(flops, nbytes * gemm_bytes_priced(prof, dtype), peak_flops, eff, hw, prof)


def gemm_bytes_priced(prof: Profile, dtype: str) -> float:
    """1.0 where a weight GEMM's bytes go through the roofline's memory side, 0.0 where its measured
    curve already carries its own streaming (price_gemm)."""
    return 0.0 if efficiency.gemm_curve_streams(prof, dtype) else 1.0


def _price_rows(flops, nbytes, peak_flops, eff_compute, hw: HardwareSpec, prof: Profile) -> np.ndarray:
    """`price` over arrays of kernels: the same roofline with numpy's elementwise max."""
    flops, nbytes = np.asarray(flops, float), np.asarray(nbytes, float)
    t_compute = flops / (peak_flops * np.maximum(eff_compute, 1e-9))
    safe = np.where(nbytes > 0, nbytes, 1.0)
    t_mem = np.where(nbytes > 0, nbytes / (hw.hbm_bw * np.maximum(efficiency.memory(prof, safe), 1e-9)), 0.0)
    return np.maximum(t_compute, t_mem) + prof.op_fixed_s
