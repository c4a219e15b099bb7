"""Expert-parallel dispatch and combine (all-to-all), per rank per MoE layer.

Each token goes to the distinct ranks that hold its top-k experts: about (ep-1)(1-(1-1/ep)^k)
remote ranks. Destinations inside the NVLink domain ride NVLink, the rest the scale-out NIC; both
links run at once, so a phase takes alpha + max(nvlink bytes / bw, scale-out bytes / bw).
Low-latency kernels serve decode, high-throughput kernels serve prefill.
"""
from __future__ import annotations

from dataclasses import dataclass

from rackplan.specs import DTYPE_BYTES, A2AParams, HardwareSpec, Layout, ModelSpec, Profile


def bytes_per_token(model: ModelSpec, dtype: str) -> float:
    """Payload of one token copy: hidden x dtype, plus one fp32 scale per 128 for FP8
    (DeepEP / TRT-LLM FP8 dispatch: 7,168 + 224 = 7,392 B for DeepSeek-V3)."""
    h = model.hidden_size
    extra = h / 128 * 4 if dtype == "fp8" else 0.0
    return h * DTYPE_BYTES[dtype] + extra


def remote_destinations(top_k: int, ep: int) -> float:
    """Expected number of other ranks one token is sent to (uniform routing)."""
    if ep <= 1:
        return 0.0
    return (ep - 1) * (1.0 - (1.0 - 1.0 / ep) ** top_k)


def nvlink_share(layout: Layout, hw: HardwareSpec) -> float:
    """Fraction of a rank's remote EP peers inside its NVLink domain."""
    ep = layout.ep_size
    if ep <= 1:
        return 1.0
    return (min(ep, hw.domain_size) - 1) / (ep - 1)


def a2a_bytes(model: ModelSpec, layout: Layout, hw: HardwareSpec, tokens: float, dtype: str):
    """(NVLink bytes, scale-out bytes) one rank sends for `tokens` tokens in one phase."""
    total = tokens * remote_destinations(model.moe.top_k, layout.ep_size) * bytes_per_token(model, dtype)
    share = nvlink_share(layout, hw)
    return total * share, total * (1.0 - share)


@dataclass(frozen=True)
class A2APhase:
    """One dispatch or combine of one layout with one kernel kind: link bytes per token sent and
    the profile's latency model per link (built once per layout; `seconds` per step)."""

    nv_bytes_per_token: float
    so_bytes_per_token: float
    nv: A2AParams
    so: A2AParams | None  # None when every EP peer is inside the NVLink domain
    scaleup_bw: float
    scaleout_bw: float

    def seconds(self, tokens: float) -> float:
        """Seconds of this phase for one layer when the rank sends `tokens` tokens."""
        nv = self.nv
        t = max(nv.floor_s, nv.alpha_s + tokens * self.nv_bytes_per_token / (self.scaleup_bw * nv.bw_eff))
        so_bytes = tokens * self.so_bytes_per_token
        if so_bytes > 0:
            so = self.so
            t = max(t, so.floor_s, so.alpha_s + so_bytes / (self.scaleout_bw * so.bw_eff))
        return t


def a2a_phase(model: ModelSpec, layout: Layout, hw: HardwareSpec, prof: Profile, phase: str,
              kernel: str) -> A2APhase | None:
    """The dispatch ('dispatch') or combine ('combine') phase of `layout`; None without EP."""
    if layout.ep_size <= 1:
        return None
    dtype = model.dtypes.dispatch if phase == "dispatch" else model.dtypes.combine
    nv_bytes, so_bytes = a2a_bytes(model, layout, hw, 1.0, dtype)
    so = prof.a2a_params(kernel, "scaleout", layout.ep_size, phase) if so_bytes > 0 else None
    return A2APhase(nv_bytes, so_bytes, prof.a2a_params(kernel, "nvlink", layout.ep_size, phase), so,
                    hw.scaleup_bw, hw.scaleout_bw)


def a2a_seconds(model: ModelSpec, layout: Layout, hw: HardwareSpec, prof: Profile, tokens: float,
                phase: str, kernel: str) -> float:
    """Seconds of one dispatch ('dispatch') or combine ('combine') on one rank for one layer."""
    ph = a2a_phase(model, layout, hw, prof, phase, kernel)
    return ph.seconds(tokens) if ph is not None else 0.0
