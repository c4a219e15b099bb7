"""One rank's shard of one instance: the model with its EP group, EPLB placements and TP sharding.

Every mode builds ranks through `build_shard` (benchmark steps, the colocated engine, the
disaggregated instances), so a layout means the same thing wherever it runs.
"""
from __future__ import annotations

from typing import Optional

from .model import Model, layer_ids
from .parallel import make_ep_group
from .topology import RankGroups
from .tp import Parallel, apply_tp


def parallel_for(rg: RankGroups) -> Parallel:
    """The TP collectives of a rank from its groups (topology.py)."""
    inst = rg.inst
    return Parallel(tp=inst.layout.tp, tp_rank=rg.tp_rank, tp_group=rg.tp, moe_tp=inst.moe_tp,
                    moe_tp_rank=rg.tp_rank % inst.moe_tp, moe_tp_group=rg.moe_tp)


def build_shard(spec, seed: int, device: str, dtype, rg: RankGroups, phase: str,
                max_dense: Optional[int] = None, max_moe: Optional[int] = None,
                placements: Optional[dict] = None, dbo: bool = False, fp8: bool = False) -> Model:
    """Rank `rg`'s shard of the model for `phase`'s layers: routed experts of its EP slots (the
    layer's EPLB placement when given), attention and FFNs sliced for its TP rank, the spec's
    narrow-format weights as FP8 when `fp8` (fp8.py)."""
    lay = rg.inst.layout
    ep = make_ep_group(rg.ep, rg.ep_rank, lay.ep_size, spec.moe.num_experts)
    model = Model(spec, seed, device, dtype, ep, layer_ids(spec, phase, max_dense, max_moe), dbo=dbo,
                  placements=placements)
    par = parallel_for(rg)
    if par.tp > 1 or par.moe_tp > 1:
        apply_tp(model, par)
    if fp8:
        from .fp8 import quantise_model
        quantise_model(model)
    if device.startswith("cuda") and phase == "decode":  # the static all-to-all: no host syncs per layer
        model.static_capacity = lay.max_decode_tokens
    return model
