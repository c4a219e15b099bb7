"""KV-cache transfer from a prefill instance to a decode instance (NIXL / Mooncake style).

bytes = context x KV bytes per token (+ sliding windows); over NVLink when both instances sit in
one NVLink domain, else over the scale-out NIC of the sending rank.
"""
from __future__ import annotations

from rackplan.specs import HardwareSpec, ModelSpec, Profile


def kv_transfer_bytes(model: ModelSpec, context_tokens: float) -> float:
    """KV bytes of one sequence of `context_tokens` tokens (all layers)."""
    return context_tokens * model.kv_bytes_per_token + model.kv_bytes_per_sequence_fixed


def kv_transfer_seconds(model: ModelSpec, hw: HardwareSpec, prof: Profile, context_tokens: float,
                        same_domain: bool) -> float:
    """Seconds to move one sequence's KV cache from its prefill rank to its decode rank."""
    bw = hw.scaleup_bw if same_domain else hw.scaleout_bw
    return prof.kv_transfer_alpha_s + kv_transfer_bytes(model, context_tokens) / (bw * prof.kv_transfer_bw_eff)
