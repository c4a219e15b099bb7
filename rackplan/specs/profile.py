"""Profile: efficiency factors and overheads that turn datasheet peaks into predicted seconds.

Datasheet defaults live in `configs/profiles/datasheet.yaml`; `rackplan calibrate` writes fitted
profiles with provenance and fit error. Every field has a default so planning works uncalibrated.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from .fields import check, non_negative, positive


@dataclass(frozen=True)
class A2AParams:
    """All-to-all latency model for one (kernel, link) and optionally one EP size:
    seconds = alpha_s + bytes_on_link / (link_bw * bw_eff)."""

    kernel: Literal["low_latency", "high_throughput"]
    link: Literal["nvlink", "scaleout"]
    alpha_s: float
    bw_eff: float
    ep: Optional[int] = None  # None: any EP size
    phase: Literal["dispatch", "combine", "both"] = "both"
    floor_s: float = 0.0  # latency floor: small batches sit flat at the kernel's minimum

    def __post_init__(self):
        non_negative(self.alpha_s, "alpha_s")
        non_negative(self.floor_s, "floor_s")
        check(0 < self.bw_eff <= 1.5, "bw_eff", "a fraction of the link bandwidth in (0, 1.5]", self.bw_eff)


@dataclass(frozen=True)
class Profile:
    """Efficiencies (fractions of peak) and fixed costs (seconds) for one hardware + stack."""

    name: str
    hardware: str = "*"  # which hardware it was fitted on ("*" = generic datasheet defaults)
    gemm_eff_max: float = 0.70  # large-GEMM fraction of peak FLOP/s
    gemm_m_half: float = 32.0  # tokens (rows) at which GEMM efficiency is half of max
    attn_eff: float = 0.50  # attention kernels, fraction of peak FLOP/s
    mem_eff: float = 0.80  # large streaming reads, fraction of HBM bandwidth
    mem_bytes_half: float = 1.0e6  # bytes per kernel at which bandwidth efficiency halves
    op_fixed_s: float = 2.0e-6  # per-kernel device-side fixed time
    a2a: tuple[A2AParams, ...] = ()
    kv_transfer_alpha_s: float = 1.0e-3  # per-request handshake of the KV connector
    kv_transfer_bw_eff: float = 0.7
    cpu_step_s: float = 2.0e-3  # scheduler + batch preparation per step
    cpu_per_request_s: float = 10.0e-6  # per running request per step (metadata, sampling)
    # engine-loop time outside a step when scheduling is synchronous (schedule broadcast, barriers,
    # hand-off bookkeeping); the simulator charges it once per step; 0 = none measured
    cpu_iteration_s: float = 0.0
    launch_s: float = 4.0e-6  # host time per kernel launch without CUDA graphs
    kernels_per_layer: int = 24  # kernel launches per transformer layer in a step
    graph_launch_s: float = 50.0e-6  # one CUDA-graph replay launch
    # fraction of the overlap the two-micro-batch pipeline allows that DBO realises (sim/cost/dbo.py:
    # 1 = the ideal schedule, 0 = the micro-batches run back to back)
    dbo_efficiency: float = 0.9
    # device idle between two kernels launched eagerly (no CUDA graph) even when the host keeps
    # ahead: launch latency the graph replay removes (typical figure; calibration fits it)
    eager_kernel_gap_s: float = 2.0e-6
    op_scale: dict[str, float] = field(default_factory=dict)  # fitted per-op correction factors
    # fitted per-op fixed seconds per layer the op runs in (host dispatch of its kernels on CPU,
    # launch-bound ops): added after op_scale, on ranks where the op has work. Keys of both tables
    # are op names ("attn.core") or op/phase ("attn.core/prefill"), the latter winning
    op_fixed: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    fit_error: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("gemm_eff_max", "attn_eff", "mem_eff", "kv_transfer_bw_eff"):
            v = getattr(self, name)
            check(0 < v <= 1.0, name, "a fraction in (0, 1]", v)
        for name in ("gemm_m_half", "mem_bytes_half", "op_fixed_s", "kv_transfer_alpha_s", "cpu_step_s",
                     "cpu_iteration_s",
                     "cpu_per_request_s", "launch_s", "graph_launch_s", "eager_kernel_gap_s"):
            non_negative(getattr(self, name), name)
        positive(self.kernels_per_layer, "kernels_per_layer")
        check(0 <= self.dbo_efficiency <= 1, "dbo_efficiency", "a fraction in [0, 1]", self.dbo_efficiency)
        for name, v in self.op_scale.items():
            check(v > 0, f"op_scale.{name}", "a positive factor", v)
        for name, v in self.op_fixed.items():
            non_negative(v, f"op_fixed.{name}")

    def a2a_params(self, kernel: str, link: str, ep: int, phase: str) -> A2AParams:
        """Best-matching all-to-all entry: same kernel and link, phase-specific before 'both',
        nearest EP size (log distance) before an EP-agnostic entry."""
        import math

        cands = [p for p in self.a2a if p.kernel == kernel and p.link == link
                 and p.phase in (phase, "both")]
        if not cands:
            raise KeyError(f"profile {self.name!r} has no a2a entry for {kernel}/{link}")

        def rank(p):
            ep_dist = abs(math.log(p.ep) - math.log(ep)) if p.ep else 50.0
            return (ep_dist, 0 if p.phase == phase else 1)

        return min(cands, key=rank)
