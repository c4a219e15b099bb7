"""KV-cache transfer from a prefill instance to a decode instance (NIXL / Mooncake style).

bytes = context x KV bytes per token (+ sliding windows); over NVLink when both instances sit in
one NVLink domain, else over the scale-out NIC of the sending rank; between two hardware kinds
(sim/mixed.py) over the slower NIC of the two, or a link the plan declares.
"""
from __future__ import annotations

from dataclasses import dataclass

from rackplan.specs import HardwareSpec, ModelSpec, Profile


def kv_transfer_bytes(model: ModelSpec, context_tokens: float) -> float:
    """KV bytes of one sequence of `context_tokens` tokens (all layers)."""
    return context_tokens * model.kv_bytes_per_token + model.kv_bytes_per_sequence_fixed


@dataclass(frozen=True)
class KVLink:
    """The path a sequence's KV cache takes from its prefill rank to its decode rank."""

    alpha_s: float  # per-request handshake
    bytes_per_token: float
    bytes_fixed: float  # per sequence (sliding windows)
    bw: float  # effective B/s

    def seconds(self, context_tokens: float) -> float:
        return self.alpha_s + (context_tokens * self.bytes_per_token + self.bytes_fixed) / self.bw


def kv_link(model: ModelSpec, hw: HardwareSpec, prof: Profile, same_domain: bool) -> KVLink:
    """The KV transfer link: NVLink inside one domain, else the scale-out NIC."""
    return _link(model, prof, hw.scaleup_bw if same_domain else hw.scaleout_bw)


def _link(model: ModelSpec, prof: Profile, bw: float) -> KVLink:
    return KVLink(prof.kv_transfer_alpha_s, model.kv_bytes_per_token, model.kv_bytes_per_sequence_fixed,
                  bw * prof.kv_transfer_bw_eff)


def kv_link_between(model: ModelSpec, sender: HardwareSpec, receiver: HardwareSpec, prof: Profile,
                    declared_bw: float | None = None) -> KVLink:
    """The KV transfer link between two NVLink domains (two hardware kinds, or a declared link): the
    slower scale-out NIC of the two, or `declared_bw` (B/s per GPU), at the profile's efficiency."""
    return _link(model, prof, declared_bw if declared_bw is not None else min(sender.scaleout_bw, receiver.scaleout_bw))


def kv_transfer_seconds(model: ModelSpec, hw: HardwareSpec, prof: Profile, context_tokens: float,
                        same_domain: bool) -> float:
    """Seconds to move one sequence's KV cache from its prefill rank to its decode rank."""
    return kv_link(model, hw, prof, same_domain).seconds(context_tokens)
