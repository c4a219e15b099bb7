"""Expert-parallel dispatch and combine (all-to-all), per rank per MoE layer.

How many copies of a token cross each link depends on the kernel (DeepEP, deepseek-ai/DeepEP):
- high-throughput (DeepEP normal kernels, prefill): hierarchical. A token crosses the scale-out
  network once per remote NVLink domain ("node") that holds any of its experts, to the GPU with the
  same local index there, which forwards it over NVLink to the other GPUs of that node that need
  it; inside the sender's own node it goes over NVLink to each GPU that holds its experts. Per
  token: scale-out copies (nodes - 1) p_node, NVLink copies (ep - nodes) p_rank, with p_* the
  chance that one node / rank holds one of its top-k picks (moe.holder_hit_probability, which
  knows DeepSeek-V3's node-limited routing: about 2.4 remote nodes per token at EP32 instead of
  6.9 remote ranks). Combine is the reverse (reduced inside a node before it crosses back).
- low-latency (DeepEP LL kernels, decode): one message per (token, picked expert), straight to
  the expert's rank (RDMA, or NVLink inside the domain): k (ep - dom) / ep copies over the
  scale-out network and k (dom - 1) / ep over NVLink. DeepEP's LL test counts its bandwidth the
  same way (bytes x selections, tests/legacy/test_low_latency.py).
Both links run at once, so a phase takes alpha + max(nvlink bytes / bw, scale-out bytes / bw).

Under vLLM's `--all2all-backend allgather_reducescatter` (Layout.all2all) there is no all-to-all: the
dispatch is an NCCL all-gather of every DP rank's tokens (each rank ends with all of them) and the combine a
reduce-scatter of every rank's expert outputs for all tokens (each rank keeps its own rows, summed). A ring
moves (n - 1)/n of the gathered tensor per GPU in each (NCCL's bus bandwidth convention); a ring all-reduce
is exactly a reduce-scatter then an all-gather, so each is priced at the link fraction the profile's
all-reduce curve gives at the gathered tensor's size (efficiency.allreduce, sim/cost/collective.py), over
NVLink inside the domain, over the scale-out NIC when the group spans domains.
"""
from __future__ import annotations

from dataclasses import dataclass

from rackplan.specs import DTYPE_BYTES, A2AParams, HardwareSpec, Layout, ModelSpec, Profile

from . import efficiency
from .moe import holder_hit_probability

LL_HEADER_BYTES = 16.0  # per LL dispatch message: source index and layout info (DeepEP test_low_latency.py)


def bytes_per_token(model: ModelSpec, dtype: str) -> float:
    """Payload of one token copy: hidden x dtype, plus one fp32 scale per 128 for FP8
    (DeepEP / TRT-LLM FP8 dispatch: 7,168 + 224 = 7,392 B for DeepSeek-V3)."""
    h = model.hidden_size
    extra = h / 128 * 4 if dtype == "fp8" else 0.0
    return h * DTYPE_BYTES[dtype] + extra


def domain_nodes(layout: Layout, hw: HardwareSpec) -> tuple[int, int]:
    """(GPUs of the EP group per NVLink domain, NVLink domains the EP group spans)."""
    ep = layout.ep_size
    dom = min(ep, hw.domain_size)
    return dom, -(-ep // dom)


def token_copies(model: ModelSpec, layout: Layout, hw: HardwareSpec, kernel: str) -> tuple[float, float]:
    """(NVLink copies, scale-out copies) of one token that one rank sends in one phase."""
    ep = layout.ep_size
    if ep <= 1:
        return 0.0, 0.0
    dom, nodes = domain_nodes(layout, hw)
    if kernel == "low_latency":
        k = model.moe.top_k
        return k * (dom - 1) / ep, k * (ep - dom) / ep
    p_rank = holder_hit_probability(model, 1.0 / ep)
    if nodes == 1:
        return (ep - 1) * p_rank, 0.0
    p_node = holder_hit_probability(model, 1.0 / nodes)
    return (ep - nodes) * p_rank, (nodes - 1) * p_node


def copy_bytes(model: ModelSpec, dtype: str, kernel: str) -> float:
    """Bytes one copy moves: the payload, plus the LL kernels' message header on dispatch."""
    return bytes_per_token(model, dtype) + (LL_HEADER_BYTES if kernel == "low_latency" and dtype == "fp8" else 0.0)


def a2a_bytes(model: ModelSpec, layout: Layout, hw: HardwareSpec, tokens: float, dtype: str,
              kernel: str = "high_throughput") -> tuple[float, float]:
    """(NVLink bytes, scale-out bytes) one rank sends for `tokens` tokens in one phase."""
    nv, so = token_copies(model, layout, hw, kernel)
    b = tokens * copy_bytes(model, dtype, kernel)
    return nv * b, so * b


@dataclass(frozen=True)
class A2APhase:
    """One dispatch or combine of one layout with one kernel kind: link bytes per token sent and
    the profile's latency model per link (built once per layout; `seconds` per step)."""

    nv_bytes_per_token: float
    so_bytes_per_token: float
    nv: A2AParams
    so: A2AParams | None  # None when every EP peer is inside the NVLink domain
    scaleup_bw: float
    scaleout_bw: float

    def seconds(self, tokens: float) -> float:
        """Seconds of this phase for one layer when the rank sends `tokens` tokens."""
        t = self.nvlink_seconds(tokens)
        so_bytes = tokens * self.so_bytes_per_token
        if so_bytes > 0:
            so = self.so
            assert so is not None  # (so_bytes > 0: some EP peer is outside the NVLink domain)
            t = max(t, so.floor_s, so.alpha_s + so_bytes / (self.scaleout_bw * so.bw_eff))
        return t

    def send_kernel_seconds(self, tokens: float) -> float:
        """Seconds the low-latency kernel's send half holds the issuing stream when its receive half is
        a hook (DBO): the NVLink copies. DeepEP's LL send loop (csrc/kernels/internode_ll.cu) copies a
        message with the sending warp itself (UNROLLED_WARP_COPY over NVLink) when the peer is
        P2P-reachable, and only posts it to the NIC (IBGDA put) otherwise, so the scale-out transfer runs
        behind later kernels while the NVLink one is part of the send kernel. 0 without NVLink peers."""
        return self.nvlink_seconds(tokens) if self.nv_bytes_per_token > 0 else 0.0

    def nvlink_seconds(self, tokens: float) -> float:
        """The NVLink link's part of the phase: its latency model over the NVLink bytes."""
        nv = self.nv
        return max(nv.floor_s, nv.alpha_s + tokens * self.nv_bytes_per_token / (self.scaleup_bw * nv.bw_eff))


@dataclass(frozen=True)
class RingPhase:
    """The all-gather (dispatch) or reduce-scatter (combine) of allgather_reducescatter for one layout: every
    rank's `tokens` x `bytes_per_token` gathered over `ranks` ranks (`seconds` per step, as A2APhase)."""

    bytes_per_token: float
    ranks: int
    link_bw: float  # B/s per GPU of the slowest link the ring crosses
    prof: Profile

    def seconds(self, tokens: float) -> float:
        """Seconds of this collective for one layer when each rank holds `tokens` tokens."""
        gathered = self.ranks * tokens * self.bytes_per_token  # the whole tensor, B
        if gathered <= 0:
            return 0.0
        per_gpu = (self.ranks - 1) / self.ranks * gathered
        return per_gpu / (self.link_bw * efficiency.allreduce(self.prof, self.ranks, gathered)) + self.prof.op_fixed_s


def a2a_phase(model: ModelSpec, layout: Layout, hw: HardwareSpec, prof: Profile, phase: str,
              kernel: str) -> A2APhase | RingPhase | None:
    """The dispatch ('dispatch') or combine ('combine') phase of `layout`; None without EP."""
    if layout.ep_size <= 1:
        return None
    dtype = model.dtypes.dispatch if phase == "dispatch" else model.dtypes.combine
    if layout.all2all == "allgather_reducescatter":
        link = hw.scaleup_bw if layout.ep_size <= hw.domain_size else min(hw.scaleup_bw, hw.scaleout_bw)
        return RingPhase(bytes_per_token(model, dtype), layout.ep_size, link, prof)
    nv_bytes, so_bytes = a2a_bytes(model, layout, hw, 1.0, dtype, kernel)
    so = prof.a2a_params(kernel, "scaleout", layout.ep_size, phase) if so_bytes > 0 else None
    return A2APhase(nv_bytes, so_bytes, prof.a2a_params(kernel, "nvlink", layout.ep_size, phase), so,
                    hw.scaleup_bw, hw.scaleout_bw)


def a2a_seconds(model: ModelSpec, layout: Layout, hw: HardwareSpec, prof: Profile, tokens: float,
                phase: str, kernel: str) -> float:
    """Seconds of one dispatch ('dispatch') or combine ('combine') on one rank for one layer."""
    ph = a2a_phase(model, layout, hw, prof, phase, kernel)
    return ph.seconds(tokens) if ph is not None else 0.0
