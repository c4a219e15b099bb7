"""MLA prefill fitted on the attention kernel alone where a per-kernel table times it (calibration/opdb_ops.py
mla_kernel_rows, opdb_import.PER_KERNEL_SOURCE), not on the vLLM module table less its projections, derived by
hand."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyarrow")

from rackplan.calibration import opdb, opdb_ops  # noqa: E402
from rackplan.specs import Curve, Profile, load_hardware  # noqa: E402

pytestmark = pytest.mark.unit
GB200 = load_hardware("gb200-nvl72")


def _tables(system: str, framework: str = "vllm") -> dict:
    try:
        return opdb.locate(opdb.data_root(None), system, framework, names=opdb.KERNEL_TABLES)
    except Exception:  # the opdb extra (aiconfigurator-core) not installed
        pytest.skip("aiconfigurator-core tables not installed")


def test_mla_kernel_rows_price_the_core_alone():
    tables = _tables("gb200", "sglang")
    t = tables["context_mla_perf"]
    rows = opdb_ops.mla_kernel_rows(t, GB200, "trtllm_mla")
    c = opdb.read(t)
    sel = ((c["kernel_source"] == "trtllm_mla") & (c["mla_dtype"] == "bfloat16") & (c["kv_cache_dtype"] == "bfloat16")
           & (c["step"] == 0))
    assert rows.key == "attn.prefill.mla.bf16" and len(rows.seconds) == int(sel.sum())
    # the row of 4 sequences of 2,048 tokens, 128 heads: 4 x 2048 x 1024 causal pairs x 2 x 128 heads x (192 + 128)
    # = 6.872e11 FLOPs; under a flat curve of 0.5 it takes that at half the BF16 peak, plus the kernel's fixed time
    i = int(np.flatnonzero((c["batch_size"][sel] == 4) & (c["isl"][sel] == 2048) & (c["num_heads"][sel] == 128))[0])
    flat = Profile(name="flat", curves={"attn.prefill.mla.bf16": (Curve(eff_max=0.5),)})
    flops = 4 * 2048 * 1024 * 2 * 128 * (192 + 128)
    assert rows.predict(flat, np.array([i]))[0] == pytest.approx(flops / (GB200.flops_for("bf16") * 0.5)
                                                                 + flat.op_fixed_s, rel=1e-6)
    assert rows.seconds[i] == pytest.approx(0.6928e-3, rel=0.01)  # the table: 0.692778 ms

