"""Expert-parallel dispatch and combine (all-to-all), per rank per MoE layer.

Each token goes to the distinct ranks that hold its top-k experts: about (ep-1)(1-(1-1/ep)^k)
remote ranks. Destinations inside the NVLink domain ride NVLink, the rest the scale-out NIC; both
links run at once, so a phase takes alpha + max(nvlink bytes / bw, scale-out bytes / bw).
Low-latency kernels serve decode, high-throughput kernels serve prefill.
"""
from __future__ import annotations

from rackplan.specs import DTYPE_BYTES, HardwareSpec, Layout, ModelSpec, Profile


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


def a2a_seconds(model: ModelSpec, layout: Layout, hw: HardwareSpec, prof: Profile, tokens: float,
                phase: str, kernel: str) -> float:
    """Seconds of one dispatch ('dispatch') or combine ('combine') on one rank for one layer."""
    if layout.ep_size <= 1:
        return 0.0
    dtype = model.dtypes.dispatch if phase == "dispatch" else model.dtypes.combine
    nv_bytes, so_bytes = a2a_bytes(model, layout, hw, tokens, dtype)
    nv = prof.a2a_params(kernel, "nvlink", layout.ep_size, phase)
    t = max(nv.floor_s, nv.alpha_s + nv_bytes / (hw.scaleup_bw * nv.bw_eff))
    if so_bytes > 0:
        so = prof.a2a_params(kernel, "scaleout", layout.ep_size, phase)
        t = max(t, so.floor_s, so.alpha_s + so_bytes / (hw.scaleout_bw * so.bw_eff))
    return t
