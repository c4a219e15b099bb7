"""Tensor parallelism applied to an already built model (gpt-fast's tp.py way): weights are sliced
in place, and the model's hook points (`Model.par`) run the collectives.

Attention is head-sharded: q (q_b), kv_b (MLA) or the kv heads (GQA) keep this rank's heads, the
output projection its rows; the partial outputs are summed by an all-reduce after the output
projection. The cache keeps what the rank's heads read: the whole MLA latent (shared by all
heads) and the single csa head, a GQA rank its own kv heads. Dense FFN and shared experts are
split along their intermediate width (column-parallel w13, row-parallel w2, then all-reduce);
routed experts along theirs over the MoE-TP group (topology.py), with the token slices of an EP
group gathered back over the TP group; the LM head is vocab-sharded and its logits all-gathered.
Collectives are timed as the cost model's ops (rackplan/specs/ops.py): the attention output's
all-reduce as `attn.allreduce`, the FFN / expert all-reduces and the slice all-gather as
`ffn.allreduce`, the logits' all-gather inside `lm_head`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from rackplan.specs import SpecError


@dataclass
class Parallel:
    """One rank's TP place: attention TP (tp ranks), expert TP (moe_tp ranks), token slices."""

    tp: int = 1
    tp_rank: int = 0
    tp_group: object = None
    moe_tp: int = 1
    moe_tp_rank: int = 0
    moe_tp_group: object = None
    vocab_sharded: bool = False

    @property
    def slices(self) -> int:
        return self.tp // self.moe_tp

    @property
    def slice_rank(self) -> int:
        return self.tp_rank // self.moe_tp

    def reduce(self, x: torch.Tensor, timer, op: str = "ffn.allreduce") -> torch.Tensor:
        """Sum of the TP ranks' partial outputs x [T, H], timed as `op`."""
        return _all_reduce(x, self.tp_group, timer, op)

    def moe_reduce(self, x: torch.Tensor, timer) -> torch.Tensor:
        """Sum of the expert-TP shards' partial outputs."""
        return _all_reduce(x, self.moe_tp_group, timer)

    def token_slice(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's slice of the replica's tokens for the EP group: [T, H] -> [T_s, H]."""
        return x if self.slices == 1 else torch.tensor_split(x, self.slices)[self.slice_rank]

    def gather_slices(self, y: torch.Tensor, n_tokens: int, timer) -> torch.Tensor:
        """Every slice's rows back on every TP rank: [T_s, H] -> [T, H]."""
        if self.slices == 1:
            return y
        width = -(-n_tokens // self.slices)
        if width == 0:
            return y
        parts = _all_gather(torch.cat([y, y.new_zeros(width - y.shape[0], y.shape[1])]), self.tp, self.tp_group,
                            timer, "ffn.allreduce")
        sizes = [t.shape[0] for t in torch.tensor_split(torch.empty(n_tokens), self.slices)]
        return torch.cat([parts[s * self.moe_tp][:sizes[s]] for s in range(self.slices)])

    def gather_vocab(self, logits: torch.Tensor, timer) -> torch.Tensor:
        """Vocab-sharded logits [B, V/tp] -> [B, V]."""
        if not self.vocab_sharded or logits.shape[0] == 0:
            return logits
        return torch.cat(_all_gather(logits.contiguous(), self.tp, self.tp_group, timer, "lm_head"), -1)


def _all_reduce(x, group, timer, op: str = "ffn.allreduce"):
    if group is None or x.shape[0] == 0:
        return x
    with timer.section(op, comm=True, group=group):
        dist.all_reduce(x, group=group)
    return x


def _all_gather(x, n, group, timer, op: str) -> list[torch.Tensor]:
    out = [torch.empty_like(x) for _ in range(n)]
    with timer.section(op, comm=True, group=group):
        dist.all_gather(out, x, group=group)
    return out


def _cols(w: torch.Tensor, parts: int, rank: int, groups: int = 1) -> torch.Tensor:
    """Column slice `rank` of `parts` of w [K, N], taken inside each of `groups` column blocks
    (gate | up of a SwiGLU w13)."""
    blocks = w.chunk(groups, dim=-1)
    return torch.cat([b.chunk(parts, dim=-1)[rank] for b in blocks], -1).contiguous()


def _rows(w: torch.Tensor, parts: int, rank: int) -> torch.Tensor:
    return w.chunk(parts, dim=-2)[rank].contiguous()


def shard_attention(attn, tp: int, rank: int) -> None:
    """Keep heads rank*h/tp .. (rank+1)*h/tp of an Attention (in place)."""
    h = attn.heads
    if h % tp:
        raise SpecError("model", "attention.num_heads", f"a multiple of tp ({tp})", h)
    w, hl = attn.w, h // tp
    if attn.kind == "mla":
        for name in ("q_b" if "q_b" in w else "q", "kv_b"):
            w[name] = _cols(w[name], tp, rank)
        w["o"] = _rows(w["o"], tp, rank)
        attn.heads = hl
        kvb = w["kv_b"].view(attn.r, hl, attn.dn + attn.dv)  # [r, h/tp, dn+dv]
        attn.w_uk = kvb[..., :attn.dn].permute(1, 2, 0).contiguous()
        attn.w_uv = kvb[..., attn.dn:].permute(1, 0, 2).contiguous()
        return
    q = "q_b" if "q_b" in w else "q"
    w[q] = _cols(w[q], tp, rank)
    if attn.sinks is not None:  # one logit per query head: this rank's heads'
        attn.sinks = attn.sinks[rank * hl:(rank + 1) * hl]
    if attn.kind == "csa":
        if attn.groups % tp:
            raise SpecError("model", "attention.o_groups", f"a multiple of tp ({tp})", attn.groups)
        w["o_a"] = _rows(w["o_a"], tp, rank)
        w["o_b"] = _rows(w["o_b"], tp, rank)
        attn.groups //= tp
    else:  # gqa: the kv heads this rank's query heads read
        rep = h // attn.kvh
        lo, hi = rank * hl // rep, ((rank + 1) * hl - 1) // rep + 1
        k, v = w["kv"].view(w["kv"].shape[0], 2, attn.kvh, attn.d).unbind(1)  # [H, kvh, d] each
        w["kv"] = torch.cat([k[:, lo:hi].flatten(1), v[:, lo:hi].flatten(1)], -1).contiguous()
        attn.kvh, attn.entry_dim = hi - lo, 2 * (hi - lo) * attn.d
        w["o"] = _rows(w["o"], tp, rank)
    attn.heads = hl


def shard_mlp(mlp, tp: int, rank: int) -> None:
    """Column-parallel w13 [H, 2I] (gate and up halves), row-parallel w2 [I, H]."""
    mlp.w13 = _cols(mlp.w13, tp, rank, groups=2)
    mlp.w2 = _rows(mlp.w2, tp, rank)


def shard_experts(experts, parts: int, rank: int) -> None:
    """Expert TP: w13 [S, H, 2I] -> [S, H, 2I/parts], w2 [S, I, H] -> [S, I/parts, H]."""
    experts.w13 = _cols(experts.w13, parts, rank, groups=2)
    experts.w2 = _rows(experts.w2, parts, rank)


def check_shardable(spec, tp: int, moe_tp: int, where: str = "model") -> None:
    """The widths a TP (expert-TP) split divides: heads, FFN widths, expert width (SpecError, before
    any rank starts; apply_tp runs the same check)."""
    if tp > 1 and spec.attention.num_heads % tp:
        raise SpecError(where, "attention.num_heads", f"a multiple of tp ({tp})", spec.attention.num_heads)
    inter = [spec.dense_intermediate, spec.moe.expert_intermediate * max(spec.moe.num_shared_experts, 1)]
    if tp > 1 and any(i % tp for i in inter if i):
        raise SpecError(where, "dense_intermediate", f"FFN widths divisible by tp ({tp})", inter)
    if moe_tp > 1 and spec.moe.expert_intermediate % moe_tp:
        raise SpecError(where, "moe.expert_intermediate", f"a multiple of the expert-TP size ({moe_tp})",
                        spec.moe.expert_intermediate)


def apply_tp(model, par: Parallel) -> None:
    """Shard a built Model for `par` in place and install `par` as its collective hooks."""
    spec = model.spec
    check_shardable(spec, par.tp, par.moe_tp)
    for layer in model.layers:
        if par.tp > 1:
            shard_attention(layer.attn, par.tp, par.tp_rank)
            for mlp in (getattr(layer, "ffn", None), getattr(layer, "shared", None)):
                if mlp is not None:
                    shard_mlp(mlp, par.tp, par.tp_rank)
        if not layer.dense and par.moe_tp > 1:
            shard_experts(layer.experts, par.moe_tp, par.moe_tp_rank)
    if par.tp > 1 and spec.vocab_size % par.tp == 0:
        model.head = _cols(model.head, par.tp, par.tp_rank)
        par.vocab_sharded = True
    model.par = par
