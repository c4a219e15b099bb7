"""Dual-batch overlap (vLLM --enable-dbo, SGLang two-batch overlap): a step run as two
micro-batches whose all-to-alls overlap the other micro-batch's compute.

What really happens, and what this prices:
- vLLM splits a step only when every DP rank has at least the layout's token threshold
  (--dbo-decode-token-threshold, --dbo-prefill-token-threshold; ubatch_utils.check_ubatch_thresholds,
  agreed over the DP group); below it the step runs whole.
- Each micro-batch runs every op on half the tokens: it reads all the weights again and pays the
  all-to-all latency again, so at small batches the halves cost nearly what the whole step does
  (the step model prices each half as a step of its own).
- The two micro-batches alternate on the compute stream (attention a, attention b, experts a,
  experts b per layer) while dispatches and combines run one at a time on the network; each
  micro-batch waits for its own previous op. `pipeline` runs that schedule layer by layer, so its
  stalls (a micro-batch's own chain attention -> dispatch -> experts -> combine is as long as a
  whole unsplit layer when the halves cost what the whole does) are priced, not assumed away.
- Communication kernels hold SMs while they overlap compute: DeepEP's high-throughput kernels run
  on VLLM_DBO_COMM_SMS = 20 SMs (vllm/envs.py, the default; compute gets the rest, ubatch_utils.
  SMControlContextManager); the low-latency kernels wait for data through a receive hook and hold
  none (DeepEP README; vLLM's DeepEPLLAll2AllManager.max_sms_used is 0). Overlapped compute that is
  not DeepGEMM is slowed by that share for as long as the comm runs.
- With the high-throughput kernels the GEMM library gets the rest of the SMs for the whole split step,
  not only while a transfer overlaps: vLLM 0.11.0 (the PyPI wheel) enters SMControlContextManager
  around the whole two-thread run (v1/worker/gpu_ubatch_wrapper.py l. 379 and 398 `with
  self.sm_control:` around _capture_ubatches / _run_ubatches; __enter__ calls deep_gemm.set_num_sms(
  total_sms - comm_sms), l. 110-132, only when the all-to-all manager's max_sms_used is not 0: DeepEP
  LL returns 0, distributed/device_communicators/all2all.py l. 349), and SGLang's prefill TBO
  does the same (two_batch_overlap / operations_strategy._compute_moe_deepseek_blog_prefill:
  deep_gemm_num_sms = total SMs - DeepEP's num_sms; its decode strategy leaves it None). Every FP8
  GEMM both engines run through DeepGEMM on Hopper (vLLM 0.11.0 utils/deep_gemm.py
  should_use_deepgemm_for_fp8_linear: block-FP8 linears with a BF16 output; the routed experts'
  DeepGemmExperts) is then a persistent kernel on num_sms - COMM_SMS SMs, `deepgemm_sm_scale` times
  as long where its tiles fill the GPU several times over (prefill), and it no longer shares SMs
  with the transfer; only the other compute (attention core, norms, the BF16 router) does
  (`Stages.attn_shared` / `ffn_shared`).
- The low-latency kernels run on the compute stream itself (vLLM 0.11 DeepEPLLPrepareAndFinalize:
  low_latency_dispatch / low_latency_combine with return_recv_hook=True; the other micro-batch's
  thread runs the receive hook, modular_kernel.FusedMoEModularKernel.forward): each send kernel is
  enqueued right after the receive of the network's previous transfer and before the next compute,
  so the stream holds it for what the send kernel does itself. DeepEP's LL send loop copies an
  NVLink peer's message with the sending warp (UNROLLED_WARP_COPY) and only posts an RDMA peer's to
  the NIC (IBGDA), so the NVLink copies (`dispatch_send`, `combine_send`: alltoall.A2APhase.
  send_kernel_seconds) stay on the compute stream and only the scale-out transfer runs behind the
  other micro-batch's compute. Inside one NVLink domain nothing of an LL all-to-all is hidden.
- The profile's dbo_efficiency is the fraction of the ideal schedule's saving realised (switch
  and synchronisation costs the schedule does not see); calibration fits it.
"""
from __future__ import annotations

from typing import NamedTuple

from rackplan.specs import HardwareSpec, Layout, ModelSpec
from rackplan.specs.model import DTYPE_FAMILY_8

from .batch import Step

COMM_SMS = 20  # VLLM_DBO_COMM_SMS default on CUDA (vllm/envs.py): SMs reserved for DeepEP high-throughput kernels
# ops whose GEMMs run through DeepGEMM when they compute in FP8 (module docstring), and the Dtypes field that
# says so: the block-FP8 linears (attention projections, dense FFN, shared expert: Dtypes.compute) and the
# routed experts (Dtypes.expert_compute_dtype); the router is an unquantised BF16 linear and is not one
DEEPGEMM_OPS = {"attn.proj": "compute", "dense_ffn": "compute", "shared_expert": "compute",
                "moe.experts": "expert_compute_dtype"}


class Stages(NamedTuple):
    """One micro-batch's device seconds on its slowest rank, by where they sit in a layer:
    `dense` the dense layers (no all-to-all), `attn` the MoE layers' attention side (before the
    dispatch), `ffn` their expert side, `dispatch` and `combine` the all-to-alls, `tail` once per
    step after the last layer (LM head, sampler, drafter); `dispatch_send` / `combine_send` the part
    of each all-to-all that its send kernel runs on the compute stream."""

    dense: float
    attn: float
    ffn: float
    dispatch: float
    combine: float
    tail: float
    dispatch_send: float = 0.0  # of `dispatch`, what its send kernel holds the compute stream for
    combine_send: float = 0.0  # of `combine`, the same
    attn_shared: float = 1.0  # of `attn`, the share that shares SMs with an overlapping transfer (not DeepGEMM)
    ffn_shared: float = 1.0  # of `ffn`, the same

    @property
    def total(self) -> float:
        return self.dense + self.attn + self.ffn + self.dispatch + self.combine + self.tail


def splits(layout: Layout, step: Step, queries_per_seq: float) -> bool:
    """Whether vLLM splits this step: DBO on, an all-to-all to overlap, and every DP rank at or
    above the threshold for its kind of step (decode-only, or with prompt tokens)."""
    if not layout.dbo or layout.ep_size <= 1:
        return False
    limit = layout.dbo_prefill_token_threshold if step.has_prefill else layout.dbo_decode_token_threshold
    for w in step.works:  # (a loop, not min() over a generator: per priced step)
        if w.dec_seqs * queries_per_seq + w.pre_tokens < limit:
            return False
    return True


def comm_sm_share(kernel: str, hw: HardwareSpec) -> float:
    """Share of the SMs an overlapping all-to-all takes from compute."""
    if kernel != "high_throughput" or hw.num_sms <= 0:
        return 0.0
    return min(COMM_SMS, hw.num_sms) / hw.num_sms


def deepgemm_ops(model: ModelSpec) -> frozenset[str]:
    """The ops of `model` whose GEMMs run through DeepGEMM: those of DEEPGEMM_OPS that compute in FP8."""
    dt = model.dtypes
    return frozenset(name for name, field in DEEPGEMM_OPS.items()
                     if DTYPE_FAMILY_8.get(getattr(dt, field)) == "fp8")


def deepgemm_sm_scale(kernel: str, hw: HardwareSpec) -> float:
    """Factor on a DeepGEMM op's seconds in a split step: num_sms / (num_sms - COMM_SMS) with the
    high-throughput kernels (the GEMMs run on the SMs the transfer does not hold, for the whole step;
    compute-bound prefill GEMMs take that much longer), 1 otherwise (LL kernels hold no SMs)."""
    if kernel != "high_throughput" or hw.num_sms <= COMM_SMS:
        return 1.0
    return hw.num_sms / (hw.num_sms - COMM_SMS)


def pipeline(a: Stages, z: Stages, moe_layers: int, sm_share: float) -> float:
    """Device seconds of the two micro-batches run as DBO schedules them (ideal schedule).

    Dense layers have nothing to overlap: both micro-batches run them back to back. Over the MoE
    layers each micro-batch's per-layer attention, dispatch, experts and combine are its totals
    over those layers / moe_layers; compute overlapped by the other micro-batch's all-to-all is
    stretched by `sm_share` of that all-to-all times the share of it that shares SMs with the transfer
    (`attn_shared`, `ffn_shared`).

    Per layer the compute stream runs, as vLLM enqueues it: attention a, send dispatch a, attention
    b, send dispatch b, experts a, send combine a, experts b, send combine b. Each send starts once
    the network's previous transfer has arrived (its receive hook precedes the send on the stream)
    and holds the stream for its `*_send` seconds; the transfer ends its full seconds after the send
    starts; a micro-batch's next compute waits for its own transfer."""
    n = max(moe_layers, 1)
    att = ((a.attn + sm_share * a.attn_shared * z.combine) / n, (z.attn + sm_share * z.attn_shared * a.combine) / n)
    ffn = ((a.ffn + sm_share * a.ffn_shared * z.dispatch) / n, (z.ffn + sm_share * z.ffn_shared * a.dispatch) / n)
    disp, comb = (a.dispatch / n, z.dispatch / n), (a.combine / n, z.combine / n)
    d_snd, c_snd = (a.dispatch_send / n, z.dispatch_send / n), (a.combine_send / n, z.combine_send / n)
    t0 = a.dense + z.dense
    c = m = ka = kz = t0  # compute stream free, network free, each micro-batch's last combine done
    prev, inc = t0, -1.0
    for layer in range(moe_layers):  # (x if x >= y else y: max(x, y) without a call, as it runs per layer)
        ea = (c if c >= ka else ka) + att[0]
        s = m if m >= ea else ea  # dispatch a sent: the stream after attention a and the network's last transfer
        c, da = s + d_snd[0], s + disp[0]
        ez = (c if c >= kz else kz) + att[1]
        s = da if da >= ez else ez
        c, dz = s + d_snd[1], s + disp[1]
        fa = (c if c >= da else da) + ffn[0]
        s = dz if dz >= fa else fa
        c, ka = s + c_snd[0], s + comb[0]
        fz = (c if c >= dz else dz) + ffn[1]
        s = ka if ka >= fz else fz
        c, kz = s + c_snd[1], s + comb[1]
        m = kz
        end = c if c >= kz else kz
        step_inc = end - prev
        if abs(step_inc - inc) <= 1e-12 * end:  # periodic from here on: extrapolate
            return end + (moe_layers - 1 - layer) * step_inc + a.tail + z.tail
        prev, inc = end, step_inc
    return max(c, kz) + a.tail + z.tail


def overlapped(a: Stages, z: Stages, moe_layers: int, sm_share: float, efficiency: float) -> float:
    """Device seconds of a DBO step: the micro-batches back to back, less `efficiency` of what the
    ideal schedule saves on that."""
    serial = a.total + z.total
    ideal = min(pipeline(a, z, moe_layers, sm_share), serial)
    return serial - efficiency * (serial - ideal)
