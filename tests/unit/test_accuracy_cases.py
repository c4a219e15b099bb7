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
