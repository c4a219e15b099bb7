"""One DP rank's share of a step: the ops of its layers on its own tokens, in plain floats.

The op list (rackplan/specs/ops.py model_ops) of each layer group says which ops run; each is priced
by the function registered under its name (sim/cost/prices.py): per layer the weight GEMMs, RMSNorms,
RoPE, quantisation of FP8/FP4 GEMM inputs, DeepSeek-V4's hyper-connection mixing, the attention core
over the KV cache and, under TP, the all-reduces of the attention and FFN outputs; once per step the
Engram gathers (V4.1), the LM head and the sampler. The routed experts, the all-to-all and the drafter
see the whole EP group and are priced in step.py. A rank work's price is a pure function of the work,
remembered (a simulation sees the same rank work often).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from rackplan.specs import HardwareSpec, Profile, ops

from . import attention as attn
from . import efficiency
from .elementwise import stream_seconds_at
from .prices import PRICES, RANK_ORDER
from .roofline import gemm_bytes_priced, price

RANK_MEMO = 100_000  # remembered rank works (and GEMM, EP-group prices) per StepModel, under ~1 KB each
QUANTIZED = ("fp8", "fp8_block", "mxfp8", "fp4", "mxfp4", "nvfp4")  # GEMM compute dtypes that quantise their inputs


def memo_get(memo: dict, key, make):
    """memo[key], made by make() on a miss; the memo is cleared when it reaches RANK_MEMO entries."""
    hit = memo.get(key)
    if hit is None:
        if len(memo) >= RANK_MEMO:
            memo.clear()
        hit = memo[key] = make()
    return hit


@dataclass(frozen=True)
class Group:
    """Layers of a step that see the same tokens on a rank: the ops of their op list a rank prices
    (per site, sim/cost/prices.py), their GEMMs, attention and the widths of the activations their
    FP8/FP4 GEMMs quantise."""

    n_dense: int
    n_moe: int
    ops: tuple  # (op, price function) of the "tokens" ops, in RANK_ORDER
    work_ops: tuple  # (op, price function) of the "work" ops (the attention core)
    first_ops: tuple  # (op, price function) of the "first" ops (the Engram), on the first group only
    gemm_ops: dict  # op name -> its GemmOp
    attention: tuple  # (attention.Component of a KV component, layers)
    prefill_tokens: bool  # prompt tokens run these layers (and their prefill attention)
    quant_widths: tuple  # (columns of each quantised GEMM input, layers) per op (quant_widths)
    first: bool  # starts at layer 0 (the Engram layers and the embedding are here)
    # tokens on the rank -> its layer ops [(name, seconds, flops, bytes)]: prompt steps come in 2% token
    # buckets (sim/pricer.py), so most of a simulation's rank works repeat their layers' token count
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_layers(self) -> int:
        return self.n_dense + self.n_moe


class GemmOp:
    """The weight GEMMs of one op ([m, k] x [k, n] each, activations in and out) over its layers,
    priced at m tokens per rank; remembered per m (full prefill ranks repeat it)."""

    __slots__ = ("name", "layers", "rows", "hw", "prof", "memo")

    def __init__(self, op: ops.ModelOp, hw: HardwareSpec, prof: Profile, act: float):
        self.name, self.layers, self.hw, self.prof = op.name, op.layers, hw, prof
        # the curve of the kernel the weights' format runs (block-scaled FP8 weights: vLLM's block-FP8 linear,
        # DeepGEMM, gemm.fp8_block; without that curve its dtype family's), the peak of the compute dtype
        kernels = [efficiency.kernel_dtype(g.weight_dtype, g.compute_dtype) for g in op.gemms]
        self.rows = tuple((2.0 * g.k * g.n, g.weight_bytes, (g.k + g.n) * act, hw.flops_for(g.compute_dtype),
                           efficiency.gemm_at(prof, kd, g.n, g.k, hw.num_sms), gemm_bytes_priced(prof, kd))
                          for g, kd in zip(op.gemms, kernels))
        self.memo: dict[float, tuple[float, float, float]] = {}

    def at(self, m: float) -> tuple[float, float, float]:
        """Seconds, flops, bytes over the op's layers at m tokens."""
        hit = self.memo.get(m)
        return hit if hit is not None else memo_get(self.memo, m, lambda: self._price(m))

    def _price(self, m: float) -> tuple[float, float, float]:
        prof, hw = self.prof, self.hw
        sec = fl = by = 0.0
        for per_tok, wbytes, act, peak, eff, streamed in self.rows:
            f, b = per_tok * m, wbytes + m * act
            sec += price(f, b * streamed, peak, eff(m), hw, prof)  # roofline.price_gemm with the curve bound
            fl += f
            by += b
        return sec * self.layers, fl * self.layers, by * self.layers


def quant_widths(gemms: tuple[ops.ModelOp, ...], hidden: int, prof: Profile | None = None
                 ) -> tuple[tuple[tuple[float, ...], int], ...]:
    """(columns of each activation one layer quantises for its FP8/FP4 GEMMs, layers) per op: the
    layer input once for every projection that reads the hidden state, each other projection's
    input, and an FFN's input and down-projection input (vLLM quantises the SwiGLU output).

    A GEMM whose kernel has a measured curve in `prof` is left out: the op tables time the whole linear,
    its activation quantisation included (aiconfigurator collector/vllm/collect_gemm.py times
    RowParallelLinear.forward: static FP8 quantisation + cutlass_scaled_mm, scaled_fp4_quant + the FP4 GEMM;
    SGLang's fp8_block row is per-token-group quantisation + DeepGEMM, calibration/opdb.md), so pricing the
    quantisation again would count its kernels twice."""
    out = []
    for op in gemms:
        if op.name == "router":
            continue
        widths, seen_hidden = [], False
        for g in op.gemms:
            if g.compute_dtype not in QUANTIZED:
                continue
            if prof is not None and efficiency.gemm_curve_streams(
                    prof, efficiency.kernel_dtype(g.weight_dtype, g.compute_dtype)):
                continue
            if op.name in ("dense_ffn", "shared_expert"):
                widths += [g.k, g.n / 3.0]  # input, and the intermediate (n = 3 x intermediate)
            elif g.k != hidden or not seen_hidden:
                widths.append(g.k)
                seen_hidden = seen_hidden or g.k == hidden
        if widths:
            out.append((tuple(widths), op.layers))
    return tuple(out)


class LayerPricer:
    """The per-rank ops of one layout's layer groups (decode steps, prefill steps)."""

    def __init__(self, cx, q: float):
        m, lay, hw, prof = cx.model, cx.layout, cx.hw, cx.prof
        self.cx, self.q = cx, q
        full: tuple[int, int] = m.layers_in("decode")
        self.groups_decode: tuple[Group, ...] = (self._group(*full, True, False),)
        self.groups_prefill: tuple[Group, ...] = (self._group(*full, True, True),)
        if m.prefill_layers is not None:  # V4.1: prompt tokens run only the encoder half
            enc: tuple[int, int] = m.layers_in("prefill")
            self.groups_prefill = (self._group(*enc, True, True),
                                   self._group(full[0] - enc[0], full[1] - enc[1], False, False))
        step_ops = ops.model_ops(m, lay, "decode")
        self.act = m.dtypes.activation_bytes
        self.lm_head = GemmOp(next(op for op in step_ops if op.name == "lm_head"), hw, prof, self.act)
        self.tail_ops = _at_site(step_ops, "rows")  # LM head and sampler, once per rank
        self._fixed = {name: ops.op_layers(name, *full) for name in ops.BY_NAME}
        self._corrections = bool(prof.op_scale or prof.op_fixed)  # `corrected` changes nothing without them
        self._ranks: dict = {}
        self._streams: dict = {}  # (op class, columns) -> stream_seconds_at
        self._engrams: dict[float, tuple[float, float, float]] = {}  # tokens -> Engram seconds, flops, bytes
        self._tails: dict[float, tuple] = {}  # logit rows -> LM head and sampler records

    def _group(self, n_dense: int, n_moe: int, first: bool, prefill_tokens: bool) -> Group:
        cx = self.cx
        m = cx.model
        n_layers = n_dense + n_moe
        listed = ops.step_ops(m, cx.layout, n_dense, n_moe)
        token_ops = sorted(_at_site(listed, "tokens"), key=lambda pair: RANK_ORDER.index(pair[0].name))
        weights = tuple(op for op, _ in token_ops if op.gemms)
        gemms = {op.name: GemmOp(op, cx.hw, cx.prof, m.dtypes.activation_bytes) for op in weights}
        scale = n_layers / m.num_layers
        dtype = m.dtypes.attention_compute_dtype
        backend = efficiency.attention_backend(cx.layout, cx.hw, m.attention.kind)
        path = efficiency.prefill_backend(cx.layout, cx.hw, m.attention.kind)
        layers = tuple((attn.Component(m, c, cx.layout.tp, cx.hw, cx.prof, dtype, backend, path),
                        max(1, round(c.layers * scale)) if scale < 1 else c.layers) for c in m.attention.kv)
        widths = quant_widths(weights, m.hidden_size, cx.prof)
        return Group(n_dense, n_moe, tuple(token_ops), _at_site(listed, "work"),
                     _at_site(listed, "first") if first else (), gemms, layers if n_layers else (), prefill_tokens,
                     widths, first)

    def corrected(self, name: str, sec: float, phase: str, layers: int) -> float:
        """Fitted per-op corrections: seconds x op_scale + op_fixed x layers, where the op has work.
        A key "op/phase" (phase: prefill for any step with prompt tokens, else decode) wins over "op"."""
        prof = self.cx.prof
        if not (prof.op_scale or prof.op_fixed):
            return sec
        f = prof.op_scale.get(f"{name}/{phase}", prof.op_scale.get(name, 1.0))
        fixed = prof.op_fixed.get(f"{name}/{phase}", prof.op_fixed.get(name, 0.0))
        return sec * f + (fixed * layers if sec > 0 else 0.0)

    def rank(self, w, groups, phase: str) -> tuple[float, dict[str, list]]:
        """(total seconds, name -> [seconds, flops, bytes]) of one rank's ops (corrections applied)."""
        hit = self._ranks.get((w, phase))  # memo_get, inlined: the simulator's most frequent call here
        return hit if hit is not None else memo_get(self._ranks, (w, phase), lambda: self._price_rank(w, groups, phase))

    def _price_rank(self, w, groups, phase: str) -> tuple[float, dict[str, list]]:
        out: dict[str, list] = {}
        dec_tokens = w.dec_seqs * self.q
        for g in groups:
            tokens = dec_tokens + w.pre_tokens if g.prefill_tokens else dec_tokens
            if tokens > 0 and g.n_layers:
                recs, (names, sums) = self._group_ops(g, tokens)
                if out:
                    for rec in recs:
                        _add(out, *rec)
                else:  # the same sums, added up once per token count (fresh lists: corrections and _add change them)
                    out = dict(zip(names, map(list, sums)))
            for op, fn in g.work_ops:
                for rec in fn(self, g, op, w):
                    _add(out, *rec)
            if tokens > 0:
                for op, fn in g.first_ops:
                    _add(out, op.name, *self._engram_at(g, op, fn, tokens))
        rows = dec_tokens + w.pre_seqs  # positions whose logits are computed: every decode token, each chunk's last
        if rows > 0:
            for rec in self._tail_at(rows):
                _add(out, *rec)
        total = 0.0
        if self._corrections:
            for name, rec in out.items():
                rec[0] = self.corrected(name, rec[0], phase, self._fixed[name])
                total += rec[0]
        else:
            for rec in out.values():
                total += rec[0]
        return total, out

    def _group_ops(self, g: Group, tokens: float) -> tuple[list, tuple]:
        """_layer_ops of group g at `tokens` tokens on the rank, and the same records with each op
        name's summed in order (what _add makes of them in an empty rank), remembered."""
        hit = g.memo.get(tokens)
        return hit if hit is not None else memo_get(g.memo, tokens, lambda: _with_sums(self._layer_ops(g, tokens)))

    def _tail_at(self, rows: float) -> tuple[tuple[str, float, float, float], ...]:
        """(name, seconds, flops, bytes) of the LM head and the sampler at `rows` logit rows, remembered."""
        hit = self._tails.get(rows)
        return hit if hit is not None else memo_get(self._tails, rows, lambda: self._tail(rows))

    def _tail(self, rows: float) -> tuple[tuple[str, float, float, float], ...]:
        return tuple(rec for op, fn in self.tail_ops for rec in fn(self, op, rows))

    def _engram_at(self, g: Group, op: ops.ModelOp, fn, tokens: float) -> tuple[float, float, float]:
        """The Engram's price (prices.engram) at `tokens` tokens on the rank, remembered."""
        hit = self._engrams.get(tokens)
        return hit if hit is not None else memo_get(self._engrams, tokens, lambda: fn(self, g, op, tokens))

    def stream_seconds(self, op_class: str, nbytes: float, rows: float, cols: float) -> float:
        """elementwise.stream_seconds of one kernel, its curve bound once per (op class, columns)."""
        seconds = self._streams.get((op_class, cols))
        if seconds is None:
            seconds = self._streams[op_class, cols] = stream_seconds_at(self.cx.hw, self.cx.prof, op_class, cols)
        return seconds(nbytes, rows)

    def stream(self, op_class: str, nbytes: float, rows: float, cols: float, kernels: int = 1) -> float:
        """Seconds of `kernels` bandwidth-bound kernels moving `nbytes` together."""
        return self.stream_seconds(op_class, nbytes, rows, cols) + (kernels - 1) * self.cx.prof.op_fixed_s

    def _layer_ops(self, g: Group, tokens: float) -> list[tuple[str, float, float, float]]:
        """(name, seconds, flops, bytes) of every per-layer op of group g at `tokens` tokens on the
        rank, over its layers, in the order they add up (RANK_ORDER)."""
        out: list[tuple[str, float, float, float]] = []
        for op, fn in g.ops:
            out += fn(self, g, op, tokens)
        return out

    def one_layer(self, seqs: float, ctx_sum: float, rows: float) -> tuple[float, float, float]:
        """Seconds, flops, bytes of one decoder layer of the decode group (its mean over the group's layers,
        corrections applied) at `rows` tokens on the rank from `seqs` sequences of context `ctx_sum` in all, one
        query each: what an MTP pass runs on the rank besides its routed experts and the LM head (DeepSeek-V3
        report 2.2: the MTP module is one Transformer block of the target's kind with the shared head)."""
        g = self.groups_decode[0]
        n = g.n_layers
        if rows <= 0 or not n:
            return 0.0, 0.0, 0.0
        _, (names, sums) = self._group_ops(g, rows)
        recs = list(zip(names, sums))
        if seqs > 0:  # the attention core at one query a sequence (the target's steps: lp.q)
            if self.cx.model.attention.kind in attn.ONE_KERNEL_DECODE:
                recs.append(("attn.core", attn.decode_layers(g.attention, seqs, ctx_sum, 1.0)))
            else:
                recs += [("attn.core", comp.decode(seqs, ctx_sum, 1.0, layers)) for comp, layers in g.attention]
        sec = sum(self.corrected(name, rec[0], "decode", n) for name, rec in recs) / n
        return sec, sum(rec[1] for _, rec in recs) / n, sum(rec[2] for _, rec in recs) / n

    @cached_property
    def engram_link(self):
        """The NVLink latency and bandwidth the remote Engram rows move at (the low-latency dispatch's)."""
        return self.cx.prof.a2a_params("low_latency", "nvlink", self.cx.layout.ep_size, "dispatch")

    def pp_send(self, tokens: float) -> float:
        """Seconds to hand one micro-batch's activations to the next pipeline stage (NVLink)."""
        cx = self.cx
        nbytes = tokens * cx.model.hidden_size * self.act
        return nbytes / (cx.hw.scaleup_bw * efficiency.memory(cx.prof, nbytes)) + cx.prof.op_fixed_s


def _at_site(listed: tuple[ops.ModelOp, ...], site: str) -> tuple[tuple[ops.ModelOp, Callable], ...]:
    """(op, its price function) of the ops in `listed` priced at `site` (prices.Price.site)."""
    return tuple((op, PRICES[op.name].fn) for op in listed if PRICES[op.name].site == site)


def _with_sums(recs: list[tuple[str, float, float, float]]) -> tuple[list, tuple]:
    """(recs, (names, [seconds, flops, bytes] per name)) with each name's records added up in order, as _add
    does."""
    out: dict[str, list] = {}
    for rec in recs:
        _add(out, *rec)
    return recs, (tuple(out), tuple(tuple(rec) for rec in out.values()))


def _add(out: dict, name: str, sec: float, fl: float, by: float) -> None:
    rec = out.get(name)
    if rec is None:
        out[name] = [sec, fl, by]
    else:
        rec[0] += sec
        rec[1] += fl
        rec[2] += by

