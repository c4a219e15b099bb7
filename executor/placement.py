"""Apply an EPLB placement inside an EP MoE layer (pure torch, one layer at a time).

A placement maps logical experts to physical slots (sim/eplb): phy2log [P], log2phy
[E, max_replicas] (-1 padded), logcnt [E]; slot p lives on EP rank p // (P // ep). The router
still picks logical experts; each (token, expert) choice goes to one replica of its expert,
round-robin over the choices of that expert in token order (offset by the source rank so ranks
do not all start on replica 0), which splits a hot expert's tokens evenly over its replicas.
Replicas hold copies of the same weights, so the layer output does not change.

`plan_placements` computes the placement a plan's layout runs with: the planner's EPLB policy
(sim/eplb) on the expert loads the simulator prices it with (the workload's routing skew through
sim/routing.layer_popularity, the same layers and seed as sim/cost/imbalance.py), or on the
loads of an expert-count trace the executor recorded (expert_counts.jsonl).
"""
from __future__ import annotations

from typing import Optional

import torch


def plan_placements(spec, layout, hw, skew, trace: Optional[str] = None) -> Optional[dict[int, torch.Tensor]]:
    """phy2log [slots] per MoE layer index for `layout`'s EPLB settings, or None (policy "none" or
    EP1: contiguous experts, as the simulator prices it)."""
    from rackplan.sim.cost.imbalance import placement
    from rackplan.sim.eplb import placement_for
    from rackplan.sim.routing import popularity_from_counts, read_expert_trace
    e, m = layout.eplb, spec.moe
    if e.policy == "none" or layout.ep_size == 1:
        return None
    if trace is not None:  # the policy over recorded routing [layers recorded, E]
        pop = popularity_from_counts(read_expert_trace(trace))
        pl = placement_for(pop, layout.ep_size, e.redundant_experts, e.policy, hw.gpus_per_node, m.num_groups)
    else:  # the placement the simulator prices this layout with
        pl = placement(layout.ep_size, e.redundant_experts, e.policy, skew, m.top_k, m.num_experts,
                       hw.gpus_per_node, m.num_groups)
    moe_layers = range(spec.num_dense_layers, spec.num_layers)
    return {idx: torch.as_tensor(pl.phy2log[i % pl.phy2log.shape[0]], dtype=torch.long)
            for i, idx in enumerate(moe_layers)}


def placement_tensors(phy2log, log2phy, logcnt) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer's placement (numpy or lists, e.g. sim.eplb.Placement fields [layer]) as long tensors."""
    return tuple(torch.as_tensor(x, dtype=torch.long) for x in (phy2log, log2phy, logcnt))


def map_to_slots(topk_ids: torch.Tensor, log2phy: torch.Tensor, logcnt: torch.Tensor,
                 offset: int = 0) -> torch.Tensor:
    """Logical expert ids [T, k] -> physical slot ids [T, k], one replica per choice, deterministic."""
    flat = topk_ids.reshape(-1)  # [T*k] in token order
    order = torch.argsort(flat, stable=True)
    srt = flat[order]
    idx = torch.arange(flat.numel(), device=flat.device)
    first = torch.ones_like(srt, dtype=torch.bool)
    first[1:] = srt[1:] != srt[:-1]
    start = torch.cummax(torch.where(first, idx, torch.zeros_like(idx)), dim=0).values
    occurrence = torch.empty_like(flat)
    occurrence[order] = idx - start  # how many earlier choices picked the same expert
    replica = (occurrence + offset) % logcnt[flat]
    return log2phy[flat, replica].reshape(topk_ids.shape)


def physical_weights(logical: torch.Tensor, phy2log: torch.Tensor) -> torch.Tensor:
    """Expert weight stack per slot from the logical one: [E, ...] -> [P, ...] (replicas copy)."""
    return logical.index_select(0, phy2log)


def slot_to_rank(slot_ids: torch.Tensor, num_slots: int, ep: int) -> torch.Tensor:
    """EP rank that holds each slot id (same shape)."""
    return torch.div(slot_ids, num_slots // ep, rounding_mode="floor")


def tokens_per_rank(slot_ids: torch.Tensor, num_slots: int, ep: int) -> torch.Tensor:
    """Token-expert choices each EP rank receives: slot ids [T, k] -> counts [ep]."""
    return torch.bincount(slot_to_rank(slot_ids, num_slots, ep).reshape(-1), minlength=ep)


def tokens_per_slot(slot_ids: torch.Tensor, num_slots: int) -> torch.Tensor:
    """Token-expert choices per physical slot: [T, k] -> [P]."""
    return torch.bincount(slot_ids.reshape(-1), minlength=num_slots)


def expert_counts(topk_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Token-expert choices per logical expert (what sim.routing.read_expert_trace reads): [E]."""
    return torch.bincount(topk_ids.reshape(-1), minlength=num_experts)


def moe_reference(x: torch.Tensor, topk_ids: torch.Tensor, topk_w: torch.Tensor,
                  w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """Plain SwiGLU MoE over expert stacks indexed by `topk_ids` (logical ids with logical weights,
    or slot ids with physical weights). x [T, H]; topk_* [T, k]; w_gate_up [N, 2I, H]; w_down [N, H, I]."""
    out = torch.zeros_like(x)
    for e in torch.unique(topk_ids).tolist():
        tok, j = torch.nonzero(topk_ids == e, as_tuple=True)
        gate, up = (x[tok] @ w_gate_up[e].T).chunk(2, dim=-1)
        y = (torch.nn.functional.silu(gate) * up) @ w_down[e].T
        out.index_add_(0, tok, y * topk_w[tok, j, None])
    return out
