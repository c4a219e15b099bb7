"""The executor's transformer: a ModelSpec turned into one rank's shard, with weights from a seed.

A rank holds a full replica of attention, norms, dense FFN, shared experts, router and
embeddings (DP attention), and only the routed experts of its EP slots (each MoE layer with its
own EPLB placement). Which routed-expert path runs is pluggable (`moe` callable): real EP over a
process group, a replay of a bigger plan's per-rank shapes (replay.py), or one process with all
experts (the dense reference). Tensor parallelism is applied afterwards by tp.apply_tp, which
slices the weights and installs `par`, the collectives the forward calls at its hook points
(after attention and each FFN, around the routed experts, after the LM head).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional

import torch

from rackplan.specs import ModelSpec

from .attention import Attention, KVCache, randn, rms_norm, sub_seed, weight
from .moe import MLP, Experts, Router
from .parallel import EPGroup, moe_forward, moe_forward_dbo, moe_forward_static
from .tp import Parallel


@dataclass
class Batch:
    """One step's tokens on one rank (packed prompts, or one new token per running sequence)."""

    phase: Literal["prefill", "decode"]
    tokens: torch.Tensor  # [T] token ids
    pos: torch.Tensor  # [T] position of each token in its sequence
    seq_lens: list[int]  # new tokens per sequence (decode: all 1)
    slots: Optional[torch.Tensor] = None  # [B] cache slot per sequence (None: 0..B-1)
    pos_range: tuple[int, int] = (0, 0)  # min, max of pos (host ints: no device sync)
    ends: Optional[torch.Tensor] = None  # [B] index of each sequence's last token
    prefix: Optional[list[int]] = None  # prefill: tokens of each sequence already in its cache slot

    @classmethod
    def prefill(cls, tokens, seq_lens: list[int], slots=None, prefix: Optional[list[int]] = None) -> "Batch":
        """Packed prompt chunks; a chunk with prefix P starts at position P and attends over the P
        entries already in its cache slot (chunked prefill)."""
        dev = tokens.device
        prefix = list(prefix) if prefix is not None and any(prefix) else None
        starts = prefix or [0] * len(seq_lens)
        pos = torch.cat([torch.arange(p, p + n, device=dev) for p, n in zip(starts, seq_lens, strict=True)]) \
            if seq_lens else tokens
        ends = torch.tensor(seq_lens, device=dev, dtype=torch.long).cumsum(0) - 1
        last = max((p + n for p, n in zip(starts, seq_lens, strict=True)), default=1) - 1
        return cls("prefill", tokens, pos, list(seq_lens), slots, (min(starts, default=0), last), ends, prefix)

    @classmethod
    def decode(cls, tokens, ctx: list[int], slots=None) -> "Batch":
        """One token per sequence at position ctx[i] (its context before this token)."""
        dev = tokens.device
        pos = torch.tensor(ctx, device=dev, dtype=torch.long)
        return cls("decode", tokens, pos, [1] * len(ctx), slots, (min(ctx, default=0), max(ctx, default=0)),
                   torch.arange(len(ctx), device=dev))

    @classmethod
    def verify(cls, tokens, ctx: list[int], q: int, slots=None) -> "Batch":
        """Speculative verify: q tokens per sequence (its last token and q - 1 drafts) at
        positions ctx[i] .. ctx[i] + q - 1, each attending over the cache up to its own position
        (the decode path with every sequence's slot repeated q times); logits for every token."""
        dev = tokens.device
        pos_list = [c + j for c in ctx for j in range(q)]
        pos = torch.tensor(pos_list, device=dev, dtype=torch.long)
        base = slots if slots is not None else torch.arange(len(ctx), device=dev)
        return cls("decode", tokens, pos, [1] * len(pos_list), base.repeat_interleave(q),
                   (min(pos_list, default=0), max(pos_list, default=0)), torch.arange(len(pos_list), device=dev))

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)


def layer_ids(spec: ModelSpec, phase: str, max_dense: int | None = None, max_moe: int | None = None) -> list[int]:
    """Layers a phase runs (V4.1 prefill: the encoder half), optionally capped per kind (replay)."""
    dense, moe = spec.layers_in(phase)
    dense = dense if max_dense is None else min(dense, max_dense)
    moe = moe if max_moe is None else min(moe, max_moe)
    first_moe = spec.num_dense_layers
    return list(range(dense)) + list(range(first_moe, first_moe + moe))


class Layer:
    def __init__(self, spec: ModelSpec, idx: int, seed: int, dtype, device, ep: Optional[EPGroup]):
        self.idx, self.dense = idx, idx < spec.num_dense_layers
        h, m = spec.hidden_size, spec.moe
        self.attn = Attention(spec, idx, seed, dtype, device)
        if self.dense:
            self.ffn = MLP(h, spec.dense_intermediate, sub_seed(seed, idx, "dense"), dtype, device)
            return
        self.ep = ep
        self.router = Router(spec, idx, seed, device)
        self.shared = (MLP(h, m.num_shared_experts * m.expert_intermediate, sub_seed(seed, idx, "shared"),
                           dtype, device) if m.num_shared_experts else None)
        logical = ep.local_logical if ep is not None else list(range(m.num_experts))
        self.experts = Experts(spec, idx, seed, logical, dtype, device)


class Model:
    """One rank's shard; `forward` runs a Batch through the given layers and returns the logits of
    each sequence's last token."""

    def __init__(self, spec: ModelSpec, seed: int, device: str, dtype, ep: Optional[EPGroup],
                 layers: list[int], dbo: bool = False, build_experts: bool = True,
                 placements: Optional[dict] = None):
        """`placements`: an EPLB placement (phy2log [slots]) per MoE layer index; default: `ep`'s."""
        self.spec, self.device, self.dtype, self.ep, self.dbo = spec, device, dtype, ep, dbo
        self.split = False  # this step runs as two micro-batches (executor/dbo.py decides, per step)
        h, v = spec.hidden_size, spec.vocab_size
        self.embed = randn((v, h), sub_seed(seed, "embed"), dtype, device)  # [V, H]
        self.head = weight((h, v), sub_seed(seed, "lm_head"), dtype, device)  # [H, V]
        self.layers = [Layer(spec, i, seed, dtype, device, self._layer_ep(i, placements) if build_experts
                             else _NoExperts(ep)) for i in layers]
        self.moe: Callable = self._moe_ep
        self.par = Parallel()  # no TP until tp.apply_tp installs one
        # decode on GPU: the static all-to-all path with this many tokens per rank at most (no host syncs)
        self.static_capacity: Optional[int] = None
        self.expert_counts: Optional[list[torch.Tensor]] = None  # a list: router counts [E] per MoE layer

    def _layer_ep(self, idx: int, placements: Optional[dict]):
        if placements is None or idx < self.spec.num_dense_layers or self.ep is None:
            return self.ep
        return self.ep.with_placement(placements[idx])

    def _moe_ep(self, layer: Layer, y, ids, w, timer):
        ep, cap = layer.ep, self.static_capacity
        if cap and ep.group is not None and len(ep.phy2log) % ep.size == 0 and y.shape[0] <= cap:
            return moe_forward_static(y, ids, w, layer.experts, ep, timer, cap)
        run = moe_forward_dbo if self.dbo and self.split and ep.group is not None else moe_forward
        return run(y, ids, w, layer.experts, ep, timer)

    def kv_cache(self, slots: int, max_ctx: int) -> KVCache:
        dim = self.layers[0].attn.entry_dim if self.layers else 1
        return KVCache(len(self.layers), slots, max_ctx, dim, self.dtype, self.device)

    def forward(self, batch: Batch, cache: Optional[KVCache], timer) -> torch.Tensor:
        x = self.embed[batch.tokens]  # [T, H]
        for li, layer in enumerate(self.layers):
            x = x + self._attention(layer, li, rms_norm(x), batch, cache, timer)
            x = x + self._ffn(layer, rms_norm(x), timer)
        with timer.section("lm_head"):
            logits = rms_norm(x[batch.ends]) @ self.head  # [B, V / tp]
        return self.par.gather_vocab(logits, timer)  # [B, V]

    def _attention(self, layer: Layer, li: int, x, batch: Batch, cache, timer):
        if x.shape[0] == 0:  # an idle DP rank still joins the MoE all-to-alls of the step
            return torch.zeros_like(x)
        return self.par.reduce(self._attention_part(layer, li, x, batch, cache, timer), timer, "attn.allreduce")

    def _attention_part(self, layer: Layer, li: int, x, batch: Batch, cache, timer):
        """This rank's heads' share of the attention output [T, H] (the whole of it without TP)."""
        if batch.phase == "decode":
            return layer.attn.decode(x, batch.pos, cache, li, batch.slots, timer, batch.pos_range)
        slots = batch.slots.tolist() if batch.slots is not None else list(range(batch.num_seqs))
        prefix = batch.prefix or [0] * batch.num_seqs
        past = None
        if batch.prefix is not None:  # chunked prefill: earlier chunks' entries from the cache
            past = [cache.data[li][s, :p] for s, p in zip(slots, prefix, strict=True)]
        out, entry = layer.attn.prefill(x, batch.pos, batch.seq_lens, timer, past)
        if cache is not None:  # store the chunk's cache entries in each sequence's slot (as decode does,
            start = 0         # inside attn.core)
            with timer.section("attn.core"):
                for slot, p, n in zip(slots, prefix, batch.seq_lens, strict=True):
                    cache.data[li][slot, p:p + n] = entry[start:start + n]
                    start += n
        return out

    def _ffn(self, layer: Layer, y, timer):
        par = self.par
        if layer.dense:
            with timer.section("dense_ffn"):
                out = layer.ffn(y)
            return par.reduce(out, timer) if y.shape[0] else out
        ys = par.token_slice(y)  # [T_s, H]: this rank's share of the EP group's tokens
        with timer.section("router"):
            ids, w = layer.router(ys)  # [T_s, k]
        if self.expert_counts is not None and par.moe_tp_rank == 0:
            # stays on the device: read after the step, so no sync inside the timed forward
            self.expert_counts.append(torch.bincount(ids.reshape(-1), minlength=self.spec.moe.num_experts))
        routed = par.gather_slices(par.moe_reduce(self.moe(layer, ys, ids, w, timer), timer), y.shape[0], timer)
        if layer.shared is None:
            return routed
        with timer.section("shared_expert"):
            shared = layer.shared(y)
        return routed + (par.reduce(shared, timer) if y.shape[0] else shared)


class _NoExperts:
    """Stand-in EP group whose ranks hold no routed experts (replay builds its own)."""

    def __init__(self, ep):
        self.local_logical = []
