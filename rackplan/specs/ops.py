"""Op names: the one vocabulary of work that the cost model prices, the executor times and
calibration fits (aiconfigurator's way: a model is a list of named ops with layer counts).

Every op has a scope that says how many of a step's layers run it; the cost model sums an op over
those layers, the executor's records carry that layer count, and per-op calibration terms
(Profile.op_fixed) are counted per layer of that scope. A name added here is known to all three.
`model_ops` is a model's step as that list: for a layout and a phase, each op with its layers and,
for weight GEMMs, the [k, n] shapes per TP rank and the weight and compute dtypes the cost model
prices them with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .model import DTYPE_BYTES

if TYPE_CHECKING:
    from .layout import Layout
    from .model import ModelSpec

Scope = Literal["layer", "dense_layer", "moe_layer", "step"]
OpKind = Literal["gemm", "attn", "mem", "comm", "cpu"]


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: OpKind
    scope: Scope  # which layers of a step run it ("step": once per step)
    doc: str


OP_DEFS: tuple[OpDef, ...] = (
    OpDef("attn.proj", "gemm", "layer", "attention projection GEMMs (q/kv/o, low-rank parts)"),
    OpDef("attn.core", "attn", "layer", "attention over the KV cache (and the sparse indexer)"),
    OpDef("dense_ffn", "gemm", "dense_layer", "dense SwiGLU FFN of the leading dense layers"),
    OpDef("router", "gemm", "moe_layer", "router GEMM (scores over the routed experts)"),
    OpDef("shared_expert", "gemm", "moe_layer", "shared expert(s) of a MoE layer"),
    OpDef("moe.experts", "gemm", "moe_layer", "routed-expert grouped GEMMs on the busiest EP rank"),
    OpDef("moe.dispatch", "comm", "moe_layer", "all-to-all dispatch of token copies to expert ranks"),
    OpDef("moe.combine", "comm", "moe_layer", "all-to-all combine of expert outputs back to tokens"),
    OpDef("moe.permute", "mem", "moe_layer", "EP1: local permute of token copies into expert order and the "
          "weighted unpermute (no all-to-all; at EP > 1 this work is part of dispatch and combine)"),
    OpDef("tp.allreduce", "comm", "layer", "tensor-parallel all-reduce of attention / FFN partial sums (and "
          "the all-gathers of token slices and vocab-sharded logits)"),
    OpDef("kv.transfer", "comm", "step", "KV cache of one prompt sent from its prefill rank to its decode "
          "rank (point-to-point; one record per request)"),
    OpDef("engram", "mem", "moe_layer", "Engram n-gram memory rows gathered per token (V4.1)"),
    OpDef("lm_head", "gemm", "step", "output projection of each sequence's last token(s)"),
    OpDef("draft", "gemm", "step", "speculative drafter (MTP module passes or a draft model)"),
    OpDef("dbo.overlap", "comm", "step", "time dual-batch overlap adds (negative: time it hides)"),
    OpDef("host.exposed", "cpu", "step", "host time the device step does not hide"),
)
BY_NAME = {op.name: op for op in OP_DEFS}
DEVICE_OPS = tuple(op.name for op in OP_DEFS if op.kind != "cpu" and op.name != "dbo.overlap")
COMM_OPS = tuple(op.name for op in OP_DEFS if op.kind == "comm" and op.name != "dbo.overlap")
COMPUTE_OPS = tuple(n for n in DEVICE_OPS if n not in COMM_OPS and n not in ("engram", "draft"))
# names the executor records besides device ops: the whole step's wall time, its host part, the
# host part the device step did not hide (async scheduling), and per-request latencies
RECORD_OPS = DEVICE_OPS + ("host", "host.exposed", "step", "request")


def layers_of(scope: Scope, num_dense: int, num_moe: int) -> int:
    """Layers of a step with `num_dense` dense and `num_moe` MoE layers that run an op of `scope`."""
    return {"layer": num_dense + num_moe, "dense_layer": num_dense, "moe_layer": num_moe, "step": 1}[scope]


def op_layers(name: str, num_dense: int, num_moe: int) -> int:
    """Layers an op's seconds are summed over ('step' and 'host' records: every layer; unknown: 1)."""
    if name in ("step", "host"):
        return num_dense + num_moe
    op = BY_NAME.get(name)
    return layers_of(op.scope, num_dense, num_moe) if op else 1


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM [m, k] x [k, n] of an op, per TP rank; m is the tokens the op sees."""

    part: str  # e.g. "q_a", "kv_b", "o"
    k: float
    n: float
    weight_dtype: str  # storage format of the weights (bytes per element from DTYPE_BYTES)
    compute_dtype: str  # selects the peak FLOP/s and the efficiency curve

    @property
    def weight_bytes(self) -> float:
        return self.k * self.n * DTYPE_BYTES[self.weight_dtype]


@dataclass(frozen=True)
class ModelOp:
    """One op of a step: its name (OP_DEFS), the layers that run it, its weight GEMMs (if any)."""

    name: str
    layers: int
    gemms: tuple[Gemm, ...] = ()


def layer_gemms(model: "ModelSpec", layout: "Layout", num_dense: int, num_moe: int) -> tuple[ModelOp, ...]:
    """Weight-GEMM ops of `num_dense` dense and `num_moe` MoE layers on one rank (TP splits n).
    The SwiGLU FFNs (dense, shared expert) are one [h, 3 x intermediate] GEMM per layer."""
    h, tp, dt, moe = model.hidden_size, layout.tp, model.dtypes, model.moe
    out = []
    if num_dense + num_moe:
        proj = tuple(Gemm(part, k, n / tp, dt.attention_weights, dt.compute)
                     for part, k, n in model.attention.projections(h))
        out.append(ModelOp("attn.proj", num_dense + num_moe, proj))
    if num_dense:
        out.append(ModelOp("dense_ffn", num_dense,
                           (Gemm("gate_up_down", h, 3 * model.dense_intermediate / tp, dt.dense_weights, dt.compute),)))
    if num_moe and moe.num_shared_experts:
        inter = moe.num_shared_experts * 3 * moe.expert_intermediate
        out.append(ModelOp("shared_expert", num_moe, (Gemm("gate_up_down", h, inter / tp, dt.dense_weights,
                                                            dt.compute),)))
    if num_moe:  # fp32 gate weights, bf16 GEMM
        out.append(ModelOp("router", num_moe, (Gemm("gate", h, moe.num_experts, "fp32", "bf16"),)))
    return tuple(out)


def model_ops(model: "ModelSpec", layout: "Layout", phase: str) -> tuple[ModelOp, ...]:
    """Every op a `phase` ('prefill' or 'decode') step of `layout` runs, in execution order."""
    n_dense, n_moe = model.layers_in(phase)
    gemms = {op.name: op for op in layer_gemms(model, layout, n_dense, n_moe)}
    h, moe, dt = model.hidden_size, model.moe, model.dtypes
    out = [gemms["attn.proj"], ModelOp("attn.core", n_dense + n_moe)]
    out += [gemms[name] for name in ("dense_ffn", "router", "shared_expert") if name in gemms]
    if n_moe:
        experts = Gemm("gate_up_down", h, 3 * moe.expert_intermediate, dt.expert_weights, dt.expert_compute_dtype)
        out += [ModelOp("moe.dispatch", n_moe), ModelOp("moe.experts", n_moe, (experts,)),
                ModelOp("moe.combine", n_moe)]
        if model.extra_bytes_per_token:
            out.append(ModelOp("engram", n_moe))
    out.append(ModelOp("lm_head", 1, (Gemm("lm_head", h, model.vocab_size / layout.tp, "bf16", "bf16"),)))
    if layout.speculation is not None and model.draft is not None:
        d = model.draft
        out.append(ModelOp("draft", layout.speculation.num_tokens if d.kind == "mtp" else d.forward_passes))
    return tuple(out)
