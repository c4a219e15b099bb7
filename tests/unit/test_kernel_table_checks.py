"""benchmarks' checks of the cost model against the op database's kernel tables: moe_tp_check.py (routed experts
under TP), dsa_module_check.py (DeepSeek-V3.2's decode attention layer) and tp_prefill_check.py (the MLA prefill
attention layer by heads per rank), with hand-derived bounds."""
from pathlib import Path

import pytest
from bench_scripts import script

pytestmark = pytest.mark.unit

HBM_BW = 8.0e12  # gb300-nvl72 hbm_bw, B/s


def test_moe_tp_check_prices_one_layer_in_seconds():
    moe_tp_check = script("investigations/moe_tp_check.py")

    # DeepSeek-V3 block-FP8 experts at TP4, 512 tokens x top-8 of 256: every expert is hit (256 (1 - (1 - 8/256)^512)
    # = 256.0), so the rank reads all 256 shards of 3 x 7168 x (2048 / 4) FP8 weights = 2,818,572,288 B, >= 352.3 us
    # at 8 TB/s. `_price_moe` returns (layers, experts s, route s, ...): taking its first two items priced the
    # layer count, one second too many (the script printed ~1000 ms per layer).
    floor = 256 * 3 * 7168 * 512 / HBM_BW
    got = moe_tp_check.priced("gb300-nvl72", "fp8_block", 4, 512)
    assert floor <= got < 2 * floor


def test_moe_tp_check_reads_another_models_shape():
    moe_tp_check = script("investigations/moe_tp_check.py")

    # Qwen3-235B-A22B BF16 experts at TP4, 512 tokens x top-8 of 128: 128 (1 - (1 - 8/128)^512) = 128.0 experts hit,
    # 128 shards of 3 x 4096 x (1536 / 4) BF16 weights = 1,207,959,552 B, >= 151.0 us at 8 TB/s
    assert moe_tp_check.shape("qwen3-235b-a22b") == {"hidden_size": 4096, "inter_size": 1536, "topk": 8,
                                                      "num_experts": 128, "moe_ep_size": 1}
    floor = 128 * 3 * 4096 * 384 * 2 / HBM_BW
    got = moe_tp_check.priced("gb300-nvl72", "bfloat16", 4, 512, "qwen3-235b-a22b")
    assert floor <= got < 2 * floor


def _v32_tp4_fp8():
    dsa_module_check = script("investigations/dsa_module_check.py")

    from rackplan.accuracy.cases import load_cases, resolve
    from rackplan.sim.cost.step import CostContext
    from rackplan.specs import load_profile

    case = {c.id: c for c in load_cases()}["v32-gb300-mixed-tp4-fp8"]
    sc = resolve(case)
    lay = sc.plan.aggregated[0]
    return dsa_module_check, CostContext(sc.model, sc.hw, lay, load_profile(sc.hw.default_profile))


def test_dsa_module_is_at_least_its_kv_read():
    mod, cx = _v32_tp4_fp8()
    # FP8 checkpoint, BF16 cache (the case): 512 sequences at 4,096 tokens read their 2,048 top-k latents of 1,152 B
    # and all 4,096 indexer keys of 132 B per layer: 512 x (2,048 x 1,152 + 4,096 x 132) = 1,484,783,616 B, 185.6 us
    floor = 512 * (2048 * 1152 + 4096 * 132) / HBM_BW
    got = mod.module_seconds(cx, 512, 4096)
    assert floor <= got < 4 * floor


def test_dsa_module_takes_the_latent_norms_not_the_moe_or_all_reduce():
    mod, cx = _v32_tp4_fp8()
    from rackplan.sim.cost.step import decode_step

    d = decode_step(cx, 64, 64 * 2048).breakdown()
    # V3.2 runs 2 + 2 norm kernels a layer (the layer's two RMSNorms, q_a and kv_a's); the module holds the latter 2
    want = (d["attn.proj"] + d["attn.core"] + d["rope"] + d["norm"] / 2) / 61
    assert mod.module_seconds(cx, 64, 2048) == pytest.approx(want)
    assert want < (d["attn.proj"] + d["attn.core"] + d["rope"] + d["norm"] + d["moe.experts"]) / 61


def _table(root: Path, rows: list[dict]) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = root / "gb300" / "sparse_attention" / "vllm" / "0.24.0"
    folder.mkdir(parents=True)
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    pq.write_table(pa.table(cols), folder / "dsa_generation_module_perf.parquet")


def _row(model: str, latency: float) -> dict:
    return {"framework": "VLLM", "kernel_source": "FLASHMLA_SPARSE", "model": model, "mla_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16", "gemm_type": "fp8_block", "num_heads": 32, "batch_size": 8, "isl": 1,
            "tp_size": 1, "step": 2048, "latency": latency}


def test_dsa_module_check_compares_the_case_with_its_table_row(tmp_path, capsys):
    _table(tmp_path, [_row("deepseek-ai/DeepSeek-V3.2", 0.5), _row("zai-org/GLM-5", 9.0)])
    mod, cx = _v32_tp4_fp8()
    argv = ["--op-database-root", str(tmp_path), "--case", "v32-gb300-mixed-tp4-fp8", "--batch", "8", "--context",
            "2048"]
    assert mod.main(argv) == 0
    out = capsys.readouterr().out
    got = mod.module_seconds(cx, 8, 2048)
    assert "32 heads, KV bfloat16, projections fp8_block; table kernel FLASHMLA_SPARSE" in out
    assert f"b8 0.500/{got * 1e3:.3f} ({got / 0.5e-3:.2f})" in out  # the V3.2 row, not GLM-5's 9 ms


def test_dsa_module_check_refuses_what_it_cannot_compare(tmp_path, capsys):
    _table(tmp_path, [_row("deepseek-ai/DeepSeek-V3.2", 0.5)])
    mod = script("investigations/dsa_module_check.py")

    root = ["--op-database-root", str(tmp_path)]
    assert mod.main(root + ["--case", "no-such-case"]) == 2
    assert mod.main(root + ["--case", "r1-h200-prefill-tp8"]) == 2  # DeepSeek-V3: MLA without the indexer
    assert mod.main(root + ["--system", "h200_sxm"]) == 2  # the cases' profile was fitted on gb300
    assert mod.main(root + ["--version", "0.14.0"]) == 2  # no such table version
    err = capsys.readouterr().err
    assert "no-such-case" in err and "DeepSeek-V3.2" in err and "gb300" in err and "0.24.0" in err


def _r1_tp2():
    mod = script("investigations/tp_prefill_check.py")
    cx, prompts = mod._context(mod.TP_CASE)
    return mod, cx, prompts


def test_tp_prefill_check_fills_the_step_budget():
    _, cx, prompts = _r1_tp2()
    # the post's --max-num-batched-tokens 32768 over 2,048-token prompts: 16 prompts a TP2 step
    assert (cx.layout.tp, cx.layout.dp, prompts) == (2, 1, 16)


def test_tp_prefill_module_is_at_least_its_flops_at_peak():
    mod, cx, _ = _r1_tp2()
    # 128 heads (TP1), 4 x 2,048 tokens. Projections per token: 2 x (7168 x (1536 + 576) q_a / kv_a + 1536 x 128 x 192
    # q_b + 512 x 128 x 256 kv_b + 128 x 128 x 7168 o) = 374,210,560 FLOP; x 8,192 = 3.0655e12. Causal attention:
    # 4 x 2048^2 / 2 pairs x 128 heads x 2 x (192 + 128) = 6.872e11. At the BF16 peak (2,500 TFLOP/s): 1.501 ms.
    floor = (8192 * 374_210_560 + 4 * 2048 ** 2 / 2 * 128 * 2 * 320) / 2.5e15
    got, core = mod.module_seconds(cx, 128, 4)
    assert floor <= got < 2 * floor
    assert 0 < core < got


def test_tp_prefill_module_takes_the_latent_norms_share_of_norm_bytes():
    mod, cx, _ = _r1_tp2()
    import dataclasses

    from rackplan.sim.cost.step import CostContext, prefill_step

    lay = dataclasses.replace(cx.layout, tp=2, dp=1)
    b = prefill_step(CostContext(cx.model, cx.hw, lay, cx.prof), [2048] * 16).breakdown()
    # norm_bytes per token: 8 x 7168 (two fused add + norms) + 2 x (1536 + 512) (q_a, kv_a norms) = 61,440 x act;
    # the latent norms' share 4,096 / 61,440 = 1 / 15
    want = (b["attn.proj"] + b["attn.core"] + b["rope"] + b["norm"] / 15) / 61
    assert mod.module_seconds(cx, 64, 16)[0] == pytest.approx(want)


def test_tp_prefill_check_reads_the_deepseek_bf16_rows(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    mod, cx, _ = _r1_tp2()
    folder = tmp_path / "gb300" / "mla" / "vllm" / "0.27.0"
    folder.mkdir(parents=True)

    def row(heads, batch, ms, kernel="FLASH_ATTN", gemm="bfloat16"):
        return {"kernel_source": kernel, "model": "deepseek-ai/DeepSeek-V3", "kv_cache_dtype": "bfloat16",
                "gemm_type": gemm, "num_heads": heads, "batch_size": batch, "isl": 2048, "latency": ms}

    rows = [row(64, 16, 5.0), row(128, 4, 2.0), row(64, 16, 99.0, kernel="TRTLLM_RAGGED"),
            row(128, 4, 0.1, gemm="nvfp4")]
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), folder / "mla_context_module_perf.parquet")
    assert mod.module_rows("gb300", str(tmp_path)) == {"0.27.0": {(64, 16): 5.0e-3, (128, 4): 2.0e-3}}
    assert mod.main(["--module", "--op-database-root", str(tmp_path), "--system", "gb300"]) == 0
    out = capsys.readouterr().out
    tp, ep = mod.module_seconds(cx, 64, 16)[0], mod.module_seconds(cx, 128, 4)[0]
    assert f"vLLM 0.27.0 2.50  priced {tp / ep:.2f}" in out  # 5.0 / 2.0, the decoy rows left out
    assert mod.main(["--module", "--op-database-root", str(tmp_path), "--system", "h200_sxm"]) == 2
