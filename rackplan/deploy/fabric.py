"""What a vLLM instance needs from the fabric between its hosts, per hardware class (HardwareSpec.fabric).

An instance needs fabric settings when its all-to-all or its KV hand-off leaves the host: it spans
hosts (Wide-EP over several trays or nodes) or the plan is disaggregated (NIXL moves KV between the
prefill and decode hosts). Then:
- "mnnvl" (GB200/GB300 NVL72: NVLink spans the trays of a rack): NCCL's and UCX's multi-node NVLink
  paths, and on Kubernetes an IMEX channel from a ComputeDomain (NVIDIA DRA driver for GPUs), without
  which no GPU maps another tray's memory;
- "infiniband" (HGX nodes, NVLink inside a node, InfiniBand between nodes): DeepEP's NVSHMEM over
  IBGDA (GPU-initiated RDMA), NCCL's HCA choice, and on Kubernetes an RDMA device per pod;
- both: GDRCopy (DeepEP's internode kernels and NVSHMEM IBGDA use it), the socket interface Gloo,
  NCCL and the NVSHMEM bootstrap use, and IPC_LOCK for registered memory (set on every pod).
Values an operator must supply (the interface name, the HCA prefix, the RDMA resource name) are
OPERATOR variables with the published example's value as default; README.md lists them.
"""
from __future__ import annotations

from dataclasses import dataclass

from rackplan.specs import HardwareSpec, Plan, SpecError

LLMD_V4 = "llm-d guides/wide-ep-lws/modelserver/gpu/vllm-deepseek-v4/base/decode.yaml"
LLMD_IB = "llm-d guides/wide-ep-lws/manifests/modelserver/base/decode.yaml (H200 over InfiniBand)"
LLMD_CW = "llm-d guides/wide-ep-lws/modelserver/gpu/vllm-deepseek-r1-0528/coreweave/kustomization.yaml"
NCCL_ENV = "NCCL docs, Environment Variables"
DEEPEP = "DeepEP README (internode and low-latency kernels need NVSHMEM IBGDA and GDRCopy)"
DRA = "NVIDIA k8s-dra-driver-gpu: ComputeDomain CRD (resource.nvidia.com/v1beta1), demo/specs/imex"

# operator-supplied, with the published example's value as default
OPERATOR = {
    "SOCKET_IFNAME": ("eth0", f"the hosts' IP interface for Gloo/NCCL/NVSHMEM bootstrap ({LLMD_IB})"),
    "IB_HCA": ("mlx5", f"InfiniBand HCA name prefix for NCCL and NVSHMEM ({NCCL_ENV}: NCCL_IB_HCA; "
               f"{LLMD_CW} uses 'ibp')"),
}
RDMA_RESOURCE = ("rdma/ib", f"the RDMA device plugin's resource name ({LLMD_CW})")


@dataclass(frozen=True)
class Setting:
    """One environment variable: a fixed value, or (`operator` set) the value of an OPERATOR variable."""

    name: str
    value: str
    source: str
    operator: str | None = None

    def shell_value(self) -> str:
        return f'"${self.operator}"' if self.operator else self.value


def _op(name: str, var: str, source: str) -> Setting:
    return Setting(name, OPERATOR[var][0], source, var)


COMMON = (
    Setting("NVIDIA_GDRCOPY", "enabled", f"{DEEPEP}; {LLMD_V4} (container toolkit mounts GDRCopy)"),
    _op("GLOO_SOCKET_IFNAME", "SOCKET_IFNAME", LLMD_IB),
    _op("NCCL_SOCKET_IFNAME", "SOCKET_IFNAME", f"{NCCL_ENV}; {LLMD_IB}"),
)
SETTINGS = {
    "mnnvl": COMMON + (
        Setting("NCCL_MNNVL_ENABLE", "1", f"{NCCL_ENV} (multi-node NVLink); {LLMD_V4}"),
        Setting("NCCL_CUMEM_ENABLE", "1", f"{NCCL_ENV} (MNNVL needs cuMem buffers); {LLMD_V4}"),
        Setting("NCCL_NVLS_ENABLE", "1", f"{NCCL_ENV} (NVLink SHARP); {LLMD_V4}"),
        Setting("NCCL_P2P_LEVEL", "NVL", f"{NCCL_ENV}; {LLMD_V4}"),
        Setting("UCX_CUDA_IPC_ENABLE_MNNVL", "y", f"UCX cuda_ipc over multi-node NVLink (NIXL KV); {LLMD_V4}"),
        Setting("UCX_TLS", "cuda_copy,cuda_ipc,tcp", LLMD_V4),
        Setting("UCX_MEMTYPE_CACHE", "n", LLMD_V4),
        Setting("UCX_MEMTYPE_REG_WHOLE", "n", LLMD_V4),
        Setting("VLLM_USE_NCCL_SYMM_MEM", "1", LLMD_V4),
        Setting("TORCH_SYMMMEM", "NVSHMEM", LLMD_V4),
    ),
    "infiniband": COMMON + (
        Setting("NVSHMEM_REMOTE_TRANSPORT", "ibgda", f"{DEEPEP}; {LLMD_IB}"),
        Setting("NVSHMEM_IB_ENABLE_IBGDA", "true", f"{DEEPEP}; {LLMD_IB}"),
        _op("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "SOCKET_IFNAME", LLMD_IB),
        _op("NCCL_IB_HCA", "IB_HCA", f"{NCCL_ENV}; {LLMD_IB}"),
        _op("NVSHMEM_HCA_PREFIX", "IB_HCA", LLMD_CW),
    ),
    "none": (),
}


def needs_fabric(plan: Plan, multi_host: bool) -> bool:
    """Whether an instance's traffic leaves its host: it spans hosts, or NIXL hands KV between hosts."""
    return multi_host or plan.disaggregated


def settings(hw: HardwareSpec, plan: Plan, multi_host: bool) -> tuple[Setting, ...]:
    """The fabric environment of one instance (none when its traffic stays on its host)."""
    if not needs_fabric(plan, multi_host):
        return ()
    if hw.fabric == "none":
        raise SpecError("", "hardware.fabric", f"mnnvl or infiniband: {hw.name} names no fabric between hosts "
                        "and this plan's instances reach across hosts", hw.fabric)
    return SETTINGS[hw.fabric]


def operators(hw: HardwareSpec) -> list[str]:
    """OPERATOR variables the fabric settings of `hw` read."""
    return sorted({s.operator for s in SETTINGS[hw.fabric] if s.operator})
