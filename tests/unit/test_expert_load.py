"""Expert load from data (sim/expert_load.py): count-file formats, the published model, and the
imbalance a recorded load gives, derived by hand."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rackplan.sim import expert_load as el
from rackplan.sim.cost.imbalance import imbalance_curve, random_routing_factor
from rackplan.specs import SpecError, Workload, load_model, load_workload

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[1] / "data"


def test_executor_counts_give_their_popularity():
    load = el.from_counts(DATA / "expert_counts_rank0.jsonl")
    assert load.popularity.shape == (3, 16)
    assert np.allclose(load.popularity[:, :8], 1 / 8) and not load.popularity[:, 8:].any()
    assert load.max_over_mean.tolist() == [2.0, 2.0, 2.0]  # 1/8 of the picks against the mean 1/16
    assert load == el.from_counts(DATA / "expert_counts_rank0.jsonl")  # keyed by content
    assert load != el.from_counts(DATA / "expert_counts_uniform.jsonl")


def test_vllm_load_window_folds_physical_experts_to_logical(tmp_path):
    """A redundant physical expert's counts add to its logical expert's: 4 logical experts, 6 physical
    slots, physical 4 and 5 replicas of logical 0 and 1."""
    rec = {"expert_load_window": [[[1, 2, 3, 4, 5, 6]], [[1, 0, 0, 0, 1, 2]]],  # [W=2, L=1, P=6]
           "physical_to_logical_map": [[0, 1, 2, 3, 0, 1]]}
    path = tmp_path / "eplb.json"
    path.write_text(json.dumps(rec))
    counts = el.read_counts(path)
    assert counts.tolist() == [[[6, 8, 3, 4]], [[2, 2, 0, 0]]]
    assert el.from_counts(path).popularity.tolist() == [[8 / 25, 10 / 25, 3 / 25, 4 / 25]]


@pytest.mark.parametrize("rec,field", [({"expert_load": [[1]]}, "expert_load_window"),
                                       ({"expert_load_window": [[1, 2]], "physical_to_logical_map": [[0]]},
                                        "physical_to_logical_map")])
def test_bad_vllm_record_names_the_field(tmp_path, rec, field):
    path = tmp_path / "eplb.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(SpecError) as exc:
        el.read_counts(path)
    assert exc.value.field == field


def test_published_load_matches_its_source_statistic():
    """The lognormal shares hit the published max/mean exactly (1.04 for DeepSeek's loss-free router,
    arXiv 2408.15664) in every layer, each layer ranked differently."""
    load = el.published(load_model("deepseek-v3"))
    assert np.allclose(load.max_over_mean, 1.04, rtol=1e-9)
    assert np.allclose(load.popularity.sum(-1), 1.0)
    assert (load.popularity.argmax(-1) != load.popularity[0].argmax()).any()
    assert el.published(load_model("qwen3-30b-a3b")).max_over_mean[0] == pytest.approx(1.52)
    assert el.published(load_model("tiny-moe")) == 0.0  # no published figure: uniform, as routing_skew 0


def test_recorded_load_prices_its_imbalance():
    """All picks on EP rank 0's experts: that rank serves every pick, max/mean exactly 2 with no
    spread; uniform counts: the uniform multinomial's factor (closed form within sampling noise)."""
    skewed = imbalance_curve(4, 16, 2, el.from_counts(DATA / "expert_counts_rank0.jsonl"))
    assert skewed(64) == pytest.approx(2.0) and skewed.spread(64) == pytest.approx(0.0)
    flat = imbalance_curve(4, 16, 2, el.from_counts(DATA / "expert_counts_uniform.jsonl"))
    assert flat(64) == pytest.approx(random_routing_factor(64, 4, 2), rel=0.03)


def test_workload_field_and_old_yaml_meaning():
    wl = load_workload("tiny-chat")
    assert wl.expert_load is None and el.routing_load(wl, load_model("tiny-moe")) == 0.0  # old meaning kept
    with pytest.raises(SpecError):
        Workload(name="x", arrival=wl.arrival, isl=wl.isl, osl=wl.osl, routing_skew=1.2, expert_load="published")
    moved = el.with_expert_load(Workload(name="x", arrival=wl.arrival, isl=wl.isl, osl=wl.osl, routing_skew=1.2),
                                str(DATA / "expert_counts_rank0.jsonl"))
    assert moved.routing_skew == 0 and el.routing_load(moved, load_model("tiny-moe")).key.startswith("counts:")
    with pytest.raises(SpecError):
        el.with_expert_load(wl, str(DATA / "missing.jsonl"))
