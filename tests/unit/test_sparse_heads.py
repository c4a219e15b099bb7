"""FlashMLA sparse-kernel head padding (sim/cost/attention.py kernel_heads), derived by hand.

V3.2 has 128 query heads. vLLM runs its DSA on FlashMLA's sparse kernels: the BF16 prefill kernel
takes a multiple of 128 heads per rank on Blackwell (64 on Hopper), the FP8 decode kernel 64 or 128
(vllm/v1/attention/backends/mla/flashmla_sparse.py), so a TP4 rank's 32 heads run as 128 / 64.
"""
import pytest

from rackplan.sim.cost import attention as attn
from rackplan.specs import load_hardware, load_model, load_profile

pytestmark = pytest.mark.unit

V32, V3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
GB300, H200 = load_hardware("gb300-nvl72"), load_hardware("h200-sxm")


@pytest.mark.parametrize("tp, hw, prefill, decode", [
    (1, GB300, 128, 128), (2, GB300, 128, 64), (4, GB300, 128, 64), (8, GB300, 128, 64),
    (4, H200, 64, 64), (1, H200, 128, 128),
])
def test_v32_heads_are_padded_to_kernel_tiles(tp, hw, prefill, decode):
    comp = V32.attention.kv[0]
    assert attn.kernel_heads(V32, comp, tp, "prefill", hw) == prefill
    assert attn.kernel_heads(V32, comp, tp, "decode", hw) == decode


def test_unpadded_components_keep_their_heads():
    assert attn.kernel_heads(V3, V3.attention.kv[0], 4, "prefill", GB300) == 32


def test_decode_flops_at_tp4_count_64_heads():
    # 8 sequences at context 4,096: top-2,048 entries x (576 + 512) widths x 64 padded heads,
    # plus the indexer's 64 heads x 128 dims over all 4,096 keys
    comp, prof = V32.attention.kv[0], load_profile("datasheet")
    _, flops, _ = attn.decode_component(V32, comp, 8.0, 8.0 * 4096, 1.0, 4, 1, GB300, prof)
    assert flops == pytest.approx(2 * 8 * 64 * 2048 * 1088 + 2 * 8 * 64 * 128 * 4096)


def test_prefill_flops_at_tp4_count_128_heads():
    # one 2,048-token prompt from position 0: 2,048 queries at mean position 1,024 attend to 1,024
    # entries each (causal, under top-2,048); the indexer scores the same pairs
    comp, prof = V32.attention.kv[0], load_profile("datasheet")
    _, flops, _ = attn.prefill_component(V32, comp, [(1, 2048.0, 0.0)], 4, 1, GB300, prof)
    pairs = 2048 * 1024
    assert flops == pytest.approx(2 * 128 * pairs * 1088 + 2 * 64 * 128 * pairs)


def test_full_topk_scan_prices_every_block():
    # vLLM v0.14.1's FlashMLA sparse prefill (no topk_length) runs all 2,048 top-k slots of every
    # query: the same prompt costs 2,048 entries per query instead of 1,024 (the indexer is unchanged)
    import dataclasses

    comp = dataclasses.replace(V32.attention.kv[0], scans_full_topk=True)
    prof = load_profile("datasheet")
    _, flops, nbytes = attn.prefill_component(V32, comp, [(1, 2048.0, 0.0)], 4, 1, GB300, prof)
    _, _, nbytes_valid = attn.prefill_component(V32, V32.attention.kv[0], [(1, 2048.0, 0.0)], 4, 1, GB300, prof)
    assert flops == pytest.approx(2 * 128 * 2048 * 2048 * 1088 + 2 * 64 * 128 * 2048 * 1024)
    assert nbytes == nbytes_valid  # the gathers of invalid slots are skipped


def test_v32_indexer_projections_are_replicated():
    # DeepSeek-V3.2 Indexer: wq_b 1536 -> 64 x 128, wk 7168 -> 128, weights_proj 7168 -> 64, each
    # ReplicatedLinear in vLLM: a TP2 rank holds all of them (13,959,168 weights per layer)
    rank = {name: (k, n) for name, k, n in V32.attention.rank_projections(V32.hidden_size, 2)}
    assert (rank["idx_q"], rank["idx_k"], rank["idx_w"]) == ((1536, 8192), (7168, 128), (7168, 64))
    extra = V32.attention.projection_params(7168) - V3.attention.projection_params(7168)
    assert extra == 1536 * 8192 + 7168 * 128 + 7168 * 64 == 13_959_168
    assert not any(name.startswith("idx_") for name, _, _ in V3.attention.projections(7168))


@pytest.mark.parametrize("tp, hw, decode", [(1, GB300, 128), (2, GB300, 128), (4, GB300, 128), (4, H200, 64),
                                            (2, H200, 64)])
def test_bf16_cache_decodes_on_the_prefill_kernel(tp, hw, decode):
    # with a BF16 cache vLLM sends decode tokens through the BF16 sparse prefill kernel too, so
    # decode pads to the prefill tile: TP4 on Blackwell computes its 32 heads as 128, not 64
    import dataclasses

    bf16 = dataclasses.replace(V32, dtypes=dataclasses.replace(V32.dtypes, kv_cache="bf16"))
    assert attn.kernel_heads(bf16, bf16.attention.kv[0], tp, "decode", hw) == decode


def test_bf16_cache_decode_flops_at_tp4_count_128_heads():
    # the FP8-cache decode case above with a BF16 cache: 128 padded heads instead of 64 over the
    # same top-2,048 entries x (576 + 512); the indexer (its own FP8 keys) is unchanged
    import dataclasses

    bf16 = dataclasses.replace(V32, dtypes=dataclasses.replace(V32.dtypes, kv_cache="bf16"))
    comp, prof = bf16.attention.kv[0], load_profile("datasheet")
    _, flops, _ = attn.decode_component(bf16, comp, 8.0, 8.0 * 4096, 1.0, 4, 1, GB300, prof)
    assert flops == pytest.approx(2 * 8 * 128 * 2048 * 1088 + 2 * 8 * 64 * 128 * 4096)
