"""Hand-derived checks of the cost-model physics (issue 14): dual-batch overlap, TP all-reduce and
MoE tensor parallelism, FP8 attention and activation dtypes, the elementwise ops (RMSNorm, RoPE,
quantisation, mHC, the sampler), eager kernel gaps, V4.1's Engram and DSpark drafter, weight offload, memory
fraction and pipeline stages. The arithmetic is in the comments; DeepEP's all-to-all copies are
in test_golden_costs.py."""
import dataclasses

import pytest

from rackplan.sim.cost import dbo
from rackplan.sim.cost.memory import kv_capacity_tokens, offloaded_bytes, weight_bytes_per_rank
from rackplan.sim.cost.step import CostContext, RankWork, Step, decode_step, prefill_step
from rackplan.specs import DTYPE_BYTES, Layout, SpecError, Speculation, load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit
PROF = load_profile("datasheet")
V3, V41, V4 = load_model("deepseek-v3"), load_model("deepseek-v4.1-flash"), load_model("deepseek-v4-flash")
H100, H200, GB300 = load_hardware("h100-sxm"), load_hardware("h200-sxm"), load_hardware("gb300-nvl72")


def ops_of(cost) -> dict:
    return {op.name: op for op in cost.ops}


def mem(nbytes: float, bw: float) -> float:
    """Datasheet streaming: bytes / (bw x 0.8 x bytes / (bytes + 1 MB)) + the 2 us kernel tail."""
    return (nbytes + 1e6) / (bw * 0.8) + 2e-6


# -- dual-batch overlap ---------------------------------------------------------------------------
def stages(n, attn, ffn, disp, comb) -> dbo.Stages:
    return dbo.Stages(0.0, attn * n, ffn * n, disp * n, comb * n, 0.0)


def test_dbo_pipeline_compute_bound_hides_the_all_to_all():
    # Per layer and micro-batch: attention 2, experts 2, dispatch 1, combine 1 (halves of a large
    # batch). Layer 1 on the compute stream: A_a 0-2, A_b 2-4, E_a 4-6 (dispatch a 2-3), E_b 6-8
    # (dispatch b 4-5); combines a 6-7, b 8-9: ends at 9. Layer 2 starts A_a at 8 (after E_b, combine
    # a done at 7) and ends at 17: the period is 8 = 2 x (A + E), the network is hidden.
    a = stages(58, 2.0, 2.0, 1.0, 1.0)
    assert dbo.pipeline(a, a, 58, 0.0) == pytest.approx(9 + 8 * 57)
    # the two halves back to back take 2 x 58 x 6 = 696; DBO realises 0.9 of the 231 saved
    assert dbo.overlapped(a, a, 58, 0.0, 0.9) == pytest.approx(696 - 0.9 * (696 - 465))


def test_dbo_pipeline_latency_bound_halves_are_slower_than_the_whole():
    # Small batch: each half costs what the whole batch does (weights read again, all-to-all latency
    # paid again): A 2, E 1, D 2, K 2 per layer, 7 for the unsplit layer. Layer 1 ends at 10 (A_a 0-2,
    # A_b 2-4, D_a 2-4, D_b 4-6, E_a 4-5, E_b 6-7, K_a 6-8, K_b 8-10); from then on the network is
    # the bottleneck: period 2 x (D + K) = 8 > 7, so DBO is slower than not splitting.
    a = stages(10, 2.0, 1.0, 2.0, 2.0)
    assert dbo.pipeline(a, a, 10, 0.0) == pytest.approx(10 + 8 * 9)
    assert dbo.pipeline(a, a, 10, 0.0) > 7 * 10


def test_dbo_comm_kernels_take_sms_from_overlapped_compute():
    # DeepEP high-throughput kernels hold VLLM_DBO_COMM_SMS = 20 of H100's 132 SMs; low-latency none
    assert dbo.comm_sm_share("high_throughput", H100) == pytest.approx(20 / 132)
    assert dbo.comm_sm_share("low_latency", H100) == 0.0
    # compute-bound pipeline above with share s: each micro-batch's attention is stretched by
    # s x the other's combine, its experts by s x the other's dispatch: period 2 x (2 + 2 + 2s)
    s = 20 / 132
    a = stages(58, 2.0, 2.0, 1.0, 1.0)
    assert dbo.pipeline(a, a, 58, s) == pytest.approx(9 + 4 * s + (8 + 4 * s) * 57)


def test_dbo_pipeline_deepgemm_capped_compute_shares_no_sms_with_the_transfer():
    # vLLM 0.11.0 (gpu_ubatch_wrapper.SMControlContextManager around the whole two-thread run) and SGLang's
    # prefill TBO run DeepGEMM on num_sms - 20 SMs for the whole split step: H200 / H100 132 SMs -> 112,
    # 132 / 112 = 1.178571 times as long; the low-latency kernels hold none, so nothing changes there
    assert dbo.deepgemm_sm_scale("high_throughput", H200) == pytest.approx(132 / 112)
    assert dbo.deepgemm_sm_scale("low_latency", H200) == 1.0
    # only the stage share that is not DeepGEMM is stretched by the overlapping transfer: the compute-
    # bound pipeline of test_dbo_comm_kernels_take_sms_from_overlapped_compute (A 2, E 2, D 1, K 1) with
    # half of each compute stage shared: stretch s x 0.5 x 1 per stage, period 2 x (2 + 2 + s), layer 1
    # ends at 9 + 2s (A_a 0-2, A_b 2-4+s/2 ... as there with s/2 in place of s)
    s = 20 / 132
    a = stages(58, 2.0, 2.0, 1.0, 1.0)._replace(attn_shared=0.5, ffn_shared=0.5)
    assert dbo.pipeline(a, a, 58, s) == pytest.approx(9 + 2 * s + (8 + 2 * s) * 57)


@pytest.mark.profile_data
def test_dbo_high_throughput_stages_run_deepgemm_on_the_sms_the_transfer_leaves():
    # DeepSeek-V3 (FP8 block GEMMs: attention projections, dense FFN, shared and routed experts all
    # DeepGEMM) prefill on H200 DEP16 with DBO, 2,048 prompt tokens a rank (1,024 a micro-batch). The
    # split step's stages are the unsplit ones with every DeepGEMM op's seconds x 132 / 112 (3 of the
    # 61 layers dense: attn.proj splits 3 / 61 to `dense`, 58 / 61 to `attn`), and the shares of the
    # attention and expert stages that still share SMs with the transfer are their non-DeepGEMM parts
    lay = Layout("prefill", dp=16, dbo=True, dbo_prefill_token_threshold=32)
    sm = CostContext(V3, H200, lay, PROF).step_model
    dev = sm.device(Step.uniform(16, RankWork(0.0, 0.0, ((1, 1024.0, 0.0),))))
    ops_ = dev.rank_ops
    experts = sum(g[1] for g in dev.moe)
    st = sm._stages(dev)
    # the stages before the cap, from the ops' stages (rackplan/specs/ops.py), by hand:
    proj, shared, dffn = ops_["attn.proj"][0], ops_["shared_expert"][0], ops_["dense_ffn"][0]
    r = 132 / 112 - 1
    by = {"attn": 0.0, "ffn": 0.0}
    for name, rec in ops_.items():
        if name in ("attn.proj", "norm", "rope", "quantize", "attn.core", "router", "mhc", "engram"):
            by["attn"] += rec[0]
        elif name in ("dense_ffn", "shared_expert"):
            by["ffn"] += rec[0]
    attn0 = by["attn"] * 58 / 61
    ffn0 = by["ffn"] - dffn + sum(g[1] + g[2] for g in dev.moe)
    assert st.attn == pytest.approx(attn0 + r * proj * 58 / 61)
    assert st.ffn == pytest.approx(ffn0 + r * (shared + experts))
    assert st.dense == pytest.approx(by["attn"] * 3 / 61 + dffn + r * (proj * 3 / 61 + dffn))
    assert st.attn_shared == pytest.approx((attn0 - proj * 58 / 61) / st.attn)
    assert st.ffn_shared == pytest.approx((ffn0 - shared - experts) / st.ffn)
    assert 0.0 < st.attn_shared < 1.0 and 0.0 < st.ffn_shared < 1.0
    # decode (low-latency kernels) keeps its stages as they were: nothing capped, everything shared
    dec = sm._stages(sm.device(Step.uniform(16, RankWork(64.0, 64 * 3000.0))))
    assert (dec.attn_shared, dec.ffn_shared) == (1.0, 1.0)


def test_dbo_pipeline_low_latency_send_kernels_hold_the_compute_stream():
    # vLLM 0.11 runs DeepEP's low-latency kernels on the compute stream with a receive hook: per layer
    # the stream holds attention a, send dispatch a, attention b, send dispatch b, experts a, send
    # combine a, experts b, send combine b; each send waits for the network's previous transfer (its
    # receive comes first on the stream). Per layer and micro-batch: A 2, E 2, D 1, K 1, of which the
    # send kernels hold the stream for 0.5 each (their NVLink copies). Layer 1: A_a 0-2, send D_a
    # 2-2.5 (arrives 3), A_b 2.5-4.5, send D_b 4.5-5 (arrives 5.5), E_a 5-7, send K_a 7-7.5 (arrives
    # 8), E_b 7.5-9.5, send K_b 9.5-10 (arrives 10.5): ends at 10.5. Layer 2: A_a 10-12, send D_a
    # 12-12.5, A_b 12.5-14.5, send D_b 14.5-15, E_a 15-17, send K_a 17-17.5, E_b 17.5-19.5, send K_b
    # 19.5-20, arrives 20.5: period 10 = 2 x (A + E) + 4 x 0.5, 2 more than the 8 of the hidden case.
    n = 58
    a = dbo.Stages(0.0, 2.0 * n, 2.0 * n, 1.0 * n, 1.0 * n, 0.0, 0.5 * n, 0.5 * n)
    assert dbo.pipeline(a, a, n, 0.0) == pytest.approx(10.5 + 10 * (n - 1))
    # with no send time the schedule is the one above (test_dbo_pipeline_compute_bound_hides_the_all_to_all)
    assert dbo.pipeline(a._replace(dispatch_send=0.0, combine_send=0.0), a, n, 0.0) < dbo.pipeline(a, a, n, 0.0)
    assert dbo.pipeline(stages(n, 2.0, 2.0, 1.0, 1.0), stages(n, 2.0, 2.0, 1.0, 1.0), n, 0.0) == \
        pytest.approx(9 + 8 * (n - 1))


@pytest.mark.profile_data
def test_dbo_low_latency_send_kernel_is_the_nvlink_part_h200_ep32():
    # DeepEP LL on H200 DEP32 (8 GPUs an NVLink domain): a token's 8 picks go to k (dom - 1) / ep =
    # 8 x 7 / 32 = 1.75 NVLink peers and 8 x 24 / 32 = 6 RDMA peers. The send kernel copies the NVLink
    # messages itself (7,168 B FP8 + 224 B scales + 16 B header) and posts the RDMA ones: at 128
    # tokens the datasheet NVLink model gives 18 us + 128 x 1.75 x 7,408 B / (450 GB/s x 0.55); the
    # whole phase is the RDMA side's 30 us + 128 x 6 x 7,408 B / (50 GB/s x 0.85).
    from rackplan.sim.cost.alltoall import a2a_phase
    lay = Layout("decode", dp=32, dbo=True)
    disp = a2a_phase(V3, lay, H200, PROF, "dispatch", "low_latency")
    assert disp.send_kernel_seconds(128) == pytest.approx(18e-6 + 128 * 1.75 * 7408 / (450e9 * 0.55))
    assert disp.seconds(128) == pytest.approx(30e-6 + 128 * 6 * 7408 / (50e9 * 0.85))
    comb = a2a_phase(V3, lay, H200, PROF, "combine", "low_latency")  # BF16 back, no header
    assert comb.send_kernel_seconds(128) == pytest.approx(30e-6 + 128 * 1.75 * 14336 / (450e9 * 0.55))
    # the step's DBO stages carry those shares of the priced all-to-all: 128 tokens a micro-batch, the
    # busiest rank sending 128 x its routing imbalance (step.StepModel._price_moe)
    sm = CostContext(V3, H200, lay, PROF).step_model
    st = sm._stages(sm.device(Step.uniform(32, RankWork(128.0, 128 * 3000.0))))
    sent = 128 * sm.imbalance_at(128 * 32.0, sm.n_moe)
    assert st.dispatch_send / st.dispatch == pytest.approx(disp.send_kernel_seconds(sent) / disp.seconds(sent))
    assert st.combine_send / st.combine == pytest.approx(comb.send_kernel_seconds(sent) / comb.seconds(sent))
    # inside one NVLink domain (GB300 DEP64) the send kernel is the whole low-latency phase
    nvl = a2a_phase(V3, Layout("decode", dp=64, dbo=True), GB300, PROF, "dispatch", "low_latency")
    assert nvl.send_kernel_seconds(64) == pytest.approx(nvl.seconds(64))


@pytest.mark.parametrize("batch,split", [(31, False), (32, True)])
def test_dbo_splits_only_at_vllms_decode_threshold(batch, split):
    # vLLM 0.33: --dbo-decode-token-threshold 32 (tokens per rank, every DP rank); MTP 1 doubles them
    lay = Layout("decode", dp=8, dbo=True)
    assert dbo.splits(lay, Step.uniform(8, RankWork(batch, batch * 1000.0)), 1.0) is split
    assert dbo.splits(lay, Step.uniform(8, RankWork(16, 16000.0)), 2.0)  # 16 sequences x 2 tokens
    uneven = Step((RankWork(256, 256000.0), RankWork(8, 8000.0)), (7, 1))  # one rank below: no split
    assert not dbo.splits(lay, uneven, 1.0)


def test_dbo_at_32_and_256_tokens_per_device_h100_ep72():
    # SGLang 96 x H100 decode EP72: TBO -27% at 32 tokens per device and +25.5% at 256. The physics
    # must give the sign: at 32 the halves cost nearly the whole, at 256 the all-to-all is hidden.
    def ratio(b):
        on, off = (decode_step(CostContext(V3, H100, Layout("decode", dp=72, dbo=d, max_batch_per_rank=256),
                                           PROF), b, b * 2000.0).seconds for d in (True, False))
        return off / on
    assert ratio(32) < 0.95
    assert ratio(256) > 1.1


# -- tensor parallelism -----------------------------------------------------------------------------
@pytest.mark.profile_data
def test_tp4_allreduce_bytes_and_seconds_per_layer():
    # V4.1 TP4 (dp 1), one sequence with 5 draft tokens: 6 tokens x 5120 x BF16 = 61,440 B per
    # all-reduce; a ring moves 2 x 3/4 of it = 92,160 B per GPU; datasheet all-reduce efficiency
    # 0.7 x 61,440 / (61,440 + 1 MB) of the 900 GB/s NVLink; twice per layer (attention, FFN).
    lay = Layout("both", dp=1, tp=4, speculation=Speculation(5, 3.5))
    cost = ops_of(decode_step(CostContext(V41, GB300, lay, PROF), 1, 9000.0))
    tensor = 6 * 5120 * 2
    eff = 0.7 * tensor / (tensor + 1e6)
    per_layer = 2 * 3 / 4 * tensor / (900e9 * eff) + 2e-6
    for name in ("attn.allreduce", "ffn.allreduce"):
        assert cost[name].seconds == pytest.approx(per_layer * 40)
    assert "moe.dispatch" not in cost  # every TP rank holds the tokens: experts need no all-to-all


def test_moe_tensor_parallel_shards_every_expert():
    # V3 TP8 without expert parallelism (vLLM -tp 8, no --enable-expert-parallel): a rank holds all
    # 256 experts at 1/8 of their width. One token picks 8 experts: a rank reads 8 x 1/8 of an expert
    # per layer (EP8 would read the 1 of its 32 the token hits, on average: 32 x (1 - (31/32)^... ) ).
    ep_bytes = 3 * 7168 * 2048 * DTYPE_BYTES["fp8_block"]
    tp = Layout("decode", dp=1, tp=8, expert_parallel=False)
    assert tp.ep_size == 1 and tp.moe_tp == 8 and tp.tag == "TP8"
    held = weight_bytes_per_rank(V3, tp)["routed_experts"]
    assert held == pytest.approx(256 * ep_bytes * 58 / 8)
    cost = ops_of(decode_step(CostContext(V3, H200, tp, PROF), 1, 2000.0))
    hit = 256 * (1 - (1 - 8 / 256) ** 1)  # = 8 experts hit by one token
    act = 8 * (2 * 7168 + 3 * 2048 / 8) * 2  # 8 token-expert pairs in and out, BF16
    assert cost["moe.experts"].bytes == pytest.approx((hit * ep_bytes / 8 + act) * 58)
    assert "moe.dispatch" not in cost and cost["ffn.allreduce"].seconds > 0
    with pytest.raises(SpecError, match="expert_parallel"):
        Layout("decode", dp=2, tp=4, expert_parallel=False)


def test_ep_below_the_stage_shards_experts_the_rest_of_the_way():
    # TP4 with ep = 2 (executor/topology.py's expert TP): 4 GPUs / EP 2 = each expert split 2 ways by
    # its width; a rank holds 256 / 2 experts at half width = 64 expert-equivalents per MoE layer.
    ep_bytes = 3 * 7168 * 2048 * DTYPE_BYTES["fp8_block"]
    lay = Layout("decode", dp=1, tp=4, ep=2)
    assert lay.ep_size == 2 and lay.moe_tp == 2
    assert Layout("decode", dp=1, tp=4).moe_tp == 1 and Layout("decode", dp=8).moe_tp == 1
    assert weight_bytes_per_rank(V3, lay)["routed_experts"] == pytest.approx(128 * ep_bytes * 58 / 2)


# -- dtypes -------------------------------------------------------------------------------------------
@pytest.mark.profile_data
def test_fp8_attention_runs_at_the_fp8_peak():
    # V3 prefill of one 4,096-token prompt on H200 is compute bound: FP8 attention math (FlashInfer /
    # TRT-LLM FP8 MLA, FP8 KV cache) halves attn.core against the BF16 peak (1,979 vs 989 TFLOP/s).
    fp8 = dataclasses.replace(V3, dtypes=dataclasses.replace(V3.dtypes, attention="fp8"))
    lay = Layout("prefill", dp=1, tp=8)
    bf = ops_of(prefill_step(CostContext(V3, H200, lay, PROF), [4096]))["attn.core"]
    f8 = ops_of(prefill_step(CostContext(fp8, H200, lay, PROF), [4096]))["attn.core"]
    assert f8.flops == bf.flops
    assert (f8.seconds - 61 * 2e-6) == pytest.approx((bf.seconds - 61 * 2e-6) * 989 / 1979)
    with pytest.raises(SpecError, match="attention"):  # FP8 attention reads an FP8 cache
        dataclasses.replace(V3.dtypes, kv_cache="bf16", attention="fp8")


def test_activation_dtype_sets_gemm_activation_traffic():
    # attn.proj bytes at m tokens: weights + m (k + n) x activation bytes per GEMM, over 61 layers;
    # FP32 activations add m (k + n) x 2 B per GEMM against BF16.
    f32 = dataclasses.replace(V3, dtypes=dataclasses.replace(V3.dtypes, activations="fp32"))
    lay, m = Layout("decode", dp=8), 64.0
    proj = [(k, n) for _, k, n in V3.attention.projections(7168)]
    b16 = ops_of(decode_step(CostContext(V3, H200, lay, PROF), m, m * 2000))["attn.proj"].bytes
    b32 = ops_of(decode_step(CostContext(f32, H200, lay, PROF), m, m * 2000))["attn.proj"].bytes
    assert b32 - b16 == pytest.approx(61 * sum(m * (k + n) * 2.0 for k, n in proj))


# -- elementwise ops and kernel gaps ------------------------------------------------------------------------
def test_norm_rope_quantize_bytes_v3_decode():
    # 64 tokens per rank, BF16 activations, per layer:
    # RMSNorm: 2 fused add+norms over 7168 (read x and residual, write both) + q_a (1536) and kv_a
    #   (512) latent norms (read + write): 64 x 2 x (8 x 7168 + 2 x 2048) B
    # RoPE: read + write the 64 rope dims of 128 query heads and one shared key: 2 x 64 x 2 x 64 x 129 B
    # Quantise (FP8, one fp32 scale per row): layer input 7168, q_b 1536, kv_b 512, o 16384 on every
    #   layer; the dense FFN's 7168 + 18432 on 3, the shared expert's 7168 + 2048 on 58.
    lay, t = Layout("decode", dp=8), 64.0
    cost = ops_of(decode_step(CostContext(V3, H200, lay, PROF), t, t * 2000))
    assert cost["norm"].bytes == pytest.approx(61 * t * 2 * (8 * 7168 + 2 * 2048))
    assert cost["rope"].bytes == pytest.approx(61 * 2 * t * 2 * 64 * 129)

    def q(k):
        return t * k * (2 + 1) + t * 4
    want = 61 * sum(q(k) for k in (7168, 1536, 512, 16384)) + 3 * (q(7168) + q(18432)) + 58 * (q(7168) + q(2048))
    assert cost["quantize"].bytes == pytest.approx(want)


@pytest.mark.profile_data
def test_sampler_reads_fp32_logits_of_every_sampled_row_v3_decode():
    # top-k / top-p sampling over V3's 129,280-token vocabulary in FP32: softmax read + write and the
    # top-k / top-p reads, 4 passes (FlashInfer sampling) = 4 x 129,280 x 4 B per row; 64 sequences per
    # rank sample 64 rows, with MTP 1 they verify 2 each (128 rows). Two kernels: one streaming price
    # + one more 2 us kernel tail.
    for spec, rows in ((None, 64), (Speculation(1, 1.8), 128)):
        lay = Layout("decode", dp=8) if spec is None else Layout("decode", dp=8, speculation=spec)
        op = ops_of(decode_step(CostContext(V3, H200, lay, PROF), 64, 64 * 2000.0))["sample"]
        nbytes = 4 * rows * 129_280 * 4.0
        assert op.bytes == pytest.approx(nbytes)
        assert op.seconds == pytest.approx(mem(nbytes, 4.8e12) + 2e-6)


def test_mhc_bytes_v4_flash():
    # V4's 4 residual streams: before attention and before the FFN, pre reads 4 streams and writes
    # one (5 x T x 4096 x 2 B), post reads the output and 4 streams and writes 4 (9 x ...):
    # 2 x 14 x 4096 x 2 = 229,376 B per token per layer, 43 layers.
    cost = ops_of(prefill_step(CostContext(V4, GB300, Layout("prefill", dp=4), PROF), [4096]))
    assert cost["mhc"].bytes == pytest.approx(4096 * 229_376 * 43)


def test_eager_steps_pay_a_device_gap_per_kernel():
    # prompt steps run without CUDA graphs (FULL_DECODE_ONLY): 2 us x 24 kernels x 61 layers idle
    lay = Layout("prefill", dp=8)
    cost = ops_of(prefill_step(CostContext(V3, H200, lay, PROF), [4096]))
    assert cost["kernel.gaps"].seconds == pytest.approx(2e-6 * 24 * 61)
    graphs = ops_of(decode_step(CostContext(V3, H200, Layout("decode", dp=8), PROF), 8, 8000.0))
    assert "kernel.gaps" not in graphs


# -- V4.1: Engram and the DSpark drafter ------------------------------------------------------------------
@pytest.mark.profile_data
def test_engram_rows_on_its_two_layers():
    # V4.1 DEP64 decode, 128 tokens per rank: one 256-B row per token at each of the 2 Engram layers
    # (not the 40 MoE layers); the tables are split over 64 ranks, so 63/64 of the rows come over
    # NVLink (datasheet low-latency NVLink: 18 us + bytes / (900 GB/s x 0.55)), at once with the
    # local HBM gather of the rest.
    lay = Layout("decode", dp=64, max_batch_per_rank=128)
    op = ops_of(decode_step(CostContext(V41, GB300, lay, PROF), 128, 128 * 9000.0))["engram"]
    row = 128 * 256.0
    remote = row * 63 / 64
    per_layer = max(mem(row - remote, 8e12), 18e-6 + remote / (900e9 * 0.55))
    assert op.bytes == pytest.approx(2 * row)
    assert op.seconds == pytest.approx(2 * per_layer)


def test_dspark_drafter_reads_its_rank_share_of_3_active_experts():
    # V4.1 DEP64, 128 sequences per rank proposing 5-token blocks: 640 draft rows per rank, 40,960 in
    # the EP group. Each of the 3 stages has 128 experts of 35.39M parameters split over 64 ranks: 2
    # per rank, both hit (1 - (1 - 3/128)^40960 = 1). A stage reads its dense part (0.27B active -
    # 3 x 35.39M = 0.164B) and those 2 experts, MXFP8 (1 + 1/32 B per parameter): 3 x 0.242 GB, not
    # 14B of weights per pass.
    lay = Layout("decode", dp=64, max_batch_per_rank=128, speculation=Speculation(5, 3.5))
    op = ops_of(decode_step(CostContext(V41, GB300, lay, PROF), 128, 128 * 9000.0))["draft"]
    wb = 1 + 1 / 32
    weights = 3 * ((0.27e9 - 3 * 35.39e6) + 2 * 35.39e6) * wb
    pairs = 40960 * 3 / 64  # token-expert pairs on a rank per stage
    activations = 3 * (2 * 640 * 5120 * 2 + 3 * pairs * 5120 * 2)
    assert op.bytes == pytest.approx(weights + activations)
    assert op.bytes < 1e9  # the old pricing read 3 x 14.4 GB


def test_dspark_drafter_at_one_sequence_reads_only_the_experts_its_rows_pick():
    # The single-user TP4 layout, one sequence proposing a 5-token block: 5 draft rows, each picking 3 of a
    # stage's 128 experts, so an expert is hit with 1 - (1 - 3/128)^5 = 0.1119 and a rank holding 128 / ep
    # of them reads 0.1119 x 128 / ep of them (3.58 at EP 4), not all: the hit chance, not only the pairs.
    lay = Layout("both", dp=1, tp=4, speculation=Speculation(5, 3.5))
    op = ops_of(decode_step(CostContext(V41, GB300, lay, PROF), 1, 9000.0))["draft"]
    wb, ep, tp, rows = 1 + 1 / 32, lay.ep_size, lay.tp, 5
    hit = 1 - (1 - 3 / 128) ** rows
    distinct = max(128 / ep * hit, 1.0)
    pairs = rows * 3 / ep
    stage = ((0.27e9 - 3 * 35.39e6) / tp * wb + 2 * rows * 5120 * 2
             + distinct * 35.39e6 * wb / lay.moe_tp + 3 * pairs * 5120 * 2)
    assert hit == pytest.approx(0.1119, abs=1e-4)
    assert op.bytes == pytest.approx(3 * stage)


# -- memory: offload, memory fraction, pipeline stages ---------------------------------------------------
@pytest.mark.profile_data
def test_offloaded_weights_leave_hbm_and_stream_back():
    # V4.1 DEP2 prefill on GB300 offloading 60 GB per GPU: 60 GB less in HBM; every forward streams
    # it from host memory at 256 GB/s per GPU (Grace LPDDR5X shared by 2 GPUs), prefetched behind the
    # compute, so a step takes max(compute, 60e9 / (256e9 x 0.8 x 60e9 / (60e9 + 1 MB))).
    base = Layout("prefill", dp=2, max_tokens_per_step=16384)
    off = dataclasses.replace(base, offload_gb=60.0)
    assert offloaded_bytes(V41, off) == 60e9
    cap_gain = kv_capacity_tokens(V41, GB300, off) - kv_capacity_tokens(V41, GB300, base)
    assert cap_gain == pytest.approx(60e9 / V41.kv_bytes_per_token)
    stream = (60e9 + 1e6) / (256e9 * 0.8)
    cost = prefill_step(CostContext(V41, GB300, off, PROF), [2048])
    # a short prompt: the stream is the step, + DEP2's DP collective that waits for it (sim/cost/host.py)
    assert cost.seconds == pytest.approx(stream + cost.host.serial_s) and cost.host.serial_s == pytest.approx(50e-6)
    assert ops_of(cost)["weights.offload"].seconds > 0
    with pytest.raises(SpecError, match="offload_gb"):
        from rackplan.sim.cost.memory import check_fits
        check_fits(V3, load_hardware("cpu-local"), dataclasses.replace(Layout("decode", dp=1), offload_gb=1.0), "x")


def test_gpu_memory_utilization_sets_the_kv_budget():
    # vLLM --gpu-memory-utilization 0.9: KV = 0.9 x 141 GB - weights - a full step's activations
    # (8192 tokens x 7168 x 32 B), in 35,136-B tokens
    lay = Layout("decode", dp=8, gpu_memory_utilization=0.9)
    weights = sum(weight_bytes_per_rank(V3, lay).values())
    want = (0.9 * 141e9 - weights - 8192 * 7168 * 32.0) / 35_136
    assert kv_capacity_tokens(V3, H200, lay) == pytest.approx(want)


def test_kv_budget_without_a_fraction_is_the_engines_default():
    # No gpu_memory_utilization: vLLM's own default, 0.9 of HBM (vllm/config/cache.py), less weights and a full
    # step's activations. V3 DEP8 on H200 (141 GB): KV = 0.9 x 141e9 - weights - 8192 x 7168 x 32 B
    # (= 1.879e9), in 35,136-B tokens; deploy emits the same 0.9. SGLang layouts keep all but 5% (its own
    # default is not modelled yet): 0.95 x 141e9 - weights - the same activations.
    from rackplan.deploy.engine import priced_memory_utilization
    from rackplan.sim.cost.memory import memory_fraction

    lay = Layout("decode", dp=8)
    weights = sum(weight_bytes_per_rank(V3, lay).values())
    assert memory_fraction(lay) == 0.9 and priced_memory_utilization(lay) == 0.9
    assert kv_capacity_tokens(V3, H200, lay) == pytest.approx((0.9 * 141e9 - weights - 1.879e9) / 35_136, rel=1e-4)
    sgl = Layout("decode", dp=8, engine="sglang")
    assert memory_fraction(sgl) == 0.95
    assert kv_capacity_tokens(V3, H200, sgl) == pytest.approx((0.95 * 141e9 - weights - 1.879e9) / 35_136, rel=1e-4)
    assert memory_fraction(Layout("decode", dp=8, engine="sglang", gpu_memory_utilization=0.8)) == 0.8


@pytest.mark.profile_data
def test_pipeline_stages_hold_half_the_layers_and_pass_activations():
    # TP8 x PP2 on 16 H200: a GPU holds 61/2 layers' weights and KV, and one of embedding / head; a
    # step runs each stage's micro-batch of half the sequences and hands activations on once
    # (32 tokens x 7168 x 2 B over NVLink).
    pp = Layout("decode", dp=1, tp=8, pp=2)
    one = Layout("decode", dp=1, tp=8)
    assert pp.gpus == 16 and pp.tag == "TP8-EP8-PP2"
    w1, w2 = weight_bytes_per_rank(V3, one), weight_bytes_per_rank(V3, pp)
    assert w2["attention"] == pytest.approx(w1["attention"] / 2)
    assert w2["embed_head"] == pytest.approx(w1["embed_head"] / 2)
    cost = ops_of(decode_step(CostContext(V3, H200, pp, PROF), 64, 64 * 2000.0))
    send = 32 * 7168 * 2
    assert cost["pp.send"].seconds == pytest.approx((send + 1e6) / (450e9 * 0.8) + 2e-6)
    half = ops_of(decode_step(CostContext(V3, H200, one, PROF), 32, 32 * 2000.0))
    assert cost["attn.core"].seconds == pytest.approx(half["attn.core"].seconds)


# -- per-step routing imbalance (issue 14, item 4) ---------------------------------------------------------
def test_step_imbalance_is_drawn_around_the_mean_with_its_spread():
    # V3 DEP8 decode, skew 0.6 without EPLB: a step's max/mean expert load averages 58 layers, so it
    # varies by the per-layer spread / sqrt(58); the simulator's pricer draws it per step (seeded):
    # over many draws of one state the mean is the planner's price and the spread the priced slope.
    import numpy as np

    from rackplan.sim.pricer import StepPricer

    cx = CostContext(V3, H200, Layout("decode", dp=8, max_batch_per_rank=256), PROF, 0.6)
    sm = cx.step_model
    t = 8 * 256
    f0 = sm.imbalance(t)
    assert sm.imbalance_at(t, 58, 1.0) == pytest.approx(f0 + sm.imbalance.spread(t) / 58 ** 0.5)
    step = Step.uniform(8, RankWork(256, 256 * 700.0))
    p0, slope = sm.period_spread(step)
    assert p0 == sm.period(step) and slope == pytest.approx(sm.period(step, 1.0) - p0) and slope > 0
    pr = StepPricer(cx, np.random.default_rng(0))
    ones = np.ones(8)
    draws = np.array([pr.decode(ones * 256, ones * 256 * 700.0) for _ in range(4000)])
    exact = StepPricer(cx).decode(ones * 256, ones * 256 * 700.0)  # no generator: the mean, every call
    assert draws.mean() == pytest.approx(exact, rel=2e-4)
    assert draws.std() == pytest.approx(slope, rel=0.06)  # a standard normal (truncated at 3 sigma)
    again = StepPricer(cx, np.random.default_rng(0))
    assert [again.decode(ones * 256, ones * 256 * 700.0) for _ in range(5)] == list(draws[:5])
