"""KV cache bytes a TP rank stores: GQA heads split over TP (replicated beyond num_kv_heads), MLA replicated."""
import pytest

from rackplan.sim.cost.memory import kv_bytes_per_token_per_rank, kv_capacity_tokens, reserve_bytes, resident_bytes
from rackplan.specs import load_hardware, load_model
from rackplan.specs.layout import Layout

pytestmark = pytest.mark.unit


def test_glm_tp8_rank_stores_one_of_eight_kv_heads():
    m = load_model("glm-4.5")  # 92 layers x 8 KV heads x 128 dim x (K, V) x 2 bytes = 188,416 B per token
    assert m.kv_bytes_per_token == 92 * 8 * 128 * 2 * 2
    tp8 = Layout(role="both", dp=1, tp=8, expert_parallel=False)
    assert kv_bytes_per_token_per_rank(m, tp8) == 92 * 1 * 128 * 2 * 2  # one head per rank
    hw = load_hardware("h200-sxm")
    free = hw.hbm_bytes - resident_bytes(m, tp8) - reserve_bytes(m, hw, tp8)
    assert kv_capacity_tokens(m, hw, tp8) == pytest.approx(free / (92 * 128 * 2 * 2))


def test_gqa_heads_replicate_beyond_num_kv_heads():
    m = load_model("qwen3-235b-a22b")  # 4 KV heads: TP8 replicates each head on two ranks
    assert m.attention.num_kv_heads == 4
    tp4 = Layout(role="both", dp=1, tp=4, expert_parallel=False)
    tp8 = Layout(role="both", dp=1, tp=8, expert_parallel=False)
    assert kv_bytes_per_token_per_rank(m, tp4) == m.kv_bytes_per_token / 4
    assert kv_bytes_per_token_per_rank(m, tp8) == m.kv_bytes_per_token / 4


def test_mla_latent_replicated_on_every_tp_rank():
    m = load_model("deepseek-v3")  # one 576-entry latent per token per layer, on every rank
    tp8 = Layout(role="both", dp=1, tp=8, expert_parallel=False)
    assert kv_bytes_per_token_per_rank(m, tp8) == m.kv_bytes_per_token
    pp2 = Layout(role="both", dp=1, tp=4, pp=2, expert_parallel=False)
    assert kv_bytes_per_token_per_rank(m, pp2) == m.kv_bytes_per_token / 2
