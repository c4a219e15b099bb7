"""Layout and Plan: the shape of each serving instance, and the whole deployment.

A Plan is what `plan` writes and what `simulate` and `execute` read, so the planner and the
executor can never disagree about what was planned.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from .fields import OMIT_IF_NONE, check, non_negative, positive


@dataclass(frozen=True)
class EPLBConfig:
    """Expert-parallel load balancing: redundant expert slots and the placement policy."""

    redundant_experts: int = 0
    policy: Literal["hierarchical", "global", "none"] = "none"

    def __post_init__(self):
        non_negative(self.redundant_experts, "redundant_experts")
        # policy none is contiguous experts (sim/eplb/model.py: slots unused), while deploy's --enable-eplb
        # would balance them: redundant slots need a policy that places them
        check(not self.redundant_experts or self.policy != "none", "policy",
              f"hierarchical or global with {self.redundant_experts} redundant experts (none leaves them unused)",
              self.policy)


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding in use: the model's draft (MTP / DSpark) and its mean acceptance."""

    num_tokens: int  # draft tokens proposed per step
    acceptance_length: float  # mean tokens emitted per step per sequence (1 + accepted drafts)

    def __post_init__(self):
        positive(self.num_tokens, "num_tokens")
        check(1.0 <= self.acceptance_length <= self.num_tokens + 1, "acceptance_length",
              f"between 1 and num_tokens + 1 ({self.num_tokens + 1})", self.acceptance_length)


@dataclass(frozen=True)
class Layout:
    """One serving role's instance shape, replicated `replicas` times.

    `dp` attention ranks, each with `tp` GPUs, in `pp` pipeline stages; MoE over `ep` GPUs of a
    stage (`dp * tp` by default: DEPn is dp=n, tp=1, ep=n). `expert_parallel: false` shards every
    expert `tp` ways instead (vLLM without --enable-expert-parallel; dp must be 1).
    """

    role: Literal["prefill", "decode", "both"]
    dp: int
    tp: int = 1
    ep: Optional[int] = None
    pp: int = 1  # pipeline stages, each holding num_layers / pp layers (vLLM --pipeline-parallel-size)
    expert_parallel: bool = True  # experts split over the EP group (vLLM --enable-expert-parallel)
    replicas: int = 1
    max_tokens_per_step: int = 8192  # token budget per DP rank per step
    max_batch_per_rank: int = 256  # running sequences per DP rank
    dbo: bool = False  # dual-batch overlap
    # vLLM 0.33 config/parallel.py defaults: a step is split in two micro-batches only when every DP
    # rank has at least this many tokens (decode-only steps / steps with prompt tokens)
    dbo_decode_token_threshold: int = 32
    dbo_prefill_token_threshold: int = 512
    cuda_graphs: bool = True
    async_scheduling: bool = True
    # API-server processes per endpoint (vLLM --api-server-count; None: vLLM's default, one per DP
    # rank the endpoint serves) and tokens buffered per streamed chunk (--stream-interval)
    api_servers: Optional[int] = None
    stream_interval: int = 1
    speculation: Optional[Speculation] = None
    eplb: EPLBConfig = field(default_factory=EPLBConfig)
    moe_imbalance: Optional[float] = None  # fixed max/mean expert load; None: from the routing model
    # weights per GPU kept in host memory and streamed to the GPU every forward pass (vLLM
    # --cpu-offload-gb; routed experts first), GB
    offload_gb: float = 0.0
    # fraction of HBM the engine may use for weights, activations and KV cache (vLLM
    # --gpu-memory-utilization); None: the engine's own default (sim/cost/memory.py memory_fraction: vLLM's 0.9)
    gpu_memory_utilization: Optional[float] = None
    # how the EP group exchanges tokens around the routed experts (vLLM --all2all-backend): DeepEP's kernels
    # (deepep_high_throughput for prompt steps, deepep_low_latency for decode; what rackplan deploys), or
    # NCCL all-gather of every DP rank's tokens before the experts and reduce-scatter after
    # (allgather_reducescatter, vLLM's default backend): every rank's MoE kernel then takes all gathered tokens.
    # None: deepep (left out of written plans, so earlier plans and their hashes are unchanged)
    all2all: Optional[Literal["deepep", "allgather_reducescatter"]] = field(default=None, metadata=OMIT_IF_NONE)
    # the serving engine whose kernels price the routed experts (sim/cost/efficiency.py expert_backend): vllm, or
    # sglang, whose DeepEP MoE runs DeepGEMM's grouped GEMMs for block-FP8 experts; None: vllm (left out of plans)
    engine: Optional[Literal["vllm", "sglang"]] = field(default=None, metadata=OMIT_IF_NONE)
    # the routed-experts kernel in place of the engine's default for the model's weights (efficiency.BACKENDS:
    # deepgemm behind DeepEP; marlin, vLLM's weight-only MXFP4 MoE without DeepEP; triton_default, the Triton MoE at
    # its untuned default configuration, where the engine ships no tuned config for the expert shape and GPU);
    # None: the engine's default (left out of plans)
    moe_backend: Optional[Literal["deepgemm", "marlin", "triton_default"]] = field(default=None, metadata=OMIT_IF_NONE)

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "replicas", "max_tokens_per_step", "max_batch_per_rank", "stream_interval"):
            positive(getattr(self, name), name)
        if self.api_servers is not None:
            positive(self.api_servers, "api_servers")
        if self.ep is not None:
            check(self.ep > 0 and self.stage_gpus % self.ep == 0, "ep",
                  f"a positive divisor of dp*tp ({self.stage_gpus})", self.ep)
        if not self.expert_parallel:
            check(self.ep in (None, 1), "ep", "1 or unset when expert_parallel is false", self.ep)
            check(self.dp == 1, "expert_parallel", "true when dp > 1 (vLLM then forms one dp x tp tensor-"
                  "parallel MoE group over all-gathered tokens, which is not modelled)", self.expert_parallel)
        for name in ("dbo_decode_token_threshold", "dbo_prefill_token_threshold"):
            # vLLM 0.33 rejects thresholds below the number of micro-batches
            check(getattr(self, name) >= 2, name, "an integer >= 2 (the two micro-batches)", getattr(self, name))
        non_negative(self.offload_gb, "offload_gb")
        if self.gpu_memory_utilization is not None:
            check(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization", "a fraction in (0, 1]",
                  self.gpu_memory_utilization)
        if self.moe_imbalance is not None:
            check(self.moe_imbalance >= 1.0, "moe_imbalance", "a factor >= 1", self.moe_imbalance)
        check(self.all2all != "allgather_reducescatter" or self.exchanges_tokens, "all2all",
              "deepep or unset unless the layout's EP group exchanges tokens (ep > 1 over DP ranks)", self.all2all)

    @property
    def exchanges_tokens(self) -> bool:
        """Whether the EP group moves tokens between ranks around the experts (not under TP MoE, where every
        rank holds the step's tokens, nor without EP): the op list's moe.dispatch / moe.combine."""
        return self.ep_size > 1 and not (self.dp == 1 and self.tp > 1)

    @property
    def deepep(self) -> bool:
        """Whether the EP group exchanges tokens through DeepEP's kernels (not vLLM's all-gather / reduce-scatter)."""
        return self.exchanges_tokens and self.all2all != "allgather_reducescatter"

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage (the attention DP x TP ranks, and the EP group)."""
        return self.dp * self.tp

    @property
    def gpus(self) -> int:
        """GPUs in one instance."""
        return self.stage_gpus * self.pp

    @property
    def ep_size(self) -> int:
        if not self.expert_parallel:
            return 1
        return self.ep if self.ep is not None else self.stage_gpus

    @property
    def moe_tp(self) -> int:
        """Ways each expert is sharded by its intermediate width: the stage's GPUs over the EP group
        (tp without expert parallelism, 1 at the default ep = dp * tp; executor/topology.py builds
        its expert-TP groups from this)."""
        return self.stage_gpus // self.ep_size

    @property
    def tokens_per_step(self) -> float:
        """Output tokens one decode step emits per sequence: the speculation's acceptance length, 1
        without speculation."""
        return self.speculation.acceptance_length if self.speculation else 1.0

    @property
    def queries_per_step(self) -> int:
        """Tokens one decode step verifies per sequence: the sequence's next token and the draft tokens
        (1 + num_tokens under speculation, else 1)."""
        return 1 + (self.speculation.num_tokens if self.speculation else 0)

    def decode_tokens(self, batch: int) -> int:
        """Tokens a decode step of `batch` sequences per rank carries (batch x queries_per_step)."""
        return batch * self.queries_per_step

    @property
    def max_decode_tokens(self) -> int:
        """Tokens per rank of the largest decode step (max_batch_per_rank sequences): the token budget
        a decode or aggregated engine needs at least (vLLM's --max-num-batched-tokens), the executor's
        static all-to-all buffer."""
        return self.decode_tokens(self.max_batch_per_rank)

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.replicas

    @property
    def tag(self) -> str:
        """Short name, e.g. 'DEP64', 'TP8', 'TP4-EP4', 'TP2xDP4-EP8', 'TP8-PP2'."""
        pp = f"-PP{self.pp}" if self.pp > 1 else ""
        if self.tp == 1 and self.ep_size == self.dp:
            return f"DEP{self.dp}{pp}"
        if self.dp == 1:
            return f"TP{self.tp}" + (f"-EP{self.ep_size}" if self.ep_size > 1 else "") + pp
        return f"TP{self.tp}xDP{self.dp}-EP{self.ep_size}{pp}"


@dataclass(frozen=True)
class SLO:
    ttft_p90_s: float = 2.0
    tpot_p90_s: float = 0.05

    def __post_init__(self):
        positive(self.ttft_p90_s, "ttft_p90_s")
        positive(self.tpot_p90_s, "tpot_p90_s")


@dataclass(frozen=True)
class PlanInstance:
    """One running instance of a plan: replica `replica` of the layout at `pool`[`index`]."""

    pool: str  # prefill | decode | aggregated
    index: int  # the layout's position in its pool
    replica: int
    layout: Layout

    @property
    def entry(self) -> str:
        """The plan field of its layout, e.g. 'decode[0]' (error messages, per-entry state)."""
        return f"{self.pool}[{self.index}]"

    @property
    def name(self) -> str:
        """The instance's name in reports, logs and records, e.g. 'decode[0].3'."""
        return f"{self.entry}.{self.replica}"

    @property
    def slug(self) -> str:
        """The name where brackets cannot go (file names, host scripts, Kubernetes objects), e.g. 'decode0-3'."""
        return f"{self.pool}{self.index}-{self.replica}"


PREDICTED_POSITIVE = ("request_rate", "sim_requests")  # predicted figures commands read back from a plan


@dataclass(frozen=True)
class Plan:
    """A deployment: model + hardware + instances (disaggregated or aggregated) + SLOs."""

    name: str
    model: str
    hardware: str
    num_gpus: int  # GPUs available to the plan
    prefill: tuple[Layout, ...] = ()
    decode: tuple[Layout, ...] = ()
    aggregated: tuple[Layout, ...] = ()
    # least_loaded: fewest queued prompt tokens (prefill) / requests; round_robin; prefix_aware: least
    # queued prompt tokens minus the tokens the instance's prefix cache holds for the request
    router: Literal["least_loaded", "round_robin", "prefix_aware", "session_affine"] = "least_loaded"
    slo: SLO = field(default_factory=SLO)
    workload: Optional[str] = None  # default workload (name under configs/workloads or a path)
    profile: Optional[str] = None  # calibrated profile to use by default
    predicted: dict[str, float] = field(default_factory=dict)
    description: str = ""
    # prefill and decode instances time-share the same GPUs (instance i of each pool on the same
    # ranks, one step at a time), as the CPU executor's serving mode runs them
    colocated: bool = False
    # mixed hardware (sim/mixed.py): the prefill pool on another hardware kind than `hardware` (which
    # the decode pool runs on), priced with `prefill_profile` (default: that hardware's default
    # profile); `kv_link_bw` (B/s per GPU) declares the link the KV cache crosses between them
    # (default: the slower scale-out NIC of the two)
    prefill_hardware: Optional[str] = field(default=None, metadata=OMIT_IF_NONE)
    prefill_profile: Optional[str] = field(default=None, metadata=OMIT_IF_NONE)
    kv_link_bw: Optional[float] = field(default=None, metadata=OMIT_IF_NONE)

    def __post_init__(self):
        positive(self.num_gpus, "num_gpus")
        if self.prefill_hardware is not None or self.prefill_profile is not None:
            check(bool(self.decode) and not self.colocated, "prefill_hardware", "a disaggregated, not colocated "
                  "plan (only a separate prefill pool can run on other hardware)", self.prefill_hardware)
            check(self.prefill_hardware is not None, "prefill_hardware", "the prefill pool's hardware name or "
                  "YAML path (with prefill_profile)", self.prefill_hardware)
        if self.kv_link_bw is not None:
            positive(self.kv_link_bw, "kv_link_bw")
            check(bool(self.decode) and not self.colocated, "kv_link_bw", "a disaggregated, not colocated plan "
                  "(the link between its prefill and decode pools)", self.kv_link_bw)
        disagg = bool(self.prefill) or bool(self.decode)
        check(disagg != bool(self.aggregated), "aggregated",
              "either prefill+decode instances or aggregated instances, not both or neither")
        if disagg:
            check(bool(self.prefill) and bool(self.decode), "prefill",
                  "both prefill and decode instances in a disaggregated plan")
        check(not self.colocated or disagg, "colocated", "false for an aggregated plan (its instances "
              "already share their GPUs)")
        for i, lay in enumerate(self.prefill):
            check(lay.role == "prefill", f"prefill[{i}].role", "'prefill'", lay.role)
        for i, lay in enumerate(self.decode):
            check(lay.role == "decode", f"decode[{i}].role", "'decode'", lay.role)
        for i, lay in enumerate(self.aggregated):
            check(lay.role == "both", f"aggregated[{i}].role", "'both'", lay.role)
        check(self.gpus_used <= self.num_gpus, "num_gpus",
              f"at least the GPUs the instances use ({self.gpus_used})", self.num_gpus)
        for key in PREDICTED_POSITIVE:  # read back as the load to simulate (whatif, simulate, deploy's bench)
            if key in self.predicted:
                value = self.predicted[key]
                check(value > 0 and value != float("inf"), f"predicted.{key}", "a finite number > 0", value)

    def instances(self) -> tuple[PlanInstance, ...]:
        """Every instance of the plan in plan order: the prefill, decode and aggregated pools, each
        layout's replicas in turn."""
        return tuple(PlanInstance(pool, i, j, lay) for pool in ("prefill", "decode", "aggregated")
                     for i, lay in enumerate(getattr(self, pool)) for j in range(lay.replicas))

    @property
    def gpus_used(self) -> int:
        if self.colocated:
            return max(sum(lay.total_gpus for lay in pool) for pool in (self.prefill, self.decode))
        return sum(lay.total_gpus for lay in self.prefill + self.decode + self.aggregated)

    @property
    def disaggregated(self) -> bool:
        return bool(self.decode)

    @property
    def summary(self) -> str:
        def pool(lays):
            return " + ".join(f"{lay.replicas}x{lay.tag}" for lay in lays)
        if self.disaggregated:
            return f"prefill {pool(self.prefill)} | decode {pool(self.decode)}"
        return f"aggregated {pool(self.aggregated)}"
