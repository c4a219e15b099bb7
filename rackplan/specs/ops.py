"""Op names: the one vocabulary of work that the cost model prices, the executor times and
calibration fits (aiconfigurator's way: a model is a list of named ops with layer counts).

Every op has a scope that says how many of a step's layers run it; the cost model sums an op over
those layers, the executor's records carry that layer count, and per-op calibration terms
(Profile.op_fixed) are counted per layer of that scope. A name added here is known to all three.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
