"""The `vllm serve` engine flags one planned instance implies (everything except where it runs).

Each flag mirrors what the simulator priced for that layout, so the deployment runs the plan:
- EP: `--enable-expert-parallel` when the MoE is expert-parallel over the instance (DEPn, TPxDP-EP);
  all-to-all kernels of the class the cost model prices (DeepEP high-throughput for prefill steps,
  low-latency for decode steps), or NCCL all-gather / reduce-scatter where the layout says
  `all2all: allgather_reducescatter`;
- EPLB: `--enable-eplb` + `--eplb-config` with the planned redundant experts;
- DBO: `--enable-dbo` with the layout's token thresholds, the ones the cost model priced the split
  with (vLLM splits a step only when every DP rank reaches them);
- speculation per model family (vLLM's method names: "mtp" for V3 / V3.2 / V4, "dspark" for V4.1,
  whose draft stages ship inside the target checkpoint, so no draft `model` is given);
- NIXL KV transfer for disaggregated instances, the model's KV-cache dtype, prefix caching as the
  workload assumes, CUDA-graph mode (graphs only for decode-only steps, as priced) or --enforce-eager,
  async scheduling, and the frontend the planner chose (API-server count, stream interval);
- per-rank limits: `--max-num-seqs` = planned sequences per rank, `--max-num-batched-tokens` = the
  planned prefill token budget, and for decode at least seqs x (1 + draft tokens), so vLLM never
  caps a decode step the simulator let through.
Sources: vLLM 0.33.0 engine arguments (vllm/engine/arg_utils.py, config/parallel.py,
config/speculative.py; kept flag list in vllm_flags.txt); vLLM recipes (DeepSeek-V3.2, V4-Flash,
V4.1-Flash); llm-d guides/wide-ep-lws (vllm-deepseek-v4 decode/prefill).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from rackplan.specs import HardwareSpec, Layout, ModelSpec, Plan, SpecError, Workload

KV_DTYPES = {"fp8": "fp8", "bf16": "bfloat16", "fp16": "float16", "fp32": "auto", "nvfp4": "nvfp4_ds_mla"}


@dataclass(frozen=True)
class Family:
    """How vLLM serves one model family."""

    hf_id: str  # Hugging Face repository (also the served model name)
    spec_method: str | None  # vLLM speculative method of the model's own drafter
    extra: tuple[str, ...]  # family-specific serve flags
    source: str
    env: tuple[tuple[str, str], ...] = ()  # environment the recipe sets


FAMILIES = {
    "deepseek-v3": Family("deepseek-ai/DeepSeek-V3", "mtp", ("--trust-remote-code",),
                          "vLLM recipes DeepSeek-V3.yaml"),
    "deepseek-v3.2": Family("deepseek-ai/DeepSeek-V3.2", "mtp",
                            ("--trust-remote-code", "--tokenizer-mode", "deepseek_v32"),
                            "vLLM recipes DeepSeek-V3.2.yaml (base_args, tool_calling)"),
    "deepseek-v4-flash": Family("deepseek-ai/DeepSeek-V4-Flash", "mtp",
                                ("--trust-remote-code", "--tokenizer-mode", "deepseek_v4"),
                                "vLLM recipes DeepSeek-V4-Flash.yaml (base_args, PD cluster)"),
    # V4.1 dropped MTP; DSpark stages ship under mtp.* in the target checkpoint (vLLM
    # config/speculative.py: method "dspark" takes the target model as its draft).
    "deepseek-v4.1-flash": Family("deepseek-ai/DeepSeek-V4.1-Flash", "dspark",
                                  ("--tokenizer-mode", "deepseek_v41", "--language-model-only"),
                                  "vLLM recipes DeepSeek-V4.1-Flash.yaml (base_args, spec_decoding, text_only)",
                                  (("VLLM_ENGINE_READY_TIMEOUT_S", "3600"),)),  # recipe base_env: long first load
    "qwen3-235b-a22b": Family("Qwen/Qwen3-235B-A22B", None, (), "Qwen/Qwen3-235B-A22B model card"),
    # the models shipped from their config.json (issue 43): each the repository its spec was built from
    # (tests/data/hf_configs/README.md) and the flags its architecture needs (ARCH_EXTRA, below)
    "deepseek-v4-pro": Family("deepseek-ai/DeepSeek-V4-Pro", "mtp",
                              ("--trust-remote-code", "--tokenizer-mode", "deepseek_v4"),
                              "vLLM recipes DeepSeek-V4-Flash.yaml base_args (the V4 family's; same architecture)"),
    "kimi-k2": Family("moonshotai/Kimi-K2-Instruct", None, ("--trust-remote-code",),
                      "moonshotai/Kimi-K2-Instruct model card, vLLM deployment (V3 architecture, remote code)"),
    "qwen3-30b-a3b": Family("Qwen/Qwen3-30B-A3B", None, (), "Qwen/Qwen3-30B-A3B model card"),
    "qwen3-coder-480b-a35b": Family("Qwen/Qwen3-Coder-480B-A35B-Instruct", None, (),
                                    "Qwen/Qwen3-Coder-480B-A35B-Instruct model card"),
    # GLM-4.x's MTP layer: vLLM's "mtp" method (zai-org GLM-4.7 model card: --speculative-config.method mtp)
    "glm-4.5": Family("zai-org/GLM-4.5", "mtp", (), "zai-org/GLM-4.5 model card; GLM-4.7 model card for MTP"),
    "gpt-oss-120b": Family("openai/gpt-oss-120b", None, (), "openai/gpt-oss-120b model card (vllm serve)"),
}


# What vLLM needs for a model outside FAMILIES, by the architecture its spec describes: the DeepSeek
# attention kinds load through the checkpoint's own code (trust-remote-code, vLLM recipes DeepSeek-V3 /
# V4-Flash) and V4's compressed attention tokenizes with deepseek_v4 (recipe base_args); an MTP drafter is
# vLLM's "mtp" method (config/speculative.py). A separate draft model needs its own repository: refused.
ARCH_EXTRA = {"mla": ("--trust-remote-code",), "csa": ("--trust-remote-code", "--tokenizer-mode", "deepseek_v4"),
              "gqa": ()}


def servable(model: ModelSpec) -> bool:
    """Whether vLLM serves a released checkpoint of this model without being told its repository
    (test models like tiny-moe: no; any model with --served-model)."""
    return model.name in FAMILIES


def family_of(model: ModelSpec, served: str | None = None) -> Family:
    """How vLLM serves `model`: its entry in FAMILIES (repository replaced by `served` if given), else
    one derived from its architecture, which needs `served` (the Hugging Face repository)."""
    fam = FAMILIES.get(model.name)
    if fam is not None:
        return fam if served is None else Family(served, fam.spec_method, fam.extra, fam.source, fam.env)
    if served is None:
        raise SpecError("", "model", "a model vLLM deployment knows (" + ", ".join(sorted(FAMILIES)) + "), or "
                        "its Hugging Face repository with --served-model", model.name)
    method = "mtp" if model.draft is not None and model.draft.kind == "mtp" else None
    return Family(served, method, ARCH_EXTRA[model.attention.kind],
                  f"derived from {model.name}'s {model.attention.kind} attention (engine.py ARCH_EXTRA)")


@dataclass(frozen=True)
class Context:
    """What the flags of a plan's instances depend on besides the layout."""

    plan: Plan
    model: ModelSpec
    hw: HardwareSpec
    workload: Workload
    served_model: str | None = None  # Hugging Face repository to serve (--served-model)
    memo: dict = field(default_factory=dict, init=False, compare=False, repr=False)  # derived values, once

    @property
    def family(self) -> Family:
        return family_of(self.model, self.served_model)


def _json(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


def priced_memory_utilization(lay: Layout) -> float:
    """The share of HBM the cost model let the engine use (sim/cost/memory.py memory_fraction: the
    layout's own, else vLLM's default 0.9), emitted so vLLM sizes its KV cache as priced whatever the
    installed version's default (0.92 in later ones)."""
    from rackplan.sim.cost.memory import memory_fraction

    return memory_fraction(lay)


def batch_flags(lay: Layout) -> list[str]:
    """Per-rank limits (vLLM's scheduler runs per DP rank), the memory budget and offloaded weights
    the cost model priced."""
    budget = lay.max_tokens_per_step
    if lay.role != "prefill":
        budget = max(budget, lay.max_decode_tokens)
    f = ["--max-num-seqs", str(lay.max_batch_per_rank), "--max-num-batched-tokens", str(budget),
         "--gpu-memory-utilization", f"{priced_memory_utilization(lay):g}"]
    if lay.offload_gb:
        f += ["--cpu-offload-gb", f"{lay.offload_gb:g}"]
    return f


def parallel_flags(lay: Layout) -> list[str]:
    """TP size and expert parallelism (vLLM's EP group is always the instance's DP x TP GPUs)."""
    if lay.engine not in (None, "vllm"):
        raise SpecError("", f"{lay.role}.engine", "vllm or unset (rackplan deploys vLLM; another engine's kernels "
                        "are priced, not deployed)", lay.engine)
    if lay.moe_backend is not None:
        raise SpecError("", f"{lay.role}.moe_backend", "unset (rackplan deploys vLLM with its own MoE kernel "
                        "choice; a backend's kernel is priced, not deployed)", lay.moe_backend)
    f = ["--tensor-parallel-size", str(lay.tp)]
    if lay.pp > 1:
        f += ["--pipeline-parallel-size", str(lay.pp)]
    if lay.ep_size == 1:
        return f
    if lay.ep_size != lay.stage_gpus:
        raise SpecError("", f"{lay.role}.ep", f"1 or dp*tp ({lay.gpus}): vLLM's expert-parallel group spans "
                        "the whole instance", lay.ep_size)
    if lay.all2all == "allgather_reducescatter":
        kernel = lay.all2all
    else:
        kernel = "deepep_high_throughput" if lay.role == "prefill" else "deepep_low_latency"
    f += ["--enable-expert-parallel", "--all2all-backend", kernel]
    if lay.eplb.redundant_experts or lay.eplb.policy != "none":
        f += ["--enable-eplb", "--eplb-config", _json({"num_redundant_experts": lay.eplb.redundant_experts})]
    return f


def speculation_flags(lay: Layout, cx: Context) -> list[str]:
    """The drafter of the model's family. A prefill instance of a disaggregated plan runs the decode
    pool's drafter too, so the KV it hands over has the draft layers' entries (vLLM V4.1 recipe:
    "DSpark runs in both pools so the transferred KV stays compatible")."""
    sp = lay.speculation
    if sp is None and lay.role == "prefill":
        sp = next((d.speculation for d in cx.plan.decode if d.speculation is not None), None)
    if sp is None:
        return []
    method = cx.family.spec_method
    if method is None or cx.model.draft is None:
        raise SpecError("", f"{lay.role}.speculation", f"none: {cx.model.name} has no drafter vLLM serves")
    spec = {"method": method, "num_speculative_tokens": sp.num_tokens}
    if method == "dspark":
        # the cost model prices verifying the whole block; adaptive verification would verify fewer
        spec.update(rejection_sample_method="block", enable_adaptive_verification=False)
    return ["--speculative-config", _json(spec)]


def graph_flags(lay: Layout) -> list[str]:
    """CUDA graphs for decode-only steps (what host.py prices), none for prompt steps."""
    if not lay.cuda_graphs:
        return ["--enforce-eager"]
    f = ["--compilation-config", _json({"cudagraph_mode": "FULL_DECODE_ONLY"})]
    if lay.role != "prefill":
        f += ["--max-cudagraph-capture-size", str(lay.max_decode_tokens)]
    return f


def frontend_settings(lay: Layout, local_ranks: int) -> tuple[int, int]:
    """(API-server processes per endpoint, stream interval in tokens): what the planner chose for the
    layout (Layout.api_servers, Layout.stream_interval; sim/cost/host.py prices them); no API-server
    count means vLLM's own default, one per local DP rank (hybrid-LB default)."""
    return lay.api_servers or max(1, local_ranks), lay.stream_interval


def dbo_flags(lay: Layout, cx: Context) -> list[str]:
    if not (lay.dbo and lay.ep_size > 1):
        return []
    return ["--enable-dbo", "--dbo-decode-token-threshold", str(lay.dbo_decode_token_threshold),
            "--dbo-prefill-token-threshold", str(lay.dbo_prefill_token_threshold)]


def kv_flags(lay: Layout, cx: Context) -> list[str]:
    kv = KV_DTYPES.get(cx.model.dtypes.kv_cache)
    if kv is None:
        raise SpecError("", "dtypes.kv_cache", "a KV dtype vLLM serves: " + ", ".join(KV_DTYPES),
                        cx.model.dtypes.kv_cache)
    f = ["--kv-cache-dtype", kv]
    f.append("--enable-prefix-caching" if cx.workload.prefix_hit_rate > 0 else "--no-enable-prefix-caching")
    if cx.plan.disaggregated:
        f += ["--kv-transfer-config", _json({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
    return f


# KV block size the attention kind needs: V4's compressed attention (csa) keeps its compressed
# entries in 256-token blocks (vLLM recipes DeepSeek-V4-Flash base_args `--block-size 256`; llm-d
# wide-ep-lws vllm-deepseek-v4 decode.yaml; V4.1 shares the attention)
BLOCK_SIZE = {"csa": 256}


def kernel_flags(cx: Context) -> list[str]:
    """The KV block size the attention needs and the MoE kernel the cost model priced: MXFP4 experts
    on Blackwell (fp4 tensor cores) as FlashInfer's TRT-LLM MoE, the kernel vLLM's MXFP4 oracle picks
    and the per-op tables time (sim/cost/efficiency.py KERNEL_FORMATS note); other experts as vLLM's
    own choice ("auto"), which is what the profiles' fp8_block / bf16 expert rows measured."""
    f = []
    if cx.model.attention.kind in BLOCK_SIZE:
        f += ["--block-size", str(BLOCK_SIZE[cx.model.attention.kind])]
    mxfp4 = cx.model.dtypes.expert_weights == "mxfp4" and "fp4" in cx.hw.peak_flops
    return f + ["--moe-backend", "flashinfer_trtllm" if mxfp4 else "auto"]


def serve_flags(lay: Layout, cx: Context) -> list[str]:
    """Engine flags of one instance of `lay` (placement and ports are added by the launcher)."""
    sched = ["--async-scheduling" if lay.async_scheduling else "--no-async-scheduling"]
    return (list(cx.family.extra) + parallel_flags(lay) + dbo_flags(lay, cx) + speculation_flags(lay, cx)
            + kv_flags(lay, cx) + kernel_flags(cx) + batch_flags(lay) + graph_flags(lay) + sched)
