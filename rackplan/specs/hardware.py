"""HardwareSpec: one GPU type and how GPUs connect (scale-up NVLink domain, scale-out network)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .fields import check, non_negative, positive

# Compute dtypes that run on the same tensor-core rate (and fall back to each other's curves)
DTYPE_FAMILY = {"mxfp4": "fp4", "nvfp4": "fp4", "mxfp8": "fp8", "fp8_block": "fp8", "fp16": "bf16",
                "mxfp4_bf16": "bf16"}  # (a weight-only kernel: MXFP4 weights computed in BF16, sim/cost/efficiency.py)


@dataclass(frozen=True)
class HardwareSpec:
    """Per-GPU datasheet peaks, memory, and the topology that prices communication."""

    name: str
    hbm_bytes: float  # usable HBM per GPU, bytes
    hbm_bw: float  # B/s
    peak_flops: dict[str, float]  # dense FLOP/s per compute dtype ("bf16", "fp8", "fp4")
    scaleup_bw: float  # NVLink B/s per GPU, unidirectional
    domain_size: int  # GPUs in one NVLink domain (8 for HGX, 72 for NVL72)
    scaleout_bw: float  # B/s per GPU on the scale-out network (NIC line rate)
    gpus_per_node: int  # GPUs per host (CPU) node
    host_cpu: str = ""
    source: str = ""
    num_sms: int = 0  # streaming multiprocessors per GPU (0: unknown; comm kernels then take none from compute)
    host_link_bw: float = 0.0  # host memory -> GPU B/s per GPU for offloaded weights (0: no offload path)
    # L2 cache bytes per GPU (0: unknown): a streaming op whose working set fits runs from L2, faster than
    # HBM (the measured profile's stream curves then carry an in-L2 regime, calibration/opdb_ops.py)
    l2_bytes: float = 0.0
    # query heads per rank a sparse-MLA prefill kernel computes in one tile: FlashMLA's BF16 sparse
    # prefill (flash_mla_sparse_fwd) needs a multiple of 64 heads on Hopper (SM90) and of 128 on
    # Blackwell (SM100); vLLM pads the rest with zero heads (vllm flashmla_sparse.py)
    sparse_prefill_head_tile: int = 64
    # CUDA compute capability, major x 10 + minor (90: Hopper SM90; 100 / 103: Blackwell; 0: not stated): what an
    # engine keys its kernel choices on (sim/cost/efficiency.py expert_backend, attention_backend, prefill_backend)
    compute_capability: int = 0
    # profile that prices this hardware when neither --profile nor the plan names one: a measured
    # profile where one is shipped (configs/profiles/), else the generic datasheet one
    default_profile: str = "datasheet"
    # "cpu": the host's cores stand in for GPUs (the CPU executor): no CUDA graphs, and host work
    # runs on the core the "device" work runs on, so async scheduling cannot hide it
    kind: Literal["gpu", "cpu"] = "gpu"
    # how hosts reach each other, which the deployment's settings follow (rackplan/deploy/fabric.py):
    # "mnnvl": NVLink spans the trays of a rack (NVL72: IMEX channels, NCCL/UCX multi-node NVLink);
    # "infiniband": NVLink inside a host, InfiniBand RDMA between hosts (NVSHMEM IBGDA, NCCL IB);
    # "none": no fabric a vLLM deployment uses (the CPU executor's loopback)
    fabric: Literal["mnnvl", "infiniband", "none"] = "none"
    # CPU rigs (kind cpu): cores the ranks run on (0: detected, the cores this process may run on) and
    # intra-op threads per rank; more busy ranks x threads than cores share them (core_share)
    cores: int = 0
    threads_per_rank: int = 1
    # CPU rigs: the rig's measured speed state, a rank's seconds for a fixed amount of work over those at the
    # speed its profile was fitted at (the in-place CPU-speed probe, executor/probe.py, over the profile's
    # provenance.speed_probe.ref_cpu_s: 1.3 = every CPU-bound op 1.3x slower); the price of every step and of
    # a prefill instance's intake is multiplied by it, as a GPU's clock would scale its kernels. 1: the
    # profile's own speed (every shipped hardware; benchmarks/plan_to_hardware.py sets it per serving segment)
    cpu_speed: float = 1.0

    @property
    def rank_cores(self) -> int:
        """Cores a CPU rig's ranks run on: `cores`, else detected (os.sched_getaffinity)."""
        if self.cores:
            return self.cores
        import os
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    @property
    def rank_capacity(self) -> int:
        """Busy ranks the machine runs at once without sharing a core (a GPU rig: unbounded here,
        its GPU budget is the plan's)."""
        return max(1, self.rank_cores // self.threads_per_rank) if self.kind == "cpu" else 1 << 30

    def core_share(self, busy_ranks: int) -> float:
        """How much slower each busy rank runs when `busy_ranks` x threads_per_rank threads share the
        rig's cores (1: none shared; 3 single-thread ranks on 2 cores: 1.5). GPUs: 1."""
        if self.kind != "cpu":
            return 1.0
        return max(1.0, busy_ranks * self.threads_per_rank / self.rank_cores)
    # power per GPU in watts (0: unknown; rackplan/economics.py prices energy and tokens per MW from it):
    # the board's rated power, and the GPU's share of its whole system (CPUs, NICs, switches, fans or
    # pumps) idle and at full load; `power_source` says where they come from, printed in reports
    board_power_w: float = 0.0
    power_idle_w: float = 0.0
    power_loaded_w: float = 0.0
    power_source: str = ""
    # default price of one GPU-hour in USD (0: none; --price-per-gpu-hour or --cost give it), with the
    # dated public list it comes from
    price_per_gpu_hour: float = 0.0
    price_source: str = ""
    # failures that stop an instance, per GPU-year, the hours an instance is down per failure when a spare
    # node takes the failed one's place (0: not known; rackplan/availability.py), the hours a failed node
    # is out of service until it is replaced (an instance without a spare waits that long; 0: repair_hours),
    # with their source
    failures_per_gpu_year: float = 0.0
    repair_hours: float = 0.0
    failure_source: str = ""
    replace_hours: float = 0.0

    @property
    def host_overlap(self) -> bool:
        """Whether host work can run beside device work (CUDA graphs, async scheduling)."""
        return self.kind == "gpu"

    def __post_init__(self):
        for name in ("hbm_bytes", "hbm_bw", "scaleup_bw", "scaleout_bw", "domain_size", "gpus_per_node"):
            positive(getattr(self, name), name)
        non_negative(self.num_sms, "num_sms")
        non_negative(self.cores, "cores")
        positive(self.threads_per_rank, "threads_per_rank")
        positive(self.cpu_speed, "cpu_speed")
        check(self.kind == "cpu" or self.cpu_speed == 1.0, "cpu_speed", "1 on a GPU rig (a CPU rig's speed state)",
              self.cpu_speed)
        non_negative(self.host_link_bw, "host_link_bw")
        non_negative(self.l2_bytes, "l2_bytes")
        for name in ("board_power_w", "power_idle_w", "power_loaded_w", "price_per_gpu_hour",
                     "failures_per_gpu_year", "repair_hours", "replace_hours"):
            non_negative(getattr(self, name), name)
        check(self.power_idle_w <= self.power_loaded_w, "power_idle_w",
              f"at most power_loaded_w ({self.power_loaded_w:g})", self.power_idle_w)
        positive(self.sparse_prefill_head_tile, "sparse_prefill_head_tile")
        non_negative(self.compute_capability, "compute_capability")
        check(len(self.peak_flops) > 0, "peak_flops", "at least one dtype")
        for k, v in self.peak_flops.items():
            positive(v, f"peak_flops.{k}")
        check(self.domain_size % self.gpus_per_node == 0, "domain_size",
              f"a multiple of gpus_per_node ({self.gpus_per_node})", self.domain_size)

    @property
    def nodes_per_domain(self) -> int:
        return self.domain_size // self.gpus_per_node

    def flops_for(self, dtype: str) -> float:
        """Peak dense FLOP/s for a compute dtype; falls back to the widest supported below it."""
        order = ["fp4", "fp8", "bf16", "fp32"]
        key = DTYPE_FAMILY.get(dtype, dtype)
        for cand in order[order.index(key):]:
            if cand in self.peak_flops:
                return self.peak_flops[cand]
        return min(self.peak_flops.values())
