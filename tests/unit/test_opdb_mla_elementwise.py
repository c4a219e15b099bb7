"""The MLA module tables time the latent RMSNorms and RoPE inside the module (vLLM's DeepseekV2MLAAttention:
q_a_layernorm, kv_a_layernorm, rotary_emb), which a step prices again as `norm` and `rope`: the importer takes
them out of the module rows as the step prices them (opdb_ops.module_elementwise_seconds), so attn.core is the
attention kernel's, not the kernel plus three bandwidth-bound kernels priced twice."""
from __future__ import annotations

import numpy as np
import pytest

from rackplan.calibration import opdb_ops
from rackplan.specs import Profile, load_hardware

pytestmark = pytest.mark.unit
H200 = load_hardware("h200-sxm")  # hbm_bw 4.8e12 B/s


def test_latent_norms_and_rope_priced_by_hand():
    """DeepSeek-V3 (q_lora 1536, kv_lora 512, rope dim 64, 128 heads, BF16 activations), streaming at a flat half
    of HBM bandwidth and 2 us a kernel: one token with all 128 heads on the rank, and 64 tokens at TP 4."""
    model, _ = opdb_ops._mla(2.0)
    prof = Profile(name="flat", mem_eff=0.5, mem_bytes_half=0.0, op_fixed_s=2e-6)
    bw = 4.8e12 * 0.5
    # norms: read + write [t, 1536 + 512] in 2 B, two kernels; RoPE: read + write 64 rotary dims of the
    # rank's query heads and the one shared rope key, one kernel
    one = 2 * 1 * 2 * 2048 / bw + 2 * 1 * 2 * 64 * (128 + 1) / bw + 3 * 2e-6
    tp4 = 2 * 64 * 2 * 2048 / bw + 2 * 64 * 2 * 64 * (32 + 1) / bw + 3 * 2e-6
    got = opdb_ops.module_elementwise_seconds(model, np.array([1.0, 64.0]), np.array([1.0, 4.0]), H200, prof)
    assert got == pytest.approx([one, tp4], rel=1e-12)
    assert one == pytest.approx(6e-6 + 41216 / 2.4e12)  # 6.017 us: at batch 1 the three kernels' floors


def test_module_rows_carry_them_beside_the_projections(tmp_path):
    """A decode module row is priced as projections + latent norms + RoPE + the core: a table timed as exactly
    that sum under the profile's core curve is what the rows predict, to rounding."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from rackplan.calibration import opdb
    from rackplan.specs import load_profile
    base = load_profile("h200-sxm-vllm")
    model, comp = opdb_ops._mla(2.0)
    b = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256] * 4, float)
    s = np.repeat([512.0, 2048.0, 8192.0, 16384.0], 9)
    proj = opdb_ops.projection_seconds(model, b, np.ones(len(b)), "bf16", H200, base)
    extra = opdb_ops.module_elementwise_seconds(model, b, np.ones(len(b)), H200, base)
    shapes = opdb_ops._core_shapes(model, comp, "decode", b, s, 1.0, H200)
    core = opdb_ops._core_predict("mla", "decode", shapes, H200)(base, np.arange(len(b)))
    n = len(b)
    cols = {"kernel_source": ["FLASHMLA"] * n, "model": ["deepseek-ai/DeepSeek-V3"] * n,
            "mla_dtype": ["bfloat16"] * n, "kv_cache_dtype": ["bfloat16"] * n, "gemm_type": ["bfloat16"] * n,
            "num_heads": [128] * n, "batch_size": b.astype(int), "step": s.astype(int),
            "latency": (proj + extra + core) * 1e3}
    path = tmp_path / "mla_generation_module_perf.parquet"
    pq.write_table(pa.table(cols), path)
    rows = opdb_ops._mla_rows(opdb.Table("mla_generation_module_perf", "mla", "0.24.0", path), "decode", H200, base)
    assert rows.seconds == pytest.approx(proj + extra + core, rel=1e-9)
    assert rows.predict(base, np.arange(n)) == pytest.approx(proj + extra + core, rel=1e-9)
