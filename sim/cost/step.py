"""One serving step on one instance: prefill, decode, or both (chunked prefill), priced per op.

DP attention runs on each rank's own sequences; the MoE is one EP group over all ranks, so the
step waits for the slowest rank's attention and for the busiest expert rank (imbalance factor).
Dual-batch overlap splits the batch in two and hides one half's all-to-all behind the other's
compute; speculation verifies 1 + d tokens per sequence and adds the drafter's cost.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from rackplan.specs import DTYPE_BYTES, HardwareSpec, Layout, ModelSpec, Profile, ops

from . import attention as attn
from . import efficiency
from .alltoall import a2a_seconds
from .host import combine_host, host_seconds
from .imbalance import imbalance_factor
from .moe import distinct_experts_per_rank, expert_bytes
from .roofline import Op, StepCost, price


@dataclass(frozen=True)
class CostContext:
    """What a step's price depends on besides the batch."""

    model: ModelSpec
    hw: HardwareSpec
    layout: Layout
    prof: Profile
    skew: float = 0.0


@dataclass
class RankBatch:
    """Work on each DP rank for one step: decode sequences and prefill chunks.

    dec_batch, dec_ctx: [R] running decode sequences and the sum of their contexts per rank.
    pre_new, pre_prefix: per rank, arrays over the prefill chunks (new tokens, tokens before).
    """

    dec_batch: np.ndarray
    dec_ctx: np.ndarray
    pre_new: list = field(default_factory=list)
    pre_prefix: list = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return len(self.dec_batch)

    def prefill_tokens(self) -> np.ndarray:  # [R]
        if not self.pre_new:
            return np.zeros(self.ranks)
        return np.array([float(np.sum(n)) for n in self.pre_new])

    def prefill_seqs(self) -> np.ndarray:  # [R]
        if not self.pre_new:
            return np.zeros(self.ranks)
        return np.array([float(len(n)) for n in self.pre_new])

    def halves(self) -> tuple["RankBatch", "RankBatch"]:
        """Two micro-batches for DBO: decode split evenly, prefill chunks alternately."""
        b, c = self.dec_batch / 2.0, self.dec_ctx / 2.0
        a = RankBatch(b, c, [n[0::2] for n in self.pre_new], [p[0::2] for p in self.pre_prefix])
        z = RankBatch(b, c, [n[1::2] for n in self.pre_new], [p[1::2] for p in self.pre_prefix])
        return a, z


def _gemm(m, k, n, wbytes, dtype, hw, prof, act=2.0):
    """Seconds of [m,k]x[k,n] per layer (array over ranks), and flops, bytes."""
    m = np.asarray(m, float)
    flops = 2.0 * m * k * n
    nbytes = k * n * wbytes + m * (k + n) * act
    sec = np.where(m > 0, price(flops, nbytes, hw.flops_for(dtype), efficiency.gemm(prof, dtype, m, n, k), hw, prof),
                   0.0)
    return sec, flops, nbytes


_TABLES: dict = {}


def _gemm_table(cx: CostContext, n_dense: int, n_moe: int):
    """Static shapes of a layer group's weight GEMMs, as column arrays [G, 1] (built once per spec)."""
    key = (id(cx.model), id(cx.layout), id(cx.hw), n_dense, n_moe)
    hit = _TABLES.get(key)
    if hit is not None and hit[0] is cx.model and hit[1] is cx.layout and hit[2] is cx.hw:
        return hit[3]
    m, hw, tp, dt = cx.model, cx.hw, cx.layout.tp, cx.model.dtypes
    h, moe = m.hidden_size, m.moe
    rows = [("attn.proj", k, n / tp, DTYPE_BYTES[dt.attention_weights], dt.compute, n_dense + n_moe)
            for _, k, n in m.attention.projections(h)]
    if n_dense:
        rows.append(("dense_ffn", h, 3 * m.dense_intermediate / tp, DTYPE_BYTES[dt.dense_weights], dt.compute,
                     n_dense))
    if n_moe and moe.num_shared_experts:
        inter = moe.num_shared_experts * 3 * moe.expert_intermediate
        rows.append(("shared_expert", h, inter / tp, DTYPE_BYTES[dt.dense_weights], dt.compute, n_moe))
    if n_moe:
        rows.append(("router", h, moe.num_experts, 4.0, "bf16", n_moe))
    names = list(dict.fromkeys(r[0] for r in rows))
    onehot = np.array([[1.0 if r[0] == name else 0.0 for r in rows] for name in names])  # [ops, G]
    col = lambda xs: np.array(xs, float)[:, None]  # noqa: E731
    table = (names, onehot, col([r[1] for r in rows]), col([r[2] for r in rows]),
             col([r[1] * r[2] * r[3] for r in rows]), col([hw.flops_for(r[4]) for r in rows]),
             col([r[5] for r in rows]))
    _TABLES[key] = (cx.model, cx.layout, cx.hw, table)
    return table


def _gemm_block(cx: CostContext, acc: "_Acc", tokens: np.ndarray, n_dense: int, n_moe: int) -> None:
    """All weight GEMMs of a layer group for every rank at once: [G, R] roofline, summed per op."""
    names, onehot, k, n, wbytes, peak, layers = _gemm_table(cx, n_dense, n_moe)
    prof, hw = cx.prof, cx.hw
    mm = np.asarray(tokens, float)[None, :]  # [1, R]
    flops = 2.0 * mm * k * n  # [G, R]
    nbytes = wbytes + mm * (k + n) * 2.0
    t_c = flops / (peak * np.maximum(efficiency.gemm(prof, cx.model.dtypes.compute, mm, n, k), 1e-9))
    t_m = nbytes / (hw.hbm_bw * efficiency.memory(prof, nbytes))
    sec = np.where(mm > 0, np.maximum(t_c, t_m) + prof.op_fixed_s, 0.0) * layers
    acc.block(names, onehot @ sec, onehot @ (flops * layers), onehot @ (nbytes * layers))


class _Acc:
    """Accumulates per-rank op arrays; the slowest rank's total decides the step."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self.rank_ops: dict[str, np.ndarray] = {}  # name -> [3, R] seconds, flops, bytes

    def rank(self, name, sec, flops, nbytes, layers):
        rec = np.empty((3, self.ranks))
        rec[0], rec[1], rec[2] = sec, flops, nbytes
        rec *= layers
        if name in self.rank_ops:
            self.rank_ops[name] += rec
        else:
            self.rank_ops[name] = rec

    def block(self, names, sec, flops, nbytes):
        for i, name in enumerate(names):
            self.rank(name, sec[i], flops[i], nbytes[i], 1.0)

    def slowest(self) -> tuple[float, list[Op]]:
        total = sum(rec[0] for rec in self.rank_ops.values())
        r = int(np.argmax(total))
        ops = [Op(name, "attn" if name == "attn.core" else "gemm", float(rec[0, r]), float(rec[1, r]),
                  float(rec[2, r])) for name, rec in self.rank_ops.items()]
        return float(total[r]), ops


def _layer_group(cx: CostContext, rb: RankBatch, acc: _Acc, n_dense: int, n_moe: int,
                 tokens: np.ndarray, with_prefill: bool, q: float) -> list[Op]:
    """Add one group of layers (same tokens per rank) to `acc`; return its MoE/a2a ops."""
    m, hw, prof, lay = cx.model, cx.hw, cx.prof, cx.layout
    tp = lay.tp
    n_layers = n_dense + n_moe
    if n_layers == 0:
        return []
    _gemm_block(cx, acc, tokens, n_dense, n_moe)
    scale = n_layers / m.num_layers
    for comp in m.attention.kv:
        layers = max(1, round(comp.layers * scale)) if scale < 1 else comp.layers
        if np.any(rb.dec_batch > 0):
            sec, fl, by = attn.decode_component(m, comp, rb.dec_batch, rb.dec_ctx, q, tp, layers, hw, prof)
            acc.rank("attn.core", sec, fl, by, 1)
        if with_prefill and rb.pre_new:
            res = [attn.prefill_component(m, comp, n, p, tp, layers, hw, prof)
                   for n, p in zip(rb.pre_new, rb.pre_prefix)]
            acc.rank("attn.core", *[np.array(x) for x in zip(*res)], 1)
    if n_moe == 0:
        return []
    if m.extra_bytes_per_token:
        by = tokens * m.extra_bytes_per_token / max(n_moe, 1)
        acc.rank("engram", np.where(tokens > 0, price(0.0, by, 1.0, 1.0, hw, prof), 0.0), 0.0, by, n_moe)
    return _moe_global(cx, tokens, n_moe, kernel="high_throughput" if with_prefill else "low_latency")


def _moe_global(cx: CostContext, tokens: np.ndarray, n_moe: int, kernel: str) -> list[Op]:
    """Routed experts on the busiest EP rank + dispatch/combine, over `n_moe` layers."""
    m, hw, prof, lay = cx.model, cx.hw, cx.prof, cx.layout
    t_global = float(np.sum(tokens))  # DP ranks hold distinct tokens
    if t_global <= 0:
        return []
    ep = lay.ep_size
    f = imbalance_factor(t_global, m.moe.top_k, m.moe.num_experts, ep, cx.skew,
                         lay.eplb.redundant_experts, lay.eplb.policy, lay.moe_imbalance,
                         gpus_per_node=hw.gpus_per_node, num_groups=m.moe.num_groups)
    busiest = t_global * m.moe.top_k / ep * f  # token-expert pairs on the busiest rank
    distinct = max(distinct_experts_per_rank(m, lay, t_global), 1.0)
    h, inter = m.hidden_size, m.moe.expert_intermediate
    flops = 2.0 * busiest * 3 * h * inter
    nbytes = distinct * expert_bytes(m) + busiest * (2 * h + 3 * inter) * 2.0
    eff = efficiency.experts(prof, m.dtypes.expert_compute_dtype, busiest / distinct, 2 * inter, h)
    t_exp = float(price(flops, nbytes, hw.flops_for(m.dtypes.expert_compute_dtype), eff, hw, prof))
    ops = [Op("moe.experts", "gemm", t_exp * n_moe, flops * n_moe, nbytes * n_moe, n_moe)]
    if ep == 1:  # no all-to-all: token copies are gathered into expert order and summed back locally
        act = DTYPE_BYTES[m.dtypes.activations]
        moved = t_global * h * act * (3 * m.moe.top_k + 1)  # permute read + write, unpermute read, write
        t_perm = float(price(0.0, moved, 1.0, 1.0, hw, prof))
        return ops + [Op("moe.permute", "mem", t_perm * n_moe, 0.0, moved * n_moe, n_moe)]
    send = max(float(np.max(tokens)), t_global / ep * f)
    t_disp = a2a_seconds(m, lay, hw, prof, send, "dispatch", kernel)
    t_comb = a2a_seconds(m, lay, hw, prof, send, "combine", kernel)
    return ops + [Op("moe.dispatch", "comm", t_disp * n_moe, count=n_moe),
                  Op("moe.combine", "comm", t_comb * n_moe, count=n_moe)]


def op_layers(model: ModelSpec, name: str) -> int:
    """Layers of a step that run op `name`: what Profile.op_fixed is counted per. (A V4.1 prefill
    step without decode tokens counts its decoder half too: op_fixed is fitted on other models.)"""
    return ops.op_layers(name, *model.layers_in("decode"))


def _calibrated(cx: CostContext, acc: _Acc, moe_ops: list[Op], phase: str) -> list[Op]:
    """Fitted per-op corrections: seconds x op_scale + op_fixed x layers, where the op has work.
    A key "op/phase" (phase: prefill for any step with prompt tokens, else decode) wins over "op"."""
    prof = cx.prof

    def get(table: dict, name: str, default: float) -> float:
        return table.get(f"{name}/{phase}", table.get(name, default))

    for name, rec in acc.rank_ops.items():
        f, fixed = get(prof.op_scale, name, 1.0), get(prof.op_fixed, name, 0.0)
        if fixed:
            rec[0] = rec[0] * f + np.where(rec[0] > 0, fixed * op_layers(cx.model, name), 0.0)
        elif f != 1.0:
            rec[0] *= f
    return [dataclasses.replace(op, seconds=op.seconds * get(prof.op_scale, op.name, 1.0)
                                + (get(prof.op_fixed, op.name, 0.0) * op.count if op.seconds > 0 else 0.0))
            for op in moe_ops]


def _device(cx: CostContext, rb: RankBatch) -> tuple[float, float, list[Op]]:
    """(compute seconds, communication seconds, ops) of one step without overlap or host time."""
    m, lay = cx.model, cx.layout
    q = 1.0 + (lay.speculation.num_tokens if lay.speculation else 0)
    dec_tokens = rb.dec_batch * q
    pre_tokens = rb.prefill_tokens()
    has_pre = bool(np.any(pre_tokens > 0))
    acc = _Acc(rb.ranks)
    moe_ops: list[Op] = []
    if has_pre and m.prefill_layers is not None:
        # V4.1: prompt tokens run only the encoder half; the rest of the layers see decode tokens
        pd, pm = m.layers_in("prefill")
        dd, dm = m.layers_in("decode")
        groups = [(pd, pm, dec_tokens + pre_tokens, True), (dd - pd, dm - pm, dec_tokens, False)]
        rest = RankBatch(rb.dec_batch, rb.dec_ctx)
    else:
        dd, dm = m.layers_in("decode")
        groups = [(dd, dm, dec_tokens + pre_tokens, has_pre)]
        rest = rb
    for i, (nd, nm, tok, with_pre) in enumerate(groups):
        moe_ops += _layer_group(cx, rb if i == 0 else rest, acc, nd, nm, tok, with_pre, q)
    head_m = dec_tokens + rb.prefill_seqs()
    sec, fl, by = _gemm(head_m, m.hidden_size, m.vocab_size / lay.tp, 2.0, "bf16", cx.hw, cx.prof)
    acc.rank("lm_head", sec, fl, by, 1)
    if lay.speculation is not None and m.draft is not None and np.any(rb.dec_batch > 0):
        d = m.draft
        dm_ = rb.dec_batch * (d.num_tokens if d.kind == "draft_model" else 1)
        wb = DTYPE_BYTES[d.weight_dtype]
        fl = 2.0 * d.active_params * dm_
        by = np.minimum(d.total_params, d.active_params * np.maximum(dm_, 1.0)) * wb
        sec = np.where(dm_ > 0, price(fl, by, cx.hw.flops_for(m.dtypes.compute),
                                      efficiency.gemm(cx.prof, d.weight_dtype, dm_),
                                      cx.hw, cx.prof), 0.0)
        # MTP runs one module pass per draft token; a block drafter runs its fixed stage count
        passes = lay.speculation.num_tokens if d.kind == "mtp" else d.forward_passes
        acc.rank("draft", sec, fl, by, passes)
    if cx.prof.op_scale or cx.prof.op_fixed:  # calibrated per-op corrections
        moe_ops = _calibrated(cx, acc, moe_ops, "prefill" if has_pre else "decode")
    rank_s, rank_ops = acc.slowest()
    comm = sum(op.seconds for op in moe_ops if op.kind == "comm")
    compute = rank_s + sum(op.seconds for op in moe_ops if op.kind != "comm")
    return compute, comm, rank_ops + moe_ops


def step_cost(cx: CostContext, rb: RankBatch) -> StepCost:
    """Seconds of one step on an instance (slowest rank), with its op breakdown."""
    lay, prof = cx.layout, cx.prof
    compute, comm, ops = _device(cx, rb)
    gpu = compute + comm
    if lay.dbo and lay.ep_size > 1 and comm > 0:
        (c1, m1, _), (c2, m2, _) = (_device(cx, h) for h in rb.halves())
        overlapped = max(c1 + c2, m1 + m2) + (1.0 - prof.dbo_efficiency) * min(c1 + c2, m1 + m2)
        ops = ops + [Op("dbo.overlap", "comm", overlapped - gpu)]
        gpu = overlapped
    has_pre = bool(np.any(rb.prefill_tokens() > 0))
    batch = float(np.max(rb.dec_batch + rb.prefill_seqs()))
    graphs = lay.cuda_graphs and not has_pre
    host = host_seconds(lay, prof, batch, cx.model.num_layers, graphs)
    total = combine_host(gpu, host, lay.async_scheduling)
    ops = ops + [Op("host.exposed", "cpu", total - gpu)]
    return StepCost(total, tuple(ops))


def decode_step(cx: CostContext, batch: float, ctx_sum: float) -> StepCost:
    """A decode step with the same batch and context sum on every DP rank."""
    r = cx.layout.dp
    return step_cost(cx, RankBatch(np.full(r, float(batch)), np.full(r, float(ctx_sum))))


def prefill_step(cx: CostContext, new_tokens, prefix=None) -> StepCost:
    """A prefill step with the same chunks (new tokens, prefix) on every DP rank."""
    new = np.asarray(new_tokens, float).reshape(-1)
    pre = np.zeros_like(new) if prefix is None else np.asarray(prefix, float).reshape(-1)
    r = cx.layout.dp
    return step_cost(cx, RankBatch(np.zeros(r), np.zeros(r), [new] * r, [pre] * r))
