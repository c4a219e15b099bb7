"""One serving step on one instance: prefill, decode, or both (chunked prefill), priced per op.

DP attention runs on each rank's own sequences; the MoE is one EP group over all ranks, so the
step waits for the slowest rank's attention and for the busiest expert rank (imbalance factor).
Under TP (dp = 1) every rank holds the step's tokens: attention and FFN outputs are all-reduced
and the experts (EP over the TP ranks, or each sharded tp ways) need no all-to-all. Dual-batch
overlap is sim/cost/dbo.py; speculation verifies 1 + d tokens per sequence and adds the drafter
(sim/cost/draft.py); pipeline stages run 1 / pp of the sequences each through 1 / pp of the layers.

A step (sim/cost/batch.py) is a few distinct per-rank works, each run by some of the DP ranks.
The ops of a layer group (rackplan/specs/ops.py) are priced once per distinct work in plain
floats (sim/cost/layer.py); the routed experts and the all-to-all see the global token count. Every
op of the op list is priced by the function registered under its name (sim/cost/prices.py).
`StepModel` holds what a layout's prices depend on besides the batch, built once per
`CostContext`. A `RankBatch` (per-sequence chunks, as measured steps have them) reduces to a
`Step`: one set of formulas.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from rackplan.specs import HardwareSpec, Layout, ModelSpec, Profile, ops

from . import dbo as dbo_
from . import efficiency
from .alltoall import A2APhase, RingPhase, a2a_phase
from .batch import RankBatch, RankWork, Step
from .draft import drafter
from .elementwise import stream_seconds_at
from .host import HostModel, HostTime
from .imbalance import imbalance_curve
from .layer import RANK_MEMO, LayerPricer, memo_get
from .memory import offloaded_bytes
from .moe import distinct_experts_busiest, expert_work, holder_hit_probability, physical_experts_per_rank
from .prices import PRICES, EPSide, EPWork
from .roofline import Op, StepCost

__all__ = ["CostContext", "RankBatch", "RankWork", "Step", "StepCost", "StepModel", "step_cost", "op_layers",
           "decode_step", "prefill_step", "RANK_MEMO", "price_key"]


@dataclass(frozen=True)
class CostContext:
    """What a step's price depends on besides the batch."""

    model: ModelSpec
    hw: HardwareSpec
    layout: Layout
    prof: Profile
    skew: float = 0.0
    # CPU rigs: how much slower each busy rank runs for sharing cores with the plan's other ranks
    # (sim/cost/cores.core_share); 1 elsewhere
    core_share: float = 1.0

    @cached_property
    def step_model(self) -> "StepModel":
        """This context's StepModel, built on first use."""
        return StepModel(self)


STAGE = {name: op.stage for name, op in ops.BY_NAME.items()}  # op name -> where it runs in a layer (DBO)
HOST_ONLY: dict[str, Any] = {"api_servers": None, "stream_interval": 1, "async_scheduling": True, "cuda_graphs": True}


def host_only(layout: Layout) -> Layout:
    """The layout with its host settings at their defaults: layouts equal here price the same device step."""
    return replace(layout, **HOST_ONLY)


def price_key(layout: Layout) -> Layout:
    """The layout with what never enters a step's price at fixed values: its replicas and its batch and
    token caps (they bound which steps an instance runs, sim/decode.py and sim/prefill.py, and its KV room,
    sim/cost/memory.py; not what a given step costs). Layouts equal here price every step the same."""
    return replace(layout, replicas=1, max_batch_per_rank=Layout.max_batch_per_rank,
                   max_tokens_per_step=Layout.max_tokens_per_step)


class Device(NamedTuple):
    """A step's device work without overlap or host time: the slowest rank's ops, the EP group's
    per MoE layer group, the step-level extras, and their seconds summed. (A NamedTuple, as
    _Evaluated: built a few times per priced step, where a frozen dataclass costs ~10x more.)"""

    rank_ops: dict
    moe: list
    extra: list  # (name, seconds, flops, bytes) priced for the whole step (drafter)
    seconds: float
    kernel: str  # all-to-all kernel kind of the step
    work: RankWork | None  # the slowest rank's work (None: no ranks)


class StepModel:
    """Prices any step of one layout: the op list and constants of a CostContext, built once."""

    def __init__(self, cx: CostContext):
        self.cx = cx = replace(cx)  # a copy that does not cache this model: no reference cycle
        m, lay, hw, prof = cx.model, cx.layout, cx.hw, cx.prof
        self.q = float(lay.queries_per_step)
        self.layers = LayerPricer(cx, self.q)
        step_ops = {op.name: op for op in ops.model_ops(m, lay, "decode")}
        # the EP group's ops (op, price function) in list order, and whether an all-to-all is among them
        # (not under TP, where every rank holds the step's tokens, nor without EP)
        self._ep_ops = tuple((name, PRICES[name].fn) for name in step_ops if PRICES[name].site == "ep")
        self.all_to_all = "moe.dispatch" in step_ops
        self.gathered = self.all_to_all and lay.all2all == "allgather_reducescatter"  # NCCL AG/RS, not DeepEP
        self._step_ops = tuple((op, PRICES[op.name].fn) for op in step_ops.values() if PRICES[op.name].site == "step")
        self.drafter = drafter(m, lay, step_ops["draft"].layers, self.all_to_all) if "draft" in step_ops else None
        self.imbalance = imbalance_curve(m.moe.top_k, m.moe.num_experts, lay.ep_size, cx.skew,
                                         lay.eplb.redundant_experts, lay.eplb.policy, lay.moe_imbalance,
                                         hw.gpus_per_node, m.moe.num_groups)
        self._a2a: dict[tuple[str, str], A2APhase | RingPhase | None] = {}
        self._sides: dict[str, EPSide] = {}  # all-to-all kernel -> what the EP ops are priced with
        # high-throughput dispatch: copies a rank receives per token-expert pair (one per rank hit)
        self.copies_per_pick = lay.ep_size * holder_hit_probability(m, 1.0 / lay.ep_size) / m.moe.top_k
        self._moes: dict = {}
        self._varies_at: dict[float, bool] = {}  # a step's global tokens -> _varies
        self._half_memo: dict = {}  # rank work -> its DBO halves, and whether they are equal (_halves)
        self._rank_stages: dict = {}  # (rank work, phase) -> its ops' seconds per stage (_stages)
        self.ep_size = lay.ep_size
        # share of the SMs an overlapping all-to-all takes, per whether a step has prompt tokens (its kernel)
        self._sm_share = {pre: dbo_.comm_sm_share(kernel, hw) for pre, kernel in KERNEL.items()}
        # per all-to-all kernel, the factor on DeepGEMM ops' seconds in a split step, and those ops (dbo module)
        self._gemm_scale = {kernel: dbo_.deepgemm_sm_scale(kernel, hw) for kernel in KERNEL.values()}
        self._deepgemm = dbo_.deepgemm_ops(m)
        self.n_moe = sum(g.n_moe for g in self.layers.groups_decode)  # MoE layers of a step
        n_dense, n_moe = m.layers_in("decode")
        self._dense_layers = n_dense, max(n_dense + n_moe, 1)  # (dense layers, all layers at least one): _stages
        # per phase, (MoE layers, whether prompt tokens run them) of the layer groups with MoE layers
        self._moe_groups = {pre: tuple((g.n_moe, g.prefill_tokens) for g in groups if g.n_moe)
                            for pre, groups in ((False, self.layers.groups_decode), (True, self.layers.groups_prefill))}
        self.host = HostModel(prof.host_for(lay.role), lay, m.num_layers, hw.gpus_per_node, hw.host_overlap)
        off = offloaded_bytes(m, lay)
        self.offload_s = off / (hw.host_link_bw * efficiency.memory(prof, off)) if off else 0.0
        self.gap_s = prof.eager_kernel_gap_s * prof.host.kernels_per_layer  # per layer of an eager step
        self.local_experts = physical_experts_per_rank(m, lay)  # the experts kernel's local experts (tile_load)

    def variant(self, layout: Layout) -> "StepModel":
        """This model for `layout`, a layout that differs only in host settings (frontend, async
        scheduling, CUDA graphs: HOST_ONLY): the device pricing and its memos are shared."""
        assert host_only(layout) == host_only(self.cx.layout), "variant differs in more than host settings"
        new = copy.copy(self)
        new.cx = replace(self.cx, layout=layout)
        hw = self.cx.hw
        new.host = HostModel(self.cx.prof.host_for(layout.role), layout, self.cx.model.num_layers, hw.gpus_per_node,
                             hw.host_overlap)
        return new

    def a2a(self, kernel: str, phase: str) -> A2APhase | RingPhase | None:
        """The all-to-all's dispatch or combine phase with `kernel` (None: the op list has none)."""
        key = (kernel, phase)
        if key not in self._a2a:
            cx = self.cx
            self._a2a[key] = a2a_phase(cx.model, cx.layout, cx.hw, cx.prof, phase, kernel) if self.all_to_all else None
        return self._a2a[key]

    def ep_side(self, kernel: str) -> EPSide:
        """What the EP ops are priced with in a step of all-to-all `kernel`: the expert GEMM's efficiency
        curves bound to its shape (n, k: fixed per layout, moe.expert_work), the routing's stream curve,
        the all-to-all's phases."""
        side = self._sides.get(kernel)
        if side is None:
            cx = self.cx
            m, hw, prof = cx.model, cx.hw, cx.prof
            deepep = self.all_to_all and not self.gathered  # (a backend class runs behind DeepEP only)
            side = EPSide(m, hw, prof, cx.layout.moe_tp, self.local_experts,
                          backend=efficiency.expert_backend(cx.layout, cx.hw), a2a_kernel=kernel if deepep else "")
            _, _, _, n, k = expert_work(m, 1.0, 1.0, side.moe_tp)
            side = self._sides[kernel] = side._replace(
                experts_curve=efficiency.experts_at(prof, side.kernel_dtype(), n, k, hw.num_sms),
                route_stream=stream_seconds_at(hw, prof, f"moe.route.{side.kernel_dtype()}", m.hidden_size),
                dispatch=self.a2a(kernel, "dispatch"), combine=self.a2a(kernel, "combine"))
        return side

    # -- the EP group --------------------------------------------------------------------------------
    def _moe(self, t_global: float, t_max: float, n_moe: int, kernel: str, phase: str, z: float) -> tuple:
        """(n_moe, experts, route, dispatch, combine seconds, experts flops, bytes, route bytes, dispatch and
        combine send-kernel seconds) over `n_moe` layers (a Device.moe entry): routed experts on the busiest
        EP rank, its routing, the all-to-all; remembered."""
        key = (t_global, t_max, n_moe, kernel, phase, z)
        hit = self._moes.get(key)
        return hit if hit is not None else memo_get(self._moes, key, lambda: self._price_moe(t_global, t_max, n_moe,
                                                                                            kernel, phase, z))

    def imbalance_at(self, t_global: float, n_moe: int, z: float = 0.0) -> float:
        """The busiest EP rank's max/mean load over a step of `n_moe` MoE layers: its expectation,
        `z` standard deviations of the per-step average away (z = 0: the mean, as the planner prices)."""
        f = self.imbalance(t_global)
        if z:
            f += z * self.imbalance.spread(t_global) / max(n_moe, 1) ** 0.5
        return f if f > 1.0 else 1.0

    def _price_moe(self, t_global: float, t_max: float, n_moe: int, kernel: str, phase: str, z: float) -> tuple:
        """The EP ops of the op list (prices.py, site "ep") on the busiest EP rank's work, over `n_moe` layers
        (ops the list lacks: 0 s)."""
        cx = self.cx
        m, lay = cx.model, cx.layout
        ep = self.ep_size
        f = self.imbalance_at(t_global, n_moe, z)
        busiest = t_global * m.moe.top_k / ep * f  # token-expert pairs on the busiest rank
        distinct = max(distinct_experts_busiest(m, lay, t_global), 1.0)
        if self.gathered:  # allgather_reducescatter: every rank's MoE layer (routing, kernel) takes all the step's
            tokens_in = rows = t_global  # tokens, and the ring gathers ep x the mean rank's tokens = t_global
            send = t_global / ep
        else:
            tokens_in = self._tokens_in(t_max, busiest, kernel)  # token copies the rank's MoE layer takes in
            rows, send = t_max, max(t_max / (1 if lay.dp == 1 else lay.tp), t_global / ep * f)
        side = self._sides.get(kernel) or self.ep_side(kernel)
        w = EPWork(busiest, distinct, tokens_in, rows, send)
        got = {name: fn(side, w) for name, fn in self._ep_ops}
        t_exp, flops, nbytes = got["moe.experts"]
        t_route, _, r_bytes = got["moe.route"]
        t_disp = got["moe.dispatch"][0] if "moe.dispatch" in got else 0.0
        t_comb = got["moe.combine"][0] if "moe.combine" in got else 0.0
        fix = self.layers.corrected
        disp = fix("moe.dispatch", t_disp * n_moe, phase, n_moe)
        comb = fix("moe.combine", t_comb * n_moe, phase, n_moe)
        d_send = _send_share(side.dispatch, kernel, send, t_disp) * disp  # DBO: what the compute stream holds
        c_send = _send_share(side.combine, kernel, send, t_comb) * comb
        return (n_moe, fix("moe.experts", t_exp * n_moe, phase, n_moe), fix("moe.route", t_route * n_moe, phase, n_moe),
                disp, comb, flops * n_moe, nbytes * n_moe, r_bytes * n_moe, d_send, c_send)

    def _tokens_in(self, t_rank: float, pairs: float, kernel: str) -> float:
        """Token copies the routing of the busiest rank's MoE layer handles: its own tokens when DeepEP's
        low-latency dispatch writes them in expert order (and the combine reduces them), the copies
        the high-throughput dispatch delivers (one per token and rank: pairs x ep p_rank / k), or,
        without an all-to-all (TP, one GPU), every token of the step."""
        if not self.all_to_all or kernel == "low_latency":
            return t_rank
        return pairs * self.copies_per_pick

    def _step_extras(self, step: Step) -> list:
        """The op list's once-per-step ops (prices.py, site "step": the drafter), corrected."""
        phase = "prefill" if step.has_prefill else "decode"
        fix = self.layers.corrected
        return [(name, fix(name, sec, phase, op.layers), fl, by)
                for op, fn in self._step_ops for name, sec, fl, by in fn(self, op, step)]

    # -- the step --------------------------------------------------------------------------------------
    def device(self, step: Step, z: float = 0.0) -> Device:
        """The step's device work on its slowest rank and busiest expert rank, without overlap or
        host time; `z`: the step's routing imbalance in standard deviations (imbalance_at)."""
        lp = self.layers
        has_pre = step.has_prefill
        groups = lp.groups_prefill if has_pre else lp.groups_decode
        phase = "prefill" if has_pre else "decode"
        slowest, rank_ops, work = -1.0, {}, None
        for w in step.works:
            total, out = lp.rank(w, groups, phase)
            if total > slowest:
                slowest, rank_ops, work = total, out, w
        moe = self._ep_group(step, z)
        group_s = 0.0  # the EP group's seconds (a loop: sum() over a generator costs more, per priced step)
        for _, t_exp, t_route, t_disp, t_comb, *_ in moe:
            group_s += t_exp + t_route + t_disp + t_comb
        total = slowest + group_s
        if not self._step_ops:
            return Device(rank_ops, moe, [], total, KERNEL[has_pre], work)
        extra = self._step_extras(step)
        return Device(rank_ops, moe, extra, total + sum(e[1] for e in extra), KERNEL[has_pre], work)

    def _ep_group(self, step: Step, z: float) -> list[tuple]:
        """(MoE layers, experts, route, dispatch, combine seconds, flops, bytes, route bytes, dispatch and
        combine seconds their send kernels hold the compute stream under DBO) per MoE layer group of the step
        with tokens (Device.moe)."""
        has_pre, q, memo = step.has_prefill, self.q, self._moes
        phase, kernel = "prefill" if has_pre else "decode", KERNEL[has_pre]
        moe = []
        for n_moe, prompts in self._moe_groups[has_pre]:
            t_global = t_max = 0.0  # DP ranks hold distinct tokens: the EP group's sum, the busiest rank's
            for w, r in zip(step.works, step.ranks):
                t = w.dec_seqs * q + w.pre_tokens if prompts else w.dec_seqs * q
                t_global += t * r
                t_max = t if t > t_max else t_max
            if t_global > 0:
                hit = memo.get((t_global, t_max, n_moe, kernel, phase, z))  # _moe, its memo read inlined
                moe.append(hit if hit is not None else self._moe(t_global, t_max, n_moe, kernel, phase, z))
        return moe

    def _stages(self, dev: Device) -> dbo_.Stages:
        """A step's device seconds by where they run in a layer (for DBO), from the ops' stages in
        the vocabulary."""
        rank_ops, extra = dev.rank_ops, dev.extra
        key = (dev.work, dev.kernel)
        hit = self._rank_stages.get(key)
        if hit is None:
            hit = memo_get(self._rank_stages, key, lambda: self._stage_parts(_stage_sums(rank_ops), rank_ops))
        if extra:
            by = dict(hit[0])
            for name, sec, _, _ in extra:
                by[STAGE[name]] += sec
            hit = self._stage_parts(by, rank_ops)
        _, dense, attn, ffn, dense_ffn, tail = hit
        disp = comb = disp_send = comb_send = experts = 0.0
        for _, t_exp, t_route, t_disp, t_comb, _, _, _, d_send, c_send in dev.moe:
            ffn += t_exp + t_route
            experts += t_exp
            disp += t_disp
            comb += t_comb
            disp_send += d_send
            comb_send += c_send
        stages = dbo_.Stages(dense, attn, ffn - dense_ffn, disp, comb, tail, disp_send, comb_send)
        scale = self._gemm_scale[dev.kernel]
        return stages if scale == 1.0 else self._deepgemm_capped(stages, rank_ops, experts, scale)

    def _deepgemm_capped(self, s: dbo_.Stages, rank_ops: dict, experts: float, scale: float) -> dbo_.Stages:
        """`s` with its DeepGEMM ops `scale` times as long (the GEMMs on the SMs the high-throughput
        transfer does not hold, for the whole split step) and the share of each overlapped stage that
        still shares SMs with the transfer (dbo module docstring). `experts`: the routed experts' seconds."""
        dg = self._deepgemm
        proj = rank_ops.get("attn.proj", (0.0,))[0] if "attn.proj" in dg else 0.0
        n_dense, n_layers = self._dense_layers
        proj_dense = proj * n_dense / n_layers  # the dense layers' share, as _stage_parts splits `attn`
        g_dense = proj_dense + (rank_ops.get("dense_ffn", (0.0,))[0] if "dense_ffn" in dg else 0.0)
        g_attn = proj - proj_dense
        g_ffn = (rank_ops.get("shared_expert", (0.0,))[0] if "shared_expert" in dg else 0.0) + \
            (experts if "moe.experts" in dg else 0.0)
        more = scale - 1.0
        attn, ffn = s.attn + more * g_attn, s.ffn + more * g_ffn
        return s._replace(dense=s.dense + more * g_dense, attn=attn, ffn=ffn,
                          attn_shared=(s.attn - g_attn) / attn if attn > 0 else 1.0,
                          ffn_shared=(s.ffn - g_ffn) / ffn if ffn > 0 else 1.0)

    def _stage_parts(self, by: dict[str, float], rank_ops: dict) -> tuple:
        """(stage sums, dense layers' seconds, MoE layers' attention side, rank ffn, dense FFN, tail) of
        a rank's ops: what _stages adds the EP group's seconds to (remembered per rank work)."""
        n_dense, n_layers = self._dense_layers
        dense_ffn = rank_ops.get("dense_ffn", (0.0,))[0]
        attn = by["attn"]
        dense_attn = attn * n_dense / n_layers
        return by, dense_attn + dense_ffn, attn - dense_attn, by["ffn"], dense_ffn, by["tail"] + by["none"]

    def price(self, step: Step, z: float = 0.0) -> StepCost:
        """Seconds of one step on the instance (slowest rank), with its op breakdown."""
        ev = self._evaluate(step, z)
        dev = ev.device
        assert dev is not None  # (priced with the breakdown)
        ops_ = [Op(name, ops.BY_NAME[name].kind, *rec) for name, rec in dev.rank_ops.items()]
        for n_moe, t_exp, t_route, t_disp, t_comb, flops, nbytes, r_bytes, *_ in dev.moe:
            ops_ += [Op("moe.route", "mem", t_route, 0.0, r_bytes, n_moe),
                     Op("moe.experts", "gemm", t_exp, flops, nbytes, n_moe)]
            if self.all_to_all:
                ops_ += [Op("moe.dispatch", "comm", t_disp, count=n_moe),
                         Op("moe.combine", "comm", t_comb, count=n_moe)]
        ops_ += [Op(name, ops.BY_NAME[name].kind, sec, fl, by) for name, sec, fl, by in dev.extra]
        for name, sec in ev.adjust:
            ops_.append(Op(name, ops.BY_NAME[name].kind, sec))
        ops_.append(Op("host.exposed", "cpu", ev.seconds - ev.gpu))
        return StepCost(ev.seconds, tuple(ops_), ev.host)

    def cost(self, step: Step, z: float = 0.0) -> StepCost:
        """`price(step, z)` without its op breakdown: the step's seconds and host parts (all that
        StepCost.period_s and api_wait_s read), at the period path's cost."""
        ev = self._evaluate(step, z, breakdown=False)
        return StepCost(ev.seconds, (), ev.host)

    def period(self, step: Step, z: float = 0.0) -> float:
        """StepCost.period_s of `price(step, z)`, without building its op breakdown."""
        ev = self._evaluate(step, z, breakdown=False)
        return ev.seconds if ev.seconds >= ev.host.api_s else ev.host.api_s

    def period_spread(self, step: Step) -> tuple[float, float]:
        """(period at the mean routing imbalance, its change per standard deviation of the per-step
        imbalance): the simulator draws a step's imbalance as the first plus z times the second.
        Steps whose imbalance barely varies (large prompt batches, no EP) get 0 without a second price."""
        p0 = self.period(step)
        if not self._varies(step):
            return p0, 0.0
        return p0, self.period(step, 1.0) - p0

    def _varies(self, step: Step) -> bool:
        """Whether a step's per-step imbalance spread is worth pricing: above 1e-3 of the factor (below,
        a draw moves the step by under 0.1% of its experts' time; prompt steps of 1,000+ tokens)."""
        if self.ep_size <= 1:
            return False
        t: float = 0  # (a loop: sum() over a generator costs more, per priced step)
        for w, r in zip(step.works, step.ranks):
            t += (w.dec_seqs * self.q + w.pre_tokens) * r
        hit = self._varies_at.get(t)  # (full prompt steps repeat their token count)
        if hit is None:
            hit = memo_get(self._varies_at, t,
                           lambda: t > 0 and self.imbalance.spread(t) / max(self.n_moe, 1) ** 0.5 > 1e-3)
        return hit

    def _halves(self, step: Step) -> tuple[Step, Step, bool]:
        """The two DBO micro-batches of a step (RankWork.half), each rank work's halves remembered,
        and whether they are equal (decode-only works: the second is then not priced again)."""
        memo, first, second, same = self._half_memo, [], [], True
        for w in step.works:
            pair = memo.get(w) or self._half_pair(w)
            first.append(pair[0])
            second.append(pair[1])
            same = same and pair[2]
        return Step(tuple(first), step.ranks), Step(tuple(second), step.ranks), same

    def _half_pair(self, w: RankWork) -> tuple[RankWork, RankWork, bool]:
        return memo_get(self._half_memo, w, lambda: _and_equal(w.halves()))

    def _evaluate(self, step: Step, z: float = 0.0, breakdown: bool = True) -> "_Evaluated":
        """The step's seconds: device work (split in two micro-batches where DBO applies), the
        exposed streaming of offloaded weights, eager kernel gaps, pipeline sends, host time.
        Without `breakdown` (a period only) a split step's unsplit device work is not priced (its
        seconds are replaced by the micro-batches'): _Evaluated.device is None then."""
        cx = self.cx
        lay, prof = cx.layout, cx.prof
        pp = lay.pp
        whole = _scaled(step, pp)
        split = dbo_.splits(lay, step, self.q) and _communicates(self._ep_group(whole, z))
        dev = self.device(whole, z) if breakdown or not split else None
        adjust = []
        if split:
            a, b, same = self._halves(step)
            sa = self._stages(self.device(_scaled(a, pp), z))
            sb = sa if same else self._stages(self.device(_scaled(b, pp), z))
            gpu = dbo_.overlapped(sa, sb, self.n_moe, self._sm_share[step.has_prefill], prof.dbo_efficiency)
            if dev is not None:
                adjust.append(("dbo.overlap", gpu - dev.seconds))
        else:
            assert dev is not None  # (not split: priced whole)
            gpu = dev.seconds
        graphs = lay.cuda_graphs and not step.has_prefill
        if not graphs:
            gaps = self.gap_s * cx.model.num_layers * (2 if split else 1)
            adjust.append(("kernel.gaps", gaps))
            gpu += gaps
        if self.offload_s > gpu:  # prefetched weights stream behind the compute; only the excess shows
            adjust.append(("weights.offload", self.offload_s - gpu))
            gpu = self.offload_s
        if pp > 1:
            send = (pp - 1) * self.layers.pp_send(max(w.dec_seqs * self.q + w.pre_tokens for w in step.works) / pp)
            adjust.append(("pp.send", send))
            gpu += send
        host = self._host(step, gpu, graphs)
        seconds = gpu + host.exposed_s
        if cx.core_share > 1.0:  # device and host work alike run on a core shared with other ranks
            lost = seconds * (cx.core_share - 1.0)
            adjust.append(("cores.shared", lost))
            seconds, gpu = seconds + lost, gpu + lost
        speed = cx.hw.cpu_speed
        if speed != 1.0:  # a CPU rig's measured speed state: every op of the step (device and host) alike
            lost = seconds * (speed - 1.0)
            adjust.append(("cpu.speed", lost))
            seconds, gpu = seconds + lost, gpu + lost
        return _Evaluated(seconds, gpu, adjust, dev, host)

    def _host(self, step: Step, gpu: float, graphs: bool) -> HostTime:
        """Host parts of the step (CUDA graphs for decode-only steps, as vLLM's FULL_DECODE_ONLY)."""
        cx, hm = self.cx, self.host
        dec = pre = 0.0  # the works' sums over the ranks (one loop)
        for w, r in zip(step.works, step.ranks):
            dec += w.dec_seqs * r
            pre += w.pre_seqs * r
        dec, pre = dec / cx.layout.dp, pre / cx.layout.dp
        api = hm.api(dec, pre)
        n = cx.layout.dp
        adm, fin = step.admitted / n, step.finished / n  # per rank: the instance's turnover spread evenly
        ranks = [hm.rank(w.dec_seqs, w.pre_seqs, w.pre_tokens, adm, fin) for w in step.works]
        whole = None
        if hm.hp.scheduler == "central":  # one scheduler for every rank's sequences
            tokens = sum(w.pre_tokens * r for w, r in zip(step.works, step.ranks))
            whole = hm.rank(dec * n, pre * n, tokens, step.admitted, step.finished)
        return hm.time(ranks, gpu, graphs, api, whole)


class _Evaluated(NamedTuple):
    seconds: float  # the step as the engine times it
    gpu: float  # device seconds after overlap
    adjust: list  # (op name, seconds) added to the device ops: DBO, gaps, offload, pipeline sends
    device: Device | None  # None: not priced (a split step's period only)
    host: HostTime  # the step's host parts and the pipeline (sim/cost/host.py)


def _send_share(phase: A2APhase | RingPhase | None, kernel: str, tokens: float, seconds: float) -> float:
    """Share of an all-to-all phase's seconds that its send kernel holds the compute stream for when the
    receive half runs as a hook (DBO): the low-latency kernels' NVLink copies (A2APhase.send_kernel_seconds);
    0 for the high-throughput kernels (their own stream and SMs: dbo.comm_sm_share) and the NCCL ring."""
    if kernel != "low_latency" or not isinstance(phase, A2APhase) or seconds <= 0:
        return 0.0
    return min(phase.send_kernel_seconds(tokens) / seconds, 1.0)


def _communicates(moe: list[tuple]) -> bool:
    """Whether an EP group (Device.moe) has all-to-all seconds to overlap."""
    for _, _, _, t_disp, t_comb, *_ in moe:
        if t_disp + t_comb > 0:
            return True
    return False


def _and_equal(pair: tuple) -> tuple:
    """(first, second, whether they are equal)."""
    return (*pair, pair[0] == pair[1])


def _stage_sums(rank_ops: dict) -> dict[str, float]:
    """Seconds of a rank's ops per stage of a layer (ops.OpDef.stage)."""
    by = {"attn": 0.0, "ffn": 0.0, "tail": 0.0, "comm": 0.0, "none": 0.0}
    for name, rec in rank_ops.items():
        by[STAGE[name]] += rec[0]
    return by


KERNEL = {True: "high_throughput", False: "low_latency"}  # whether a step has prompt tokens -> its kernel kind


def _scaled(step: Step, pp: int) -> Step:
    """One pipeline micro-batch of the step (1 / pp of every rank's sequences); the step itself at pp 1."""
    if pp == 1:
        return step
    return Step(tuple(w.scaled(1.0 / pp) for w in step.works), step.ranks)


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
