"""The specs shipped from published config.json files: each equals the one rebuilt from its config
(so the two cannot drift), and its parameter counts match the published totals and actives.

A published count follows its publisher's convention, so each side of the comparison is an interval
with derived ends, and the published figure must fall within it widened by 1%:
- total: without .. with the MTP layer(s) (DeepSeek-V3's 671B leaves its MTP out, V4-Pro's 1.6T
  counts it);
- active: the decoder layers' parameters a token reads (attention, dense FFN, shared + top-k routed
  experts, routers) .. those plus the embedding and the head (OpenAI counts the head only, Qwen both,
  GLM neither).
"""
import dataclasses
from pathlib import Path

import pytest
from bench_scripts import script

from rackplan.specs import load_model
from rackplan.specs.hf_config import load_config_spec, param_ranges

ROOT = Path(__file__).resolve().parents[2]
HF = script("hf_models.py")  # the published figures, printed by benchmarks/hf_models.py
DATA, SHIPPED = HF.DATA, HF.SHIPPED

pytestmark = pytest.mark.unit

IDS = [s[0] for s in SHIPPED]


def totals(m) -> tuple[float, float]:
    return param_ranges(m)["total"]


def actives(m) -> tuple[float, float]:
    return param_ranges(m)["active"]


@pytest.mark.parametrize("name,repo,total,active,where", SHIPPED, ids=IDS)
def test_shipped_spec_is_its_config_rebuilt(name, repo, total, active, where):
    shipped, built = load_model(name), load_config_spec(DATA / repo / "config.json")
    assert dataclasses.replace(built, name=name, source=shipped.source) == shipped
    assert shipped.source == repo.replace("--", "/", 1) + " config.json"


@pytest.mark.parametrize("name,repo,total,active,where", SHIPPED, ids=IDS)
def test_parameter_counts_match_the_published_figures(name, repo, total, active, where):
    m = load_model(name)
    lo, hi = totals(m)
    if name == "kimi-k2":
        # the card's "1T" is one significant figure, and the K2 report's "1.04T" lies 1.3% above the
        # config's arithmetic (384 x 3 x 7168 x 2048 x 60 routed = 1,014.7B of 1,026.4B; no MTP layer):
        # checked to the card's precision and against the report, unexplained, in test_kimi_k2_total
        assert round(lo / 1e12) == 1
    else:
        assert 0.99 * lo <= total <= 1.01 * hi, (where, lo, hi)
    lo, hi = actives(m)
    assert 0.99 * lo <= active <= 1.01 * hi, (where, lo, hi)


def test_hand_derived_qwen3_30b_counts():
    """Qwen3-30B-A3B by hand: attention q 2048x4096 + kv 2048x(2x4x128) + o 4096x2048 = 18,874,368 per
    layer; experts 3 x 2048 x 768 = 4,718,592; router 2048 x 128; embedding + head 2 x 151,936 x 2048."""
    m = load_model("qwen3-30b-a3b")
    per_layer = 18_874_368 + 128 * 4_718_592 + 2048 * 128
    assert sum(m.param_counts().values()) == 48 * per_layer + 2 * 151_936 * 2048 == 30_531_911_680
    assert actives(m)[1] == 48 * (18_874_368 + 8 * 4_718_592 + 2048 * 128) + 2 * 151_936 * 2048


@pytest.mark.xfail(strict=True, reason="the 1.04T quoted from the K2 report: 1.3% above config.json")
def test_kimi_k2_total_against_the_report():
    assert abs(totals(load_model("kimi-k2"))[0] / 1.04e12 - 1) <= 0.01
