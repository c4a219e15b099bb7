"""The accuracy benchmark's case files: every case loads, says what it needs, and resolves into specs."""

import pytest

from rackplan.accuracy import cases as ac
from rackplan.accuracy.report import Outcome, summarise
from rackplan.specs import DTYPE_BYTES, SpecError

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def cases():
    return ac.load_cases()


def test_every_case_states_its_source_metric_and_status(cases):
    assert len(cases) >= 40
    for c in cases:
        assert c.source.startswith("https://"), c.id
        assert c.metric.definition, c.id
        if c.expressible:
            assert c.runnable and not c.missing, c.id
        else:
            assert c.missing, c.id
        if c.mark == "derived":
            assert c.formula, c.id


def test_simulated_cases_say_why_their_request_count(cases):
    for c in cases:
        if c.method == "simulate" and c.runnable:
            assert c.num_requests and c.requests_note, c.id


def test_nvfp4_override_changes_only_the_dtypes(cases):
    case = next(c for c in cases if c.id == "r1-gb300-mixed-ep2")
    sc = ac.resolve(case)
    base = ac.load_model_variant("deepseek-v3", {}, "test")
    assert sc.model.dtypes.expert_weights == "nvfp4" and sc.model.dtypes.expert_compute == "fp4"
    assert sc.model.dtypes.attention_weights == "bf16"
    assert (sc.model.hidden_size, sc.model.moe, sc.model.attention) == (base.hidden_size, base.moe, base.attention)
    assert DTYPE_BYTES[sc.model.dtypes.expert_weights] == pytest.approx(0.5625)


def test_ratio_sides_resolve_to_their_overrides(cases):
    case = next(c for c in cases if c.id == "h100-tbo-prefill-16k-vs-8k")
    num, den = ac.resolve(case, case.ratio.numerator), ac.resolve(case, case.ratio.denominator)
    assert (num.instance.dbo, num.tokens_per_rank, num.instance.max_tokens_per_step) == (True, 16384, 16384)
    assert (den.instance.dbo, den.tokens_per_rank, den.instance.max_tokens_per_step) == (False, 8192, 8192)


def test_deep_merge_keeps_the_base():
    base = {"a": {"b": 1, "c": 2}, "d": [1]}
    assert ac.deep_merge(base, {"a": {"b": 5}, "d": [2]}) == {"a": {"b": 5, "c": 2}, "d": [2]}
    assert base == {"a": {"b": 1, "c": 2}, "d": [1]}


@pytest.mark.parametrize("text, field", [
    ("cases:\n  - {id: x, description: d, published: 1, unit: s, mark: text, expressible: false,"
     " metric: {quantity: step_s}}\n", "missing"),
    ("cases:\n  - {id: x, description: d, published: 1, unit: s, mark: chart, expressible: true,"
     " metric: {quantity: step_s}}\n", "method"),
    ("cases:\n  - {id: x, description: d, published: 1, unit: s, mark: derived, expressible: false,"
     " missing: m, metric: {quantity: step_s}}\n", "formula"),
    ("cases:\n  - {id: x, description: d, published: 1, unit: s, mark: text, expressible: false,"
     " missing: m, metric: {quantity: throughput}}\n", "metric.tokens"),
    ("cases:\n  - {id: x, description: d, published: 1, unit: s, mark: text, expressible: false,"
     " missing: m, metric: {quantity: step_s}, colour: red}\n", "colour"),
    ("source: s\nextra: 1\ncases: []\n", "extra"),
])
def test_bad_case_files_name_the_field(tmp_path, text, field):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(SpecError) as err:
        ac.load_cases(tmp_path)
    assert field in str(err.value)


def test_summary_counts_sign_by_direction_of_better(cases):
    by_id = {c.id: c for c in cases}
    thr, itl = by_id["h100-decode-ep72"], by_id["h100-decode-itl"]  # tok/s (higher better), seconds (lower)
    outs = {thr.id: Outcome(predicted=thr.published * 1.5), itl.id: Outcome(predicted=itl.published * 1.1)}
    s = summarise([thr, itl], outs)
    assert (s.rows, s.over_share, s.beyond_2x) == (2, 0.5, 0)  # the faster-than-published ITL is pessimistic
    assert s.median_abs_error == pytest.approx(0.3) and s.max_abs_error == pytest.approx(0.5)
    assert not s.median_met and s.factor_met and s.share_met


# The vLLM GB200 decode figures, read from the run's own logs (benchmarks/cases/vllm-gb200-dsr1.yaml): each is
# one DP engine's "Avg generation throughput" averaged over the log lines whose batch is full ("Running: N
# reqs", N = the run's --max-num-seqs). (case id, N, the run's figure)
GB200_DECODE_RUNS = [("vllm-gb200-decode-dep8", 1024, 10108.4), ("vllm-gb200-decode-dep8-2k1k", 1220, 11035.4),
                     ("vllm-gb200-decode-dep8-2k100", 1536, 11182.3), ("vllm-gb200-decode-dep8-1k1k", 1536, 12534.4)]


@pytest.mark.parametrize("cid, running, figure", GB200_DECODE_RUNS)
def test_gb200_decode_cases_price_the_logged_batch(cases, cid, running, figure):
    case = next(c for c in cases if c.id == cid)
    sc = ac.resolve(case)
    assert case.batch_per_rank == sc.instance.max_batch_per_rank == running
    assert case.published == pytest.approx(figure, abs=0.5)
    # the runs' attention kernel (fmhaSm100fKernel_QkvE4m3...): FP8 Q and FP8 KV cache
    assert (sc.model.dtypes.kv_cache, sc.model.dtypes.attention_compute_dtype) == ("fp8", "fp8")
    assert sc.instance.all2all == "allgather_reducescatter"  # the runs' --all2all-backend



def test_gb200_prefill_case_prices_the_logged_step(cases):
    # the prefill log's line is the figure: one engine at "Running: 32 reqs" of 2,000 tokens (26,214.3 tok/s)
    case = next(c for c in cases if c.id == "vllm-gb200-prefill-dep2")
    sc = ac.resolve(case)
    assert case.tokens_per_rank == 32 * sc.workload.isl.value <= sc.instance.max_tokens_per_step == 65536
    assert (sc.instance.all2all, sc.instance.cuda_graphs) == ("allgather_reducescatter", False)


# The SGLang GB200 runs' own settings (benchmarks/cases/sglang-gb200-part{1,2}.yaml): the decode batch is the
# recipe's --max-running-requests over its 48 DP ranks (= its --cuda-graph-bs and DeepEP dispatch-token cap),
# a prefill step's tokens per rank its --chunked-prefill-size over its --dp-size (= --max-prefill-tokens 16384),
# the instance sizes the post's ("4 ranks per instance for high-precision and 2 for low-precision").
# (case id, dp, sequences or tokens per rank, redundant experts, EP exchange)
SGLANG_GB200_RUNS = [("sglang-gb200-p1-decode", 48, 36864 // 48, 32, None),
                     ("sglang-gb200-p2-decode-fp8attn-nvfp4", 48, 67584 // 48, 32, None),
                     ("sglang-gb200-p2-decode-bf16attn-fp8", 48, 36864 // 48, 32, None),
                     ("sglang-gb200-p2-prefill-bf16attn-fp8", 4, 131072 // 8, 32, None),
                     ("sglang-gb200-p2-prefill-fp8attn-nvfp4", 2, 65536 // 4, 0, "allgather_reducescatter")]


@pytest.mark.parametrize("cid, dp, per_rank, redundant, all2all", SGLANG_GB200_RUNS)
def test_sglang_gb200_cases_price_the_recipe(cases, cid, dp, per_rank, redundant, all2all):
    case = next(c for c in cases if c.id == cid)
    lay = ac.resolve(case).instance
    assert (lay.dp, lay.eplb.redundant_experts, lay.all2all) == (dp, redundant, all2all)
    if case.method == "decode_step":
        assert case.batch_per_rank == lay.max_batch_per_rank == per_rank
    else:
        assert case.tokens_per_rank == lay.max_tokens_per_step == per_rank == 16384


def test_sglang_gb200_low_precision_prefill_offloads_half_its_moe_layers(cases):
    # --offload-group-size 2 --offload-num-in-group 1: one MoE layer in two. Per GPU at DEP2: 256 / 2 experts x 58
    # MoE layers x (gate, up, down: 3 x 7168 x 2048 parameters) x 0.5625 B (NVFP4 with its scales) = 183.9 GB; half.
    case = next(c for c in cases if c.id == "sglang-gb200-p2-prefill-fp8attn-nvfp4")
    by_hand = 128 * 58 * 3 * 7168 * 2048 * 0.5625 / 2 / 1e9
    assert by_hand == pytest.approx(91.96, abs=0.01)
    assert ac.resolve(case).instance.offload_gb == pytest.approx(by_hand, abs=0.5)


@pytest.mark.parametrize("cid, dispatch", [("sglang-gb200-p2-decode-fp8attn-nvfp4", "nvfp4"),
                                           ("sglang-gb200-p2-prefill-fp8attn-nvfp4", "bf16"),
                                           ("sglang-gb200-p2-decode-bf16attn-fp8", "fp8")])
def test_sglang_gb200_dispatch_dtypes(cases, cid, dispatch):
    # decode: SGLANG_CUTEDSL_MOE_NVFP4_DISPATCH=1 (NVFP4 in DeepEP); the 2-rank prefill gathers BF16 hidden states
    # (no SGLANG_MOE_NVFP4_DISPATCH); the high-precision runs keep DeepEP's FP8 dispatch
    case = next(c for c in cases if c.id == cid)
    assert ac.resolve(case).model.dtypes.dispatch == dispatch


def test_vllm_gb300_ep2_rows_run_the_engines_default_exchange(cases):
    # the post's EP2 switch is `-dp=2 --enable-expert-parallel` with no --all2all-backend: vLLM v0.14.1's default
    # ParallelConfig.all2all_backend, "allgather_reducescatter" (config/parallel.py:152), not DeepEP
    rows = [ac.resolve(c) for c in cases if c.id.startswith("r1-gb300") and "ep2" in c.id]
    assert len(rows) == 10
    for sc in rows:
        lay = sc.plan.aggregated[0]
        assert (lay.dp, lay.tp, lay.all2all) == (2, 1, "allgather_reducescatter")
    tp_rows = [ac.resolve(c) for c in cases if c.id.startswith("r1-gb300-tp2")]
    assert tp_rows and all(sc.plan.aggregated[0].all2all is None for sc in tp_rows)  # TP: no exchange at all
