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
OpKind = Literal["gemm", "attn", "mem", "comm", "cpu", "idle"]
# Where an op runs in a layer, for dual-batch overlap (sim/cost/dbo.py): "attn" before the MoE
# dispatch (attention side), "ffn" between dispatch and combine (experts side), "comm" the
# all-to-all itself, "tail" once per step after the last layer, "none" outside the layer pipeline.
Stage = Literal["attn", "ffn", "comm", "tail", "none"]


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: OpKind
    scope: Scope  # which layers of a step run it ("step": once per step, or on a fixed few layers)
    stage: Stage
    doc: str


OP_DEFS: tuple[OpDef, ...] = (
    OpDef("norm", "mem", "layer", "attn", "RMSNorms of a layer (fused residual add; MLA's latent norms)"),
    OpDef("mhc", "mem", "layer", "attn", "hyper-connection mixing of the residual streams (DeepSeek-V4 mHC)"),
    OpDef("attn.proj", "gemm", "layer", "attn", "attention projection GEMMs (q/kv/o, low-rank parts)"),
    OpDef("quantize", "mem", "layer", "attn", "activation quantisation of the inputs of FP8/FP4 GEMMs"),
    OpDef("rope", "mem", "layer", "attn", "rotary position embedding of the queries and keys"),
    OpDef("attn.core", "attn", "layer", "attn", "attention over the KV cache (and the sparse indexer)"),
    OpDef("attn.allreduce", "comm", "layer", "attn", "tensor-parallel all-reduce of the attention output"),
    OpDef("engram", "mem", "step", "attn", "Engram n-gram memory rows gathered per token on its layers (V4.1)"),
    OpDef("dense_ffn", "gemm", "dense_layer", "ffn", "dense SwiGLU FFN of the leading dense layers"),
    OpDef("router", "gemm", "moe_layer", "attn", "router GEMM (scores over the routed experts)"),
    OpDef("moe.route", "mem", "moe_layer", "ffn", "top-k, permute of the token copies into expert order and the "
          "weighted unpermute (the executor times the permute and unpermute under this name where no "
          "all-to-all runs, EP1 or MoE-TP; under DeepEP its dispatch and combine do that work)"),
    OpDef("shared_expert", "gemm", "moe_layer", "ffn", "shared expert(s) of a MoE layer"),
    OpDef("moe.experts", "gemm", "moe_layer", "ffn", "routed-expert grouped GEMMs on the busiest EP rank"),
    OpDef("moe.dispatch", "comm", "moe_layer", "comm", "all-to-all dispatch of token copies to expert ranks"),
    OpDef("moe.combine", "comm", "moe_layer", "comm", "all-to-all combine of expert outputs back to tokens"),
    OpDef("ffn.allreduce", "comm", "layer", "ffn", "tensor-parallel all-reduce of the FFN / MoE output (and, where "
          "an EP group splits a TP replica's tokens, the all-gather of its slices)"),
    OpDef("lm_head", "gemm", "step", "tail", "output projection of each sequence's last token(s) (under TP "
          "vocab-sharded, with the all-gather of its logits)"),
    OpDef("sample", "mem", "step", "tail", "sampler over the logits (softmax, top-k/top-p) and per-sequence work"),
    OpDef("draft", "gemm", "step", "tail", "speculative drafter (MTP module passes or a draft model)"),
    OpDef("pp.send", "comm", "step", "none", "pipeline-parallel activations sent between stages"),
    OpDef("kv.transfer", "comm", "step", "none", "KV cache of one prompt sent from its prefill rank to its decode "
          "rank (point-to-point; one record per request)"),
    OpDef("weights.offload", "mem", "step", "none", "offloaded weights streamed from host memory, not hidden"),
    OpDef("kernel.gaps", "idle", "step", "none", "device idle between eagerly launched kernels"),
    OpDef("dbo.overlap", "comm", "step", "none", "time dual-batch overlap adds (negative: time it hides)"),
    OpDef("host.exposed", "cpu", "step", "none", "host time the device step does not hide"),
    OpDef("cores.shared", "idle", "step", "none", "CPU rigs: time a step loses when more busy ranks (x threads) "
          "than cores run at once, each slower in proportion"),
    OpDef("cpu.speed", "idle", "step", "none", "CPU rigs: time a step gains or loses at the rig's measured speed "
          "state against the one its profile was fitted at (HardwareSpec.cpu_speed; executor/probe.py)"),
    # host parts of one engine step (sim/cost/host.py prices them, executor/serve*.py times them)
    OpDef("host.schedule", "cpu", "step", "none", "scheduler: which requests run, token budgets, KV blocks"),
    OpDef("host.prepare", "cpu", "step", "none", "input preparation: token ids, positions, block tables, "
          "attention metadata"),
    OpDef("host.launch", "cpu", "step", "none", "kernel launches: one CUDA-graph replay, or every kernel when "
          "eager"),
    OpDef("host.dp_sync", "cpu", "step", "none", "DP coordination: the collective that lines the ranks up and the "
          "wait for the slowest rank's host work"),
    OpDef("host.sample", "cpu", "step", "none", "sampling and rejection sampling of draft tokens (host side)"),
    OpDef("host.output", "cpu", "step", "none", "output processing: emitted tokens booked and sent to the API "
          "server"),
    OpDef("host.api_server", "cpu", "step", "none", "API server processes: detokenise and stream emitted tokens "
          "(beside the engine; bounds the decode step)"),
    OpDef("host.probe", "cpu", "step", "none", "the CPU-speed probe: a fixed host workload each serving rank "
          "times at the start and the end of its run (executor/probe.py; the host fit normalises by it)"),
)
BY_NAME = {op.name: op for op in OP_DEFS}
# the engine's host parts of a step, in loop order (the API server runs beside the engine)
HOST_PARTS = ("host.schedule", "host.prepare", "host.launch", "host.dp_sync", "host.sample", "host.output")
DEVICE_OPS = tuple(op.name for op in OP_DEFS if op.kind != "cpu" and op.name != "dbo.overlap")
COMM_OPS = tuple(op.name for op in OP_DEFS if op.kind == "comm" and op.name != "dbo.overlap")
COMPUTE_OPS = tuple(n for n in DEVICE_OPS if n not in COMM_OPS and BY_NAME[n].kind != "idle"
                    and n not in ("engram", "draft", "weights.offload"))
# names the executor records besides device ops: the whole step's wall time, its host part, the
# host part the device step did not hide (async scheduling), per-request latencies, and the host
# parts one by one (where the loop times them)
RECORD_OPS = DEVICE_OPS + ("host", "host.exposed", "step", "request", "host.probe") + HOST_PARTS


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
    """Weight-GEMM ops of `num_dense` dense and `num_moe` MoE layers on one rank: attention
    projections as vLLM shards them over TP (AttentionSpec.rank_projections), FFNs split n.
    The SwiGLU FFNs (dense, shared expert) are one [h, 3 x intermediate] GEMM per layer."""
    h, tp, dt, moe = model.hidden_size, layout.tp, model.dtypes, model.moe
    out = []
    if num_dense + num_moe:
        proj = tuple(Gemm(part, k, n, dt.attention_weights, dt.compute)
                     for part, k, n in model.attention.rank_projections(h, tp))
        out.append(ModelOp("attn.proj", num_dense + num_moe, proj))
    if num_dense:
        out.append(ModelOp("dense_ffn", num_dense,
                           (Gemm("gate_up_down", h, 3 * model.dense_intermediate / tp, dt.dense_weights, dt.compute),)))
    if num_moe and moe.num_shared_experts:
        inter = moe.num_shared_experts * 3 * moe.expert_intermediate
        out.append(ModelOp("shared_expert", num_moe, (Gemm("gate_up_down", h, inter / tp, dt.dense_weights,
                                                            dt.compute),)))
    if num_moe:  # fp32 gate weights, a bf16 GEMM or (MoESpec.router_compute) an fp32 one
        out.append(ModelOp("router", num_moe, (Gemm("gate", h, moe.num_experts, "fp32", moe.router_compute),)))
    return tuple(out)


UNQUANTIZED = ("bf16", "fp16", "fp32")  # dtypes a GEMM takes its activations in without quantising them


def model_ops(model: "ModelSpec", layout: "Layout", phase: str) -> tuple[ModelOp, ...]:
    """Every op a `phase` ('prefill' or 'decode') step of `layout` runs, in execution order (each priced by
    the function registered under its name, sim/cost/prices.py)."""
    return step_ops(model, layout, *model.layers_in(phase))


def step_ops(model: "ModelSpec", layout: "Layout", n_dense: int, n_moe: int) -> tuple[ModelOp, ...]:
    """model_ops of a step whose tokens run `n_dense` dense and `n_moe` MoE layers (one layer group of a
    step: V4.1's prompt tokens run only its encoder half)."""
    n = n_dense + n_moe
    gemms = {op.name: op for op in layer_gemms(model, layout, n_dense, n_moe)}
    h, moe, dt = model.hidden_size, model.moe, model.dtypes
    out = [ModelOp("norm", n)] + ([ModelOp("mhc", n)] if model.hc_mult > 1 else [])
    if dt.compute not in UNQUANTIZED and dt.activations in UNQUANTIZED:  # FP8/FP4 GEMMs fed BF16 activations
        out.append(ModelOp("quantize", n))
    out += [gemms["attn.proj"], ModelOp("rope", n), ModelOp("attn.core", n)]
    if layout.tp > 1:
        out.append(ModelOp("attn.allreduce", n))
    if model.engram_layers:
        out.append(ModelOp("engram", model.engram_layers))
    out += [gemms[name] for name in ("dense_ffn", "router") if name in gemms]
    if n_moe:
        experts = Gemm("gate_up_down", h, 3 * moe.expert_intermediate / layout.moe_tp, dt.expert_weights,
                       dt.expert_compute_dtype)
        out.append(ModelOp("moe.route", n_moe))
        out += [gemms["shared_expert"]] if "shared_expert" in gemms else []
        if layout.exchanges_tokens:  # (TP ranks hold every token)
            out.append(ModelOp("moe.dispatch", n_moe))
        out.append(ModelOp("moe.experts", n_moe, (experts,)))
        if layout.exchanges_tokens:
            out.append(ModelOp("moe.combine", n_moe))
    if layout.tp > 1:
        out.append(ModelOp("ffn.allreduce", n))
    out += [ModelOp("lm_head", 1, (Gemm("lm_head", h, model.vocab_size / layout.tp, "bf16", "bf16"),)),
            ModelOp("sample", 1)]
    if layout.speculation is not None and model.draft is not None:
        d = model.draft
        out.append(ModelOp("draft", layout.speculation.num_tokens if d.kind == "mtp" else d.forward_passes))
    return tuple(out)
