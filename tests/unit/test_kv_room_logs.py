"""benchmarks/investigations/kv_room_logs.py: the engine's MXFP4 expert layout and the log decomposition, by hand."""
from __future__ import annotations

import pytest
from bench_scripts import script

from rackplan.specs import load_model


def test_mxfp4_expert_bytes_pad_the_dims_as_vllm_allocates_them():
    mod = script("investigations/kv_room_logs.py")
    model = load_model("gpt-oss-120b")  # hidden 2880, expert intermediate 2880, 128 experts, 36 MoE layers
    # Marlin: H' = round_up(2880, 256) = 3072, I' = round_up(2880, 128) = 2944.
    # per expert: weights 3 x 2944 x 3072 = 27,131,904, at 0.5 B + 1/32 B (E8M0 scale per 32) = 14,413,824 B;
    # BF16 biases (2 x 2944 + 3072) x 2 B = 17,920 B; 14,431,744 B x 128 experts x 36 layers = 66,501,476,352 B
    assert mod.mxfp4_expert_bytes(model, "marlin") == pytest.approx(66_501_476_352, rel=1e-12)
    # Triton keeps H = 2880 and rounds I to 64 (2880 = 45 x 64): the checkpoint's shapes,
    # 3 x 2880 x 2880 = 24,883,200 x 0.53125 = 13,219,200 B + (2 x 2880 + 2880) x 2 = 17,280 B per expert,
    # x 4,608 = 60,993,699,840 B
    assert mod.mxfp4_expert_bytes(model, "triton") == pytest.approx(60_993_699_840, rel=1e-12)
    assert mod.checkpoint_expert_bytes(model) == pytest.approx(60_993_699_840, rel=1e-12)
    # TP2 on Marlin: I = 1440 -> round_up(1440, 128) = 1536; 3 x 1536 x 3072 = 14,155,776 x 0.53125 = 7,520,256 B
    # + (2 x 1536 + 3072) x 2 = 12,288 B = 7,532,544 B x 4,608 = 34,709,962,752 B
    assert mod.mxfp4_expert_bytes(model, "marlin", tp=2) == pytest.approx(34_709_962_752, rel=1e-12)


def test_triton_keeps_a_second_copy_of_the_scales_and_float32_biases():
    mod = script("investigations/kv_room_logs.py")
    model = load_model("gpt-oss-120b")
    # Triton: the allocated layout (60,993,699,840 B, above) + the kept unswizzled scales 3 x 2880 x 2880 / 32 =
    # 777,600 B per expert + the biases' float32 copies, 2 B more per bias: (2 x 2880 + 2880) x 2 = 17,280 B;
    # (777,600 + 17,280) x 4,608 = 3,662,807,040 B; total 64,656,506,880 B = 60.22 GiB of experts
    assert mod.mxfp4_loaded_bytes(model, "triton") == pytest.approx(64_656_506_880, rel=1e-12)
    # Marlin repacks in place of the originals: nothing kept twice
    assert mod.mxfp4_loaded_bytes(model, "marlin") == pytest.approx(66_501_476_352, rel=1e-12)


def test_log_rows_split_the_gap_into_total_weights_and_working_memory():
    mod = script("investigations/kv_room_logs.py")
    rows = {r["source"].rsplit("/", 1)[-1]: r for r in (mod.row(g) for g in mod.LOGS)}
    r = rows["23278"]
    gib = 2.0**30
    # the model: 0.9 x 80e9 B / 2^30 = 67.055 GiB - weights (65.2e9 B = 60.72 GiB) - 8192 x 2880 x 32 B (0.703 GiB)
    assert r["model_total_gib"] == pytest.approx(80e9 / gib)
    assert r["model_activations_gib"] == pytest.approx(8192 * 2880 * 32 / gib)
    assert r["model_available_gib"] == pytest.approx(0.9 * 80e9 / gib - r["model_weights_gib"] - 8192 * 2880 * 32 / gib)
    # the log: 0.9 x 79.11 - 65.9651 - (-2.14) = 71.199 - 65.9651 + 2.14 = 7.3739 GiB beyond the weights
    assert r["logged_working_gib"] == pytest.approx(7.3739, abs=1e-4)
    # Marlin's padded experts replace the checkpoint's: + (66,501,476,352 - 60,993,699,840) B = + 5.130 GiB
    # (65.85 GiB against the logged 65.97)
    assert r["engine_layout_weights_gib"] - r["model_weights_gib"] == pytest.approx(
        (66_501_476_352 - 60_993_699_840) / gib)
    assert "logged_working_gib" not in rows["33155"]  # no "Available KV cache memory" in that log


def test_sampler_peak_is_24_bytes_per_request_and_vocab_entry():
    mod = script("investigations/kv_room_logs.py")
    model = load_model("gpt-oss-120b")  # vocab 201,088
    # bf16 logits 2 + float32 copy 4 + sorted 4 + int64 sort indices 8 + top-k bool mask 1 + top-p softmax 4 +
    # top-p bool mask 1 = 24 B; min(1024 seqs, 8192 tokens) = 1024 requests:
    # 24 x 1024 x 201,088 = 4,941,938,688 B (4.60 GiB)
    assert mod.sampler_peak_bytes(model, 1024, 8192) == 4_941_938_688
    # the token budget caps the dummy requests: 512 tokens -> 512 requests, half of it
    assert mod.sampler_peak_bytes(model, 1024, 512) == 4_941_938_688 // 2
    rows = {r["source"].rsplit("/", 1)[-1]: r for r in (mod.row(g) for g in mod.LOGS)}
    r = rows["23278"]
    # the three readings: 0.9 x 79.11 GiB - Marlin's 65.85 GiB - max(0.70, 4.60) GiB
    assert r["readings_available_gib"] == pytest.approx(
        0.9 * 79.11 - r["engine_layout_weights_gib"] - 4_941_938_688 / 2.0**30)
    assert r["model_available_gib"] > r["readings_available_gib"] > r["logged_available_gib"]
