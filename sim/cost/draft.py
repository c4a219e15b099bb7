"""The speculative drafter's cost per step: MTP module passes or a block drafter's stages (DSpark).

Each pass runs a small transformer layer over the rank's draft rows (one per sequence for MTP, the
whole proposed block for a block drafter): its dense part (attention, shared parts, head) reads its
weights once per pass; its routed experts are split over the layout's EP group like the target's
(DP attention + EP MoE), so a rank reads only the experts of its share that the step's global rows
hit (DSpark: 3 of 128 picked per token, 128 / 64 = 2 per rank at DEP64) and the rows travel through
the same all-to-all; under TP each pass all-reduces its attention and FFN outputs.

An MTP pass is one decoder layer of the target's own kind with the shared LM head (DeepSeek-V3 report 2.2),
so it is priced as that layer at the pass's rows (sim/cost/prices.py mtp_passes: every kernel of the layer
with its floor, which at batch 1 is most of a pass); `Drafter.seconds` prices a block drafter's stages.
"""
from __future__ import annotations

from dataclasses import dataclass

from rackplan.specs import DTYPE_BYTES, HardwareSpec, Layout, ModelSpec, Profile

from . import efficiency
from .collective import allreduce_seconds
from .moe import tile_load
from .roofline import price, price_gemm


@dataclass(frozen=True)
class Drafter:
    """A model's drafter on one layout, built once per StepModel."""

    passes: int  # drafter forwards per step
    rows_per_seq: float  # rows a pass runs per decode sequence
    dense_params: float  # parameters a pass reads whatever the batch, per rank
    experts_per_rank: float  # routed experts of one pass held by a rank
    expert_bytes: float  # bytes of one routed expert on a rank (TP-sharded without EP)
    expert_flops_per_pair: float
    pair_frac: float  # top_k / num_experts: chance a row picks a given expert
    top_k: int
    weight_bytes: float  # bytes per parameter
    dtype: str  # weight dtype (selects the GEMM efficiency curve)
    hidden: int
    act: float
    ep: int
    tp: int
    all_to_all: bool  # the EP group exchanges rows (DP attention), not a replicated TP batch
    layer: bool = False  # an MTP pass: one decoder layer of the target's kind and its LM head (prices.draft)

    def seconds(self, hw: HardwareSpec, prof: Profile, compute_peak: float, rows: float, rows_global: float,
                a2a_s) -> tuple[float, float, float]:
        """Seconds, FLOPs, bytes of the drafter on the busiest rank: `rows` draft rows on the rank,
        `rows_global` over the EP group; `a2a_s(tokens)` prices one dispatch + combine."""
        if rows <= 0:
            return 0.0, 0.0, 0.0
        fl = 2.0 * self.dense_params * rows
        by = self.dense_params * self.weight_bytes + 2.0 * rows * self.hidden * self.act
        sec = price_gemm(fl, by, compute_peak, self.dtype, rows, 0.0, 0.0, hw, prof)
        if self.experts_per_rank:
            hit = 1.0 - (1.0 - self.pair_frac) ** rows_global
            distinct = max(self.experts_per_rank * hit, 1.0)
            pairs = rows_global * self.top_k / self.ep
            e_fl = pairs * self.expert_flops_per_pair
            e_by = distinct * self.expert_bytes + 3.0 * pairs * self.hidden * self.act
            # the experts kernel's load (moe.tile_load): every row enters the rank without an all-to-all;
            # with one, the copies delivered are not counted here (0: unknown, no load range applies)
            load = 0.0 if self.all_to_all else tile_load(rows_global, self.top_k, self.experts_per_rank)
            eff = efficiency.experts(prof, self.dtype, pairs / distinct, load=load, sms=hw.num_sms)
            sec += price(e_fl, e_by, compute_peak, eff, hw, prof)
            sec += a2a_s(rows) if self.all_to_all else 0.0
            fl, by = fl + e_fl, by + e_by
        if self.tp > 1:
            sec += 2.0 * allreduce_seconds(hw, prof, rows * self.hidden * self.act, self.tp)
        return sec * self.passes, fl * self.passes, by * self.passes


def drafter(model: ModelSpec, layout: Layout, passes: int, all_to_all: bool) -> Drafter:
    """The drafter of `model` as `layout` runs it (`passes` forwards per step; `all_to_all`: the step's op
    list has an all-to-all, which the drafter's routed rows go through too)."""
    d, tp, ep, spec = model.draft, layout.tp, layout.ep_size, layout.speculation
    assert d is not None and spec is not None, "a drafter needs the model's drafter and the layout's speculation"
    wb = DTYPE_BYTES[d.weight_dtype]
    moe_tp = layout.moe_tp
    return Drafter(
        # a block drafter's stages each propose the whole block; an MTP pass one token per sequence
        passes=passes, rows_per_seq=float(spec.num_tokens if d.kind == "draft_model" else 1),
        dense_params=d.dense_active_params / tp, experts_per_rank=d.num_experts / ep,
        expert_bytes=d.expert_params * wb / moe_tp, expert_flops_per_pair=2.0 * d.expert_params / moe_tp,
        pair_frac=d.top_k / d.num_experts if d.num_experts else 0.0, top_k=d.top_k, weight_bytes=wb,
        dtype=d.weight_dtype, hidden=model.hidden_size, act=model.dtypes.activation_bytes, ep=ep, tp=tp,
        all_to_all=all_to_all, layer=d.kind == "mtp")
