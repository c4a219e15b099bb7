"""The price of every op of the op list (rackplan/specs/ops.py model_ops): one function per op, found
by its name in PRICES. The op list says which ops a step runs; the function registered under an op's
name is where its seconds, FLOPs and bytes come from (aiconfigurator's "a model is a list of ops").

Where an op runs sets what its function is given (`Price.site`):
  "tokens"  a layer group's op at the rank's tokens:   f(lp, g, op, tokens) -> records
  "work"    the attention core, at the rank's work:     f(lp, g, op, work) -> records
  "first"   once per step on the first group's tokens: f(lp, g, op, tokens) -> (seconds, flops, bytes)
  "rows"    once per rank at its logit rows:            f(lp, op, rows) -> records
  "ep"      one MoE layer on the busiest EP rank:       f(ep: EPSide, w: EPWork) -> (seconds, flops, bytes)
  "step"    once per step over its ranks (drafter):     f(sm, op, step) -> records
lp: the layout's LayerPricer (sim/cost/layer.py), g: its layer Group, op: the ops.ModelOp (its layers),
sm: the StepModel (sim/cost/step.py); records: (name, seconds, flops, bytes) over the op's layers. The
functions are pure; the memos are the callers': LayerPricer per (group, tokens) and per rank work,
StepModel per EP group and per step. Calibration's op-database predictors (calibration/opdb_ops.py)
call the "ep" functions with the table's shapes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, NamedTuple

from rackplan.specs import DTYPE_BYTES, HardwareSpec, ModelSpec, Profile, ops

from . import attention as attn
from . import efficiency
from .alltoall import A2APhase, RingPhase
from .collective import allreduce_seconds
from .elementwise import mhc_bytes, norm_bytes, quantize_bytes, rope_bytes, route_bytes, sample_bytes, stream_seconds_at
from .moe import expert_work, tile_load
from .roofline import price, price_gemm

Site = Literal["tokens", "work", "first", "rows", "ep", "step"]


@dataclass(frozen=True)
class Price:
    site: Site
    fn: Callable


PRICES: dict[str, Price] = {}  # op name -> its price function


def priced(site: Site, *names: str) -> Callable:
    """Registers the decorated function as the price of ops `names` (names of ops.OP_DEFS)."""
    def register(fn: Callable) -> Callable:
        for name in names:
            assert name in ops.BY_NAME and name not in PRICES, name
            PRICES[name] = Price(site, fn)
        return fn
    return register


# The order a rank's layer-group ops add up in (kept from before the op list drove the price, so a rank's
# sums and the op breakdown's rows come out as they did): weight GEMMs, then the bandwidth-bound ops, then
# the TP all-reduces.
RANK_ORDER = ("attn.proj", "dense_ffn", "shared_expert", "router", "norm", "rope", "quantize", "mhc",
              "attn.allreduce", "ffn.allreduce")


# -- a layer group's ops at the rank's tokens ------------------------------------------------------------
@priced("tokens", "attn.proj", "dense_ffn", "shared_expert", "router")
def weight_gemms(lp, g, op: ops.ModelOp, tokens: float) -> tuple:
    """The op's weight GEMMs at `tokens` rows (layer.GemmOp: the roofline at the kernel's curve)."""
    return ((op.name, *g.gemm_ops[op.name].at(tokens)),)


@priced("tokens", "norm")
def norm(lp, g, op: ops.ModelOp, tokens: float) -> tuple:
    """RMSNorms: the layer's two, and MLA's latent norms (one kernel each), bandwidth-bound."""
    m = lp.cx.model
    nb = norm_bytes(m, tokens)
    latent = (m.attention.q_lora_rank is not None) + (m.attention.kv_lora_rank is not None)
    return (("norm", lp.stream("norm", nb, tokens, m.hidden_size, 2 + latent) * op.layers, 0.0, nb * op.layers),)


@priced("tokens", "rope")
def rope(lp, g, op: ops.ModelOp, tokens: float) -> tuple:
    """Rotary embedding of the queries and keys, bandwidth-bound."""
    m = lp.cx.model
    nb = rope_bytes(m, tokens, lp.cx.layout.tp)
    return (("rope", lp.stream("rope", nb, tokens, m.hidden_size) * op.layers, 0.0, nb * op.layers),)


@priced("tokens", "quantize")
def quantize(lp, g, op: ops.ModelOp, tokens: float) -> list:
    """Activation quantisation of the FP8/FP4 GEMMs' inputs: one record per GEMM op of the group
    (layer.quant_widths: the columns each quantises, over that op's layers)."""
    dt = lp.cx.model.dtypes.compute
    op_class = f"quantize.{dt}"
    out = []
    for widths, layers in g.quant_widths:
        sec = nb = 0  # (both sums in one loop, in sum()'s order)
        for k in widths:
            qb = quantize_bytes(tokens, k, dt, lp.act)
            sec += lp.stream(op_class, qb, tokens, k)
            nb += qb
        out.append(("quantize", sec * layers, 0.0, nb * layers))
    return out


@priced("tokens", "mhc")
def mhc(lp, g, op: ops.ModelOp, tokens: float) -> tuple:
    """Hyper-connection mixing (DeepSeek-V4 mHC) before attention and before the FFN: pre (mix in) +
    post (mix out)."""
    m = lp.cx.model
    h = m.hidden_size
    pre, post = (mhc_bytes(tokens, h, m.hc_mult, part, lp.act) for part in ("pre", "post"))
    sec = 2.0 * (lp.stream("mhc.pre", pre, tokens, h) + lp.stream("mhc.post", post, tokens, h))
    return (("mhc", sec * op.layers, 0.0, 2.0 * (pre + post) * op.layers),)


@priced("tokens", "attn.allreduce", "ffn.allreduce")
def tp_allreduce(lp, g, op: ops.ModelOp, tokens: float) -> tuple:
    """TP all-reduce of a layer's attention or FFN output ([tokens, hidden] activations)."""
    cx = lp.cx
    ar = allreduce_seconds(cx.hw, cx.prof, tokens * cx.model.hidden_size * lp.act, cx.layout.tp)
    return ((op.name, ar * op.layers, 0.0, 0.0),)


# -- the rank's work, its first group, its logit rows -----------------------------------------------------
@priced("work", "attn.core")
def attention_core(lp, g, op: ops.ModelOp, w) -> list:
    """Attention over the KV cache of the group's layers (sim/cost/attention.py): the decode sequences'
    queries, and each prompt chunk where prompt tokens run the group."""
    out = []
    one_kernel = lp.cx.model.attention.kind in attn.ONE_KERNEL_DECODE
    if one_kernel and w.dec_seqs > 0:
        out.append(("attn.core", *attn.decode_layers(g.attention, w.dec_seqs, w.dec_ctx, lp.q)))
    for comp, layers in g.attention:
        if w.dec_seqs > 0 and not one_kernel:
            out.append(("attn.core", *comp.decode(w.dec_seqs, w.dec_ctx, lp.q, layers)))
        if g.prefill_tokens and w.chunks:
            out.append(("attn.core", *comp.prefill(w.chunks, layers)))
    return out


@priced("first", "engram")
def engram(lp, g, op: ops.ModelOp, tokens: float) -> tuple[float, float, float]:
    """Engram rows (V4.1): per token, one row per Engram layer from tables split over the EP group, so
    (ep - 1) / ep of them come over NVLink, at once with the local HBM gather."""
    cx = lp.cx
    m, lay, hw = cx.model, cx.layout, cx.hw
    per_layer = tokens * m.extra_bytes_per_token / m.engram_layers
    ep = lay.ep_size
    remote = per_layer * (ep - 1) / ep
    sec = lp.stream("engram", per_layer - remote, tokens, m.extra_bytes_per_token / m.engram_layers)
    if remote > 0:
        nv = lp.engram_link
        sec = max(sec, nv.alpha_s + remote / (hw.scaleup_bw * nv.bw_eff))
    return sec * op.layers, 0.0, per_layer * op.layers


@priced("rows", "lm_head")
def lm_head(lp, op: ops.ModelOp, rows: float) -> tuple:
    """The output projection of the rank's logit rows (a weight GEMM, layer.GemmOp)."""
    return (("lm_head", *lp.lm_head.at(rows)),)


@priced("rows", "sample")
def sample(lp, op: ops.ModelOp, rows: float) -> tuple:
    """The sampler over the logits: two bandwidth-bound kernels."""
    nbytes = sample_bytes(lp.cx.model, rows)
    return (("sample", lp.stream("sample", nbytes, rows, lp.cx.model.vocab_size, 2), 0.0, nbytes),)


# -- one MoE layer on the busiest EP rank -----------------------------------------------------------------
class EPSide(NamedTuple):
    """What the EP ops of one layout are priced with: the model, hardware, profile, its expert sharding and
    the curves bound once (None: bound on each call, as calibration's predictors do)."""

    model: ModelSpec
    hw: HardwareSpec
    prof: Profile
    moe_tp: int  # ways each expert's intermediate width is sharded (Layout.moe_tp)
    local_experts: float  # experts the kernel holds on the rank (moe.tile_load)
    experts_curve: Callable | None = None  # efficiency.experts_at of the layout's expert GEMM
    route_stream: Callable | None = None  # stream_seconds_at of the routing's op class over the hidden width
    dispatch: A2APhase | RingPhase | None = None  # the step kernel's exchange phases (None: no all-to-all)
    combine: A2APhase | RingPhase | None = None
    backend: str | None = None  # the MoE backend (efficiency.expert_backend) and the DeepEP kernel it runs behind
    a2a_kernel: str = ""  # ("" without DeepEP: no backend class applies)

    def kernel_dtype(self) -> str:
        """The experts kernel's dtype (the curves it runs: block-scaled FP8 weights -> fp8_block; the backend's class,
        fp8_block.deepgemm, where the layout's engine runs one the profile measures: efficiency.backend_dtype)."""
        dt = self.model.dtypes
        kd = efficiency.kernel_dtype(dt.expert_weights, dt.expert_compute_dtype, self.prof)
        return efficiency.backend_dtype(self.prof, kd, self.backend, self.a2a_kernel) if self.backend else kd


class EPWork(NamedTuple):
    """One MoE layer's work on the busiest EP rank of a step."""

    pairs: float  # token-expert pairs on the rank
    distinct: float  # distinct experts they hit (at least 1)
    tokens_in: float  # token copies its MoE layer takes in (the routing's rows, the experts kernel's load)
    rows: float  # tokens of the rank (the routing stream's rows)
    send: float  # tokens it sends in the dispatch (and gets back in the combine)


@priced("ep", "moe.experts")
def moe_experts(ep: EPSide, w: EPWork) -> tuple[float, float, float]:
    """Routed experts' grouped GEMMs on the rank (moe.expert_work: each hit expert's weights read once;
    the kernel's load, moe.tile_load, from the token copies entering it), priced by experts_seconds."""
    flops, nbytes, rows, n, k = expert_work(ep.model, w.pairs, w.distinct, ep.moe_tp)
    load = tile_load(w.tokens_in, ep.model.moe.top_k, ep.local_experts)  # what the kernel's tile choice reads
    sec = experts_seconds(ep.hw, ep.prof, ep.kernel_dtype(), ep.model.dtypes.expert_compute_dtype, flops, nbytes,
                          rows, n, k, load, ep.experts_curve)
    return sec, flops, nbytes


def experts_seconds(hw: HardwareSpec, prof: Profile, dtype: str, compute: str, flops, nbytes, rows, n, k, load,
                    curve: Callable | None = None):
    """Seconds of routed-expert grouped GEMMs doing `flops` over `nbytes` (scalars or arrays: calibration's
    predictors pass a table's rows): the roofline at the curve of the kernel dtype `dtype` (rows per expert,
    one expert's n, k, the kernel's `load`) and the peak of `compute`; `curve`: experts_at bound once."""
    curve = curve or efficiency.experts_at(prof, dtype, n, k, hw.num_sms)
    return price(flops, nbytes, hw.flops_for(compute), curve(rows, flops, load), hw, prof)


@priced("ep", "moe.route")
def moe_route(ep: EPSide, w: EPWork) -> tuple[float, float, float]:
    """Top-k, permute and unpermute of the token copies entering the rank, priced by route_seconds."""
    h = ep.model.hidden_size
    nbytes = route_bytes(w.tokens_in, h, ep.model.dtypes.activation_bytes)
    return route_seconds(ep.hw, ep.prof, ep.kernel_dtype(), nbytes, w.rows, h, ep.route_stream), 0.0, nbytes


def route_seconds(hw: HardwareSpec, prof: Profile, dtype: str, nbytes, rows, hidden, stream: Callable | None = None):
    """Seconds of the routing: a stream over `nbytes` of hidden states (`rows` tokens, `hidden` wide; scalars
    or arrays) on the moe.route curve of the experts kernel's dtype; `stream`: stream_seconds_at bound once."""
    stream = stream or stream_seconds_at(hw, prof, f"moe.route.{dtype}", hidden)
    return stream(nbytes, rows)


@priced("ep", "moe.dispatch")
def moe_dispatch(ep: EPSide, w: EPWork) -> tuple[float, float, float]:
    """The all-to-all dispatch of the rank's token copies (sim/cost/alltoall.py)."""
    assert ep.dispatch is not None  # (priced where the op list has the all-to-all, which sets it)
    return ep.dispatch.seconds(w.send), 0.0, 0.0


@priced("ep", "moe.combine")
def moe_combine(ep: EPSide, w: EPWork) -> tuple[float, float, float]:
    """The all-to-all combine of the expert outputs back to their tokens (sim/cost/alltoall.py)."""
    assert ep.combine is not None  # (priced where the op list has the all-to-all, which sets it)
    return ep.combine.seconds(w.send), 0.0, 0.0


# -- once per step ----------------------------------------------------------------------------------------
@priced("step", "draft")
def draft(sm, op: ops.ModelOp, step) -> list:
    """The speculative drafter (sim/cost/draft.py) of a step with decode sequences, on its busiest rank
    (its routed experts' rows through the low-latency all-to-all)."""
    d = sm.drafter
    rows = [w.dec_seqs * d.rows_per_seq for w in step.works]
    if max(rows) <= 0:
        return []
    cx = sm.cx
    disp, comb = sm.a2a("low_latency", "dispatch"), sm.a2a("low_latency", "combine")

    def a2a_s(tokens):
        return (disp.seconds(tokens) if disp else 0.0) + (comb.seconds(tokens) if comb else 0.0)

    total = sum(r * n for r, n in zip(rows, step.ranks))
    if d.layer:
        return [("draft", *mtp_passes(sm, step, rows, total))]
    sec, fl, by = d.seconds(cx.hw, cx.prof, cx.hw.flops_for(cx.model.dtypes.compute), max(rows), total, a2a_s)
    return [("draft", sec, fl, by)]


def mtp_passes(sm, step, rows: list, total: float) -> tuple[float, float, float]:
    """Seconds, flops, bytes of an MTP drafter's passes on the busiest rank (`rows`: draft rows per rank, `total`
    over the EP group). A pass runs what a decoder layer of the target runs at those rows (LayerPricer.one_layer:
    its GEMMs, norms, mHC, attention over the module's own KV, TP all-reduces, each kernel with its floor), the
    layer's routed experts over the EP group, its input projection eh_proj ([rows, 2h] x [2h, h], replicated BF16:
    SGLang deepseek_nextn.py, `nn.Linear(2 * hidden_size, hidden_size)`) and the shared LM head at the rows: at
    batch 1, the floors of some twenty kernels that the roofline of its weights alone (draft.Drafter.seconds) leaves
    out."""
    cx, d = sm.cx, sm.drafter
    hw, h = cx.hw, cx.model.hidden_size
    i = max(range(len(rows)), key=rows.__getitem__)
    w, r = step.works[i], rows[i]
    sec, fl, by = sm.layers.one_layer(w.dec_seqs, w.dec_ctx, r)
    if sm.n_moe:
        moe = sm._moe(total, r, 1, "low_latency", "decode", 0.0)
        sec, fl, by = sec + sum(moe[1:5]), fl + moe[5], by + moe[6]
    e_fl, e_by = 2.0 * r * 2 * h * h, 2 * h * h * DTYPE_BYTES["bf16"] + r * 3 * h * d.act
    sec += price_gemm(e_fl, e_by, hw.flops_for("bf16"), "bf16", r, h, 2 * h, hw, cx.prof)
    for name, s, f, b in sm.layers._tail_at(r):
        if name == "lm_head":
            sec, fl, by = sec + s, fl + f, by + b
    return sec * d.passes, (fl + e_fl) * d.passes, (by + e_by) * d.passes
