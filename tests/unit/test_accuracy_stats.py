"""accuracy_stats: each source counts once, figures beyond 1.5x, phases, leave-one-source-out."""
from dataclasses import replace

import pytest

from rackplan.accuracy import cases as ac
from rackplan.accuracy import stats as st
from rackplan.specs import load_profile

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def cases():
    return {c.id: c for c in ac.load_cases()}


def _pairs(cases, spec):
    """spec: [(case id, source, ratio)] -> (case, ratio) with the source overridden."""
    return [(replace(cases[cid], source=src), r) for cid, src, r in spec]


def test_source_median_counts_each_source_once(cases):
    # source a: errors 10%, 10%, 10% (median 10%); source b: 50% -> over sources median(10%, 50%) = 30%,
    # where the figure median (10, 10, 10, 50) is 10%
    pairs = _pairs(cases, [("h100-decode-ep72", "a", 1.1), ("h100-prefill-ep32-isl1k", "a", 0.9),
                           ("h100-prefill-ep32-isl2k", "a", 1.1), ("llmd-b200-wideep-decode", "b", 1.5)])
    assert st.group(pairs).median_abs_error == pytest.approx(0.10)
    assert st.source_median(pairs) == pytest.approx(0.30)


def test_beyond_one_and_a_half_either_way(cases):
    pairs = _pairs(cases, [("h100-decode-ep72", "a", 1.51), ("h100-prefill-ep32-isl1k", "a", 1 / 1.49),
                           ("h100-prefill-ep32-isl2k", "a", 0.66)])
    assert st.group(pairs).beyond_1_5x == 2  # 1.51 and 0.66 (< 1/1.5); 1/1.49 is inside


@pytest.mark.parametrize("cid, phase", [("h100-decode-ep72", "decode"), ("h100-prefill-ep32-isl1k", "prefill"),
                                        ("r1-gb300-prefill-ep2", "prefill"), ("r1-gb300-mixed-ep2", "decode"),
                                        ("vllm-gb200-kernel-mla-prefill-t8192", "kernel"),
                                        ("v4flash-gb300-single-user-nospec-tpot", "single-user"),
                                        ("h100-tbo-decode-32", "decode")])
def test_phase_of_a_figure(cases, cid, phase):
    assert cases[cid].phase == phase


def test_batch_regime_of_decode_figures(cases):
    assert cases["h100-decode-ep72"].batch_per_rank_regime == 256
    assert cases["r1-gb300-mixed-ep2"].batch_per_rank_regime == 500  # concurrency 1000 over DP2
    assert cases["r1-gb300-prefill-ep2"].batch_per_rank_regime is None  # a prefill figure


def test_leave_one_source_out_drops_the_seen_source(cases):
    pairs = _pairs(cases, [("h100-decode-ep72", "a", 1.1), ("h100-prefill-ep32-isl1k", "seen", 3.0)])
    g, med = st.leave_one_source_out(pairs, {"seen"})
    assert (g.rows, g.median_abs_error, med) == (1, pytest.approx(0.1), pytest.approx(0.1))


def test_profiles_carrying_the_datasheet_host_constants_have_seen_mrv2():
    mrv2 = "https://vllm.ai/blog/2026-03-24-mrv2"
    assert set(st.profile_sources(load_profile("datasheet"))) == {mrv2}
    assert "host.api_per_token_s" in st.profile_sources(load_profile("gb300-nvl72-vllm"))[mrv2]
    assert st.profile_sources(load_profile("cpu-local")) == {}  # fitted on this machine, host constants 0
