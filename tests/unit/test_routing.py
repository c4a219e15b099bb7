"""Routing load model: power-law popularity, per-layer permutations, multinomial draws, traces."""
import json
import re

import numpy as np
import pytest

from rackplan.sim.routing import layer_popularity, popularity, popularity_from_counts, read_expert_trace, sample_counts
from rackplan.specs import SpecError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("skew", [0.0, 0.3, 0.6, 1.0, 2.0])
def test_popularity_sums_to_one_is_sorted_and_capped(skew):
    p = popularity(256, skew, top_k=8)
    assert p.shape == (256,) and abs(p.sum() - 1.0) < 1e-12
    assert np.all(np.diff(p) <= 1e-15)
    assert p.max() <= 1 / 8 + 1e-12  # an expert is picked at most once per token


def test_uniform_at_zero_skew_and_hot_expert_ratio():
    np.testing.assert_allclose(popularity(64, 0.0), 1 / 64)
    p = popularity(256, 0.5, top_k=8)
    assert 8.0 < p[0] * 256 < 9.0  # ~ 256 / sum(i^-0.5)


def test_layer_popularity_is_a_seeded_permutation():
    a = layer_popularity(32, 0.6, 4, top_k=4, seed=7)
    b = layer_popularity(32, 0.6, 4, top_k=4, seed=7)
    np.testing.assert_array_equal(a, b)
    for row in a:
        np.testing.assert_allclose(np.sort(row)[::-1], popularity(32, 0.6, 4))
    assert not np.array_equal(a[0], a[1])


def test_sample_counts_conserve_tokens_and_match_the_mean():
    pop = layer_popularity(16, 0.5, 2, top_k=2, seed=0)
    c = sample_counts(pop, np.array([1, 100, 1000]), 2, 400, np.random.default_rng(0))
    assert c.shape == (3, 400, 2, 16)
    assert np.all(c.sum(-1) == np.array([2, 200, 2000])[:, None, None])
    mean = c[2].mean(0) / 2000
    np.testing.assert_allclose(mean, pop, atol=4 * np.sqrt(pop / 2000 / 400).max())


def test_read_expert_trace_jsonl_sums_ranks(tmp_path):
    path = tmp_path / "experts.jsonl"
    recs = [{"step": 0, "layer": 0, "rank": 0, "expert_counts": [1, 2, 0, 1]},
            {"step": 0, "layer": 0, "rank": 1, "expert_counts": [0, 2, 1, 1]},
            {"step": 0, "layer": 1, "rank": 0, "expert_counts": [4, 0, 0, 0]},
            {"step": 3, "layer": 1, "rank": 0, "expert_counts": [0, 0, 0, 4]}]
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    c = read_expert_trace(path)
    assert c.shape == (2, 2, 4)
    np.testing.assert_array_equal(c[0, 0], [1, 4, 1, 2])
    pop = popularity_from_counts(c)
    np.testing.assert_allclose(pop[1], [0.5, 0, 0, 0.5])
    np.save(tmp_path / "experts.npy", c)
    np.testing.assert_array_equal(read_expert_trace(tmp_path / "experts.npy"), c)


@pytest.mark.parametrize("line,field", [
    ('{"step": 0, "layer": 0, "expert_counts": [1, NaN]}', "expert_counts[1]"),
    ('{"step": 0, "layer": 0, "expert_counts": [1, -2]}', "expert_counts"),
    ('{"step": 0, "layer": -1, "expert_counts": [1, 2]}', "layer"),
    ('{"step": 0, "layer": 0, "expert_counts": [1, 2', "(line)"),
])
def test_bad_trace_lines(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(SpecError, match=re.escape(f"field '{field}'")):
        read_expert_trace(path)


def test_bad_skew_and_missing_trace(tmp_path):
    with pytest.raises(SpecError, match="skew"):
        popularity(8, -1.0)
    with pytest.raises(SpecError, match="file"):
        read_expert_trace(tmp_path / "missing.jsonl")
