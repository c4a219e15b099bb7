"""One serving step on one instance: prefill, decode, or both (chunked prefill), priced per op.

DP attention runs on each rank's own sequences; the MoE is one EP group over all ranks, so the
step waits for the slowest rank's attention and for the busiest expert rank (imbalance factor).
Dual-batch overlap splits the batch in two and hides one half's all-to-all behind the other's
compute; speculation verifies 1 + d tokens per sequence and adds the drafter's cost.

A step (sim/cost/batch.py) is a few distinct per-rank works, each run by some of the DP ranks.
The ops of a layer group (rackplan/specs/ops.py) are priced once per distinct work in plain
floats; the routed experts and the all-to-all see the global token count. `StepModel` holds what
a layout's prices depend on besides the batch, built once per `CostContext`. A `RankBatch`
(per-sequence chunks, as measured steps have them) reduces to a `Step`: one set of formulas.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from rackplan.specs import DTYPE_BYTES, HardwareSpec, Layout, ModelSpec, Profile, ops

from . import attention as attn
from . import efficiency
from .alltoall import A2APhase, a2a_phase
from .batch import RankBatch, RankWork, Step
from .host import host_seconds, loop_seconds, step_seconds
from .imbalance import imbalance_curve
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

    @cached_property
    def step_model(self) -> "StepModel":
        """This context's StepModel, built on first use."""
        return StepModel(self)


RANK_MEMO = 100_000  # remembered rank works (and GEMM, EP-group prices) per StepModel, under ~1 KB each


@dataclass(frozen=True)
class _Group:
    """Layers of a step that see the same tokens on a rank: their GEMM ops and attention."""

    n_dense: int
    n_moe: int
    gemms: tuple["_GemmOp", ...]
    attention: tuple  # (KV component, layers)
    prefill_tokens: bool  # prompt tokens run these layers (and their prefill attention)


class _GemmOp:
    """The weight GEMMs of one op ([m, k] x [k, n] each, bf16 activations in and out) over its
    layers, priced at m tokens per rank; remembered per m (full prefill ranks repeat it)."""

    __slots__ = ("name", "layers", "rows", "hw", "prof", "memo")

    def __init__(self, op: ops.ModelOp, hw: HardwareSpec, prof: Profile):
        self.name, self.layers, self.hw, self.prof = op.name, op.layers, hw, prof
        self.rows = tuple((2.0 * g.k * g.n, g.weight_bytes, (g.k + g.n) * 2.0, hw.flops_for(g.compute_dtype),
                           g.compute_dtype, g.n, g.k) for g in op.gemms)
        self.memo: dict[float, tuple[float, float, float]] = {}

    def at(self, m: float) -> tuple[float, float, float]:
        """Seconds, flops, bytes over the op's layers at m tokens."""
        hit = self.memo.get(m)
        if hit is None:
            prof, hw = self.prof, self.hw
            sec = fl = by = 0.0
            for per_tok, wbytes, act, peak, dtype, n, k in self.rows:
                f, b = per_tok * m, wbytes + m * act
                sec += price(f, b, peak, efficiency.gemm(prof, dtype, m, n, k), hw, prof)
                fl += f
                by += b
            if len(self.memo) >= RANK_MEMO:
                self.memo.clear()
            hit = self.memo[m] = (sec * self.layers, fl * self.layers, by * self.layers)
        return hit


class StepModel:
    """Prices any step of one layout: the op list and constants of a CostContext, built once."""

    def __init__(self, cx: CostContext):
        self.cx = cx = replace(cx)  # a copy that does not cache this model: no reference cycle
        m, lay, hw = cx.model, cx.layout, cx.hw
        self.q = 1.0 + (lay.speculation.num_tokens if lay.speculation else 0)
        full = m.layers_in("decode")
        self.groups_decode = (self._group(*full, False),)
        self.groups_prefill = (self._group(*full, True),)
        if m.prefill_layers is not None:  # V4.1: prompt tokens run only the encoder half
            enc = m.layers_in("prefill")
            self.groups_prefill = (self._group(*enc, True), self._group(full[0] - enc[0], full[1] - enc[1], False))
        step_ops = {op.name: op for op in ops.model_ops(m, lay, "decode")}
        self.lm_head = _GemmOp(step_ops["lm_head"], hw, cx.prof)
        self.draft_passes = step_ops["draft"].layers if "draft" in step_ops else 0
        self.imbalance = imbalance_curve(m.moe.top_k, m.moe.num_experts, lay.ep_size, cx.skew,
                                         lay.eplb.redundant_experts, lay.eplb.policy, lay.moe_imbalance,
                                         hw.gpus_per_node, m.moe.num_groups)
        self.expert_bytes = expert_bytes(m)
        self._a2a: dict[tuple[str, str], A2APhase | None] = {}
        self._fixed = {name: ops.op_layers(name, *full) for name in ops.BY_NAME}
        self._ranks: dict = {}
        self._moes: dict = {}
        self._half_memo: dict = {}
        self.loop_s = loop_seconds(lay, cx.prof)

    def _group(self, n_dense: int, n_moe: int, prefill_tokens: bool) -> _Group:
        cx = self.cx
        m = cx.model
        n_layers = n_dense + n_moe
        gemms = tuple(_GemmOp(op, cx.hw, cx.prof) for op in ops.layer_gemms(m, cx.layout, n_dense, n_moe))
        scale = n_layers / m.num_layers
        layers = tuple((c, max(1, round(c.layers * scale)) if scale < 1 else c.layers) for c in m.attention.kv)
        return _Group(n_dense, n_moe, gemms, layers if n_layers else (), prefill_tokens)

    def a2a(self, kernel: str, phase: str) -> A2APhase | None:
        key = (kernel, phase)
        if key not in self._a2a:
            cx = self.cx
            self._a2a[key] = a2a_phase(cx.model, cx.layout, cx.hw, cx.prof, phase, kernel)
        return self._a2a[key]

    # -- per rank --------------------------------------------------------------------------------
    def _rank(self, w: RankWork, groups, phase: str) -> tuple[float, dict[str, list]]:
        """(total seconds, name -> [seconds, flops, bytes]) of one rank's ops (corrections applied);
        a pure function of the work, remembered (a simulation sees the same rank work often)."""
        key = (w, phase)
        hit = self._ranks.get(key)
        if hit is None:
            if len(self._ranks) >= RANK_MEMO:
                self._ranks.clear()
            hit = self._ranks[key] = self._price_rank(w, groups, phase)
        return hit

    def _price_rank(self, w: RankWork, groups, phase: str) -> tuple[float, dict[str, list]]:
        cx = self.cx
        m, hw, prof, tp = cx.model, cx.hw, cx.prof, cx.layout.tp
        dec_tokens = w.dec_seqs * self.q
        pre_tokens = w.pre_tokens
        out: dict[str, list] = {}

        def add(name, sec, fl, by):
            rec = out.get(name)
            if rec is None:
                out[name] = [sec, fl, by]
            else:
                rec[0] += sec
                rec[1] += fl
                rec[2] += by

        for g in groups:
            tokens = dec_tokens + pre_tokens if g.prefill_tokens else dec_tokens
            if tokens > 0:
                for op in g.gemms:
                    add(op.name, *op.at(tokens))
            for comp, layers in g.attention:
                if w.dec_seqs > 0:
                    add("attn.core", *attn.decode_component(m, comp, w.dec_seqs, w.dec_ctx, self.q, tp, layers,
                                                            hw, prof))
                if g.prefill_tokens and w.chunks:
                    add("attn.core", *attn.prefill_component(m, comp, w.chunks, tp, layers, hw, prof))
            if g.n_moe and m.extra_bytes_per_token and tokens > 0:
                by = tokens * m.extra_bytes_per_token / g.n_moe
                add("engram", price(0.0, by, 1.0, 1.0, hw, prof) * g.n_moe, 0.0, by * g.n_moe)
        head_m = dec_tokens + w.pre_seqs
        if head_m > 0:
            add("lm_head", *self.lm_head.at(head_m))
        if self.draft_passes and w.dec_seqs > 0:
            add("draft", *self._draft(w.dec_seqs))
        total = 0.0
        for name, rec in out.items():
            rec[0] = self._corrected(name, rec[0], phase, self._fixed[name])
            total += rec[0]
        return total, out

    def _draft(self, dec_seqs: float) -> tuple[float, float, float]:
        """The drafter over its passes: MTP one module pass per draft token, a block drafter its stages."""
        cx = self.cx
        d, prof = cx.model.draft, cx.prof
        rows = dec_seqs * (d.num_tokens if d.kind == "draft_model" else 1)
        fl = 2.0 * d.active_params * rows
        by = min(d.total_params, d.active_params * max(rows, 1.0)) * DTYPE_BYTES[d.weight_dtype]
        sec = price(fl, by, cx.hw.flops_for(cx.model.dtypes.compute), efficiency.gemm(prof, d.weight_dtype, rows),
                    cx.hw, prof)
        p = self.draft_passes
        return sec * p, fl * p, by * p

    def _corrected(self, name: str, sec: float, phase: str, layers: int) -> float:
        """Fitted per-op corrections: seconds x op_scale + op_fixed x layers, where the op has work.
        A key "op/phase" (phase: prefill for any step with prompt tokens, else decode) wins over "op"."""
        prof = self.cx.prof
        if not (prof.op_scale or prof.op_fixed):
            return sec
        f = prof.op_scale.get(f"{name}/{phase}", prof.op_scale.get(name, 1.0))
        fixed = prof.op_fixed.get(f"{name}/{phase}", prof.op_fixed.get(name, 0.0))
        return sec * f + (fixed * layers if sec > 0 else 0.0)

    # -- the EP group --------------------------------------------------------------------------------
    def _moe(self, t_global: float, t_max: float, n_moe: int, kernel: str, phase: str) -> tuple:
        """(experts, dispatch, combine seconds, experts flops, bytes) over `n_moe` layers: routed
        experts on the busiest EP rank + the all-to-all; remembered like rank works."""
        key = (t_global, t_max, n_moe, kernel, phase)
        hit = self._moes.get(key)
        if hit is None:
            if len(self._moes) >= RANK_MEMO:
                self._moes.clear()
            hit = self._moes[key] = self._price_moe(t_global, t_max, n_moe, kernel, phase)
        return hit

    def _price_moe(self, t_global: float, t_max: float, n_moe: int, kernel: str, phase: str) -> tuple:
        cx = self.cx
        m, hw, prof, lay = cx.model, cx.hw, cx.prof, cx.layout
        ep = lay.ep_size
        f = self.imbalance(t_global)
        busiest = t_global * m.moe.top_k / ep * f  # token-expert pairs on the busiest rank
        distinct = max(distinct_experts_per_rank(m, lay, t_global), 1.0)
        h, inter = m.hidden_size, m.moe.expert_intermediate
        flops = 2.0 * busiest * 3 * h * inter
        nbytes = distinct * self.expert_bytes + busiest * (2 * h + 3 * inter) * 2.0
        dtype = m.dtypes.expert_compute_dtype
        eff = efficiency.experts(prof, dtype, busiest / distinct, 2 * inter, h, flops=flops)
        t_exp = price(flops, nbytes, hw.flops_for(dtype), eff, hw, prof)
        send = max(t_max, t_global / ep * f)
        disp, comb = self.a2a(kernel, "dispatch"), self.a2a(kernel, "combine")
        t_disp = disp.seconds(send) if disp else 0.0
        t_comb = comb.seconds(send) if comb else 0.0
        t_perm = moved = 0.0
        if ep == 1:  # no all-to-all: token copies are gathered into expert order and summed back locally
            # permute reads each token and writes top_k copies, unpermute reads them and writes the sum
            moved = t_global * h * DTYPE_BYTES[m.dtypes.activations] * (3 * m.moe.top_k + 1)
            t_perm = self._corrected("moe.permute", price(0.0, moved, 1.0, 1.0, hw, prof) * n_moe, phase, n_moe)
        return (self._corrected("moe.experts", t_exp * n_moe, phase, n_moe),
                self._corrected("moe.dispatch", t_disp * n_moe, phase, n_moe),
                self._corrected("moe.combine", t_comb * n_moe, phase, n_moe), flops * n_moe, nbytes * n_moe,
                t_perm, moved * n_moe)

    # -- the step --------------------------------------------------------------------------------------
    def device(self, step: Step) -> tuple[float, float, dict[str, list], list[tuple]]:
        """(compute seconds, communication seconds, the slowest rank's ops, the EP group's ops per
        MoE layer group) of one step without overlap or host time."""
        has_pre = step.has_prefill
        groups = self.groups_prefill if has_pre else self.groups_decode
        phase = "prefill" if has_pre else "decode"
        slowest, rank_ops = -1.0, {}
        for w in step.works:
            total, out = self._rank(w, groups, phase)
            if total > slowest:
                slowest, rank_ops = total, out
        experts_s = comm = 0.0
        moe = []
        for g in groups:
            if not g.n_moe:
                continue
            toks = [w.dec_seqs * self.q + (w.pre_tokens if g.prefill_tokens else 0.0) for w in step.works]
            t_global = sum(t * r for t, r in zip(toks, step.ranks))  # DP ranks hold distinct tokens
            if t_global > 0:
                kernel = "high_throughput" if g.prefill_tokens else "low_latency"
                res = self._moe(t_global, max(toks), g.n_moe, kernel, phase)
                moe.append((g.n_moe,) + res)
                experts_s += res[0] + res[5]  # experts, and at EP1 the local permute
                comm += res[1]
                comm += res[2]
        return slowest + experts_s, comm, rank_ops, moe

    def price(self, step: Step) -> StepCost:
        """Seconds of one step on the instance (slowest rank), with its op breakdown."""
        total, gpu, dbo, (compute, comm, rank_ops, moe) = self._evaluate(step)
        ops_ = [Op(name, ops.BY_NAME[name].kind, *rec) for name, rec in rank_ops.items()]
        for n_moe, t_exp, t_disp, t_comb, flops, nbytes, t_perm, moved in moe:
            ops_.append(Op("moe.experts", "gemm", t_exp, flops, nbytes, n_moe))
            if moved:  # EP1: the local permute instead of an all-to-all
                ops_.append(Op("moe.permute", "mem", t_perm, 0.0, moved, n_moe))
            else:
                ops_ += [Op("moe.dispatch", "comm", t_disp, count=n_moe),
                         Op("moe.combine", "comm", t_comb, count=n_moe)]
        if dbo:
            ops_.append(Op("dbo.overlap", "comm", gpu - (compute + comm)))
        ops_.append(Op("host.exposed", "cpu", total - gpu))
        return StepCost(total, tuple(ops_), self.loop_s)

    def period(self, step: Step) -> float:
        """StepCost.period_s of `price(step)`, without building its op breakdown."""
        return self._evaluate(step)[0] + self.loop_s

    def _halves(self, step: Step) -> tuple[Step, Step]:
        """The two DBO micro-batches of a step (RankWork.half), each rank work's halves remembered
        (prefill works repeat)."""
        pairs = []
        for w in step.works:
            hit = self._half_memo.get(w)
            if hit is None:
                if len(self._half_memo) >= RANK_MEMO:
                    self._half_memo.clear()
                hit = self._half_memo[w] = (w.half(0), w.half(1))
            pairs.append(hit)
        return Step(tuple(h[0] for h in pairs), step.ranks), Step(tuple(h[1] for h in pairs), step.ranks)

    def _evaluate(self, step: Step) -> tuple:
        """(step seconds, device seconds, DBO applied, device(step)): overlap and host time."""
        cx = self.cx
        lay, prof = cx.layout, cx.prof
        dev = self.device(step)
        compute, comm = dev[0], dev[1]
        gpu = compute + comm
        dbo = lay.dbo and lay.ep_size > 1 and comm > 0
        if dbo:
            a, z = self._halves(step)
            c1, m1, _, _ = self.device(a)
            c2, m2, _, _ = self.device(z) if z != a else (c1, m1, None, None)  # even splits: one price
            gpu = max(c1 + c2, m1 + m2) + (1.0 - prof.dbo_efficiency) * min(c1 + c2, m1 + m2)
        batch = max(w.dec_seqs + w.pre_seqs for w in step.works)
        host = host_seconds(lay, prof, batch, cx.model.num_layers, lay.cuda_graphs and not step.has_prefill)
        return step_seconds(gpu, host, lay), gpu, dbo, dev


def step_cost(cx: CostContext, rb: RankBatch | Step) -> StepCost:
    """Seconds of one step on an instance (slowest rank), with its op breakdown."""
    return cx.step_model.price(rb.step() if isinstance(rb, RankBatch) else rb)


def op_layers(model: ModelSpec, name: str) -> int:
    """Layers of a step that run op `name`: what Profile.op_fixed is counted per. (A V4.1 prefill
    step without decode tokens counts its decoder half too: op_fixed is fitted on other models.)"""
    return ops.op_layers(name, *model.layers_in("decode"))


def decode_step(cx: CostContext, batch: float, ctx_sum: float) -> StepCost:
    """A decode step with the same batch and context sum on every DP rank."""
    return step_cost(cx, Step.uniform(cx.layout.dp, RankWork(float(batch), float(ctx_sum))))


def prefill_step(cx: CostContext, new_tokens, prefix=None) -> StepCost:
    """A prefill step with the same chunks (new tokens, prefix) on every DP rank."""
    new = [float(x) for x in np.asarray(new_tokens, float).reshape(-1)]
    pre = [0.0] * len(new) if prefix is None else [float(x) for x in np.asarray(prefix, float).reshape(-1)]
    chunks = tuple((1, n, p) for n, p in zip(new, pre))
    return step_cost(cx, Step.uniform(cx.layout.dp, RankWork(0.0, 0.0, chunks)))
