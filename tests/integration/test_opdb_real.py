"""The importer on the real per-op tables of aiconfigurator-core (the `opdb` extra); skipped cleanly
when the package is not installed."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyarrow")
if __import__("importlib").util.find_spec("aiconfigurator_core") is None:
    pytest.skip("aiconfigurator-core not installed (pip install 'rackplan[opdb]')", allow_module_level=True)

from unit.test_profiles_measured import GB300_FP8_ROWS  # noqa: E402  (tests/ is on sys.path: rootdir)

from rackplan.calibration import opdb, opdb_ops  # noqa: E402
from rackplan.calibration.opdb_fit import fit_class, split  # noqa: E402
from rackplan.calibration.robust import mape  # noqa: E402
from rackplan.specs import load_hardware, load_profile  # noqa: E402

pytestmark = pytest.mark.integration
HW = load_hardware("gb300-nvl72")


@pytest.fixture(scope="module")
def tables():
    return opdb.locate(opdb.data_root(), "gb300", "vllm")


def test_hand_checked_gemm_rows_read_as_seconds(tables):
    """fp8 GEMM 16384 x 7168 x 2048 on GB300 is 0.2268 ms in the table: 2.12 PFLOP/s (42% of 5 PF)."""
    c = opdb.read(tables["gemm_perf"])
    for m, n, k, us in GB300_FP8_ROWS:
        sel = (c["gemm_dtype"] == "fp8") & (c["m"] == m) & (c["n"] == n) & (c["k"] == k)
        assert sel.sum() == 1 and c["seconds"][sel][0] == pytest.approx(us * 1e-6, rel=1e-3)
    assert 2 * 16384 * 7168 * 2048 / (226.78e-6) == pytest.approx(2.12e15, rel=0.01)


@pytest.mark.profile_data
def test_shipped_profile_matches_the_package_tables(tables):
    """The shipped gb300 profile's held-out error per GEMM class is what its rows give today, each class read
    from the framework's table its provenance names (gemm.fp8_block: SGLang's graph-timed DeepGEMM table,
    opdb_import.GRAPH_TIMED_SOURCE), and every GEMM class of the profile is checked."""
    prof = load_profile("gb300-nvl72-vllm")
    classes = prof.provenance["classes"]
    checked = set()
    for framework in sorted({c.get("framework", "vllm") for c in classes.values()}):
        table = tables if framework == "vllm" else opdb.locate(opdb.data_root(), "gb300", framework)
        for rows in opdb_ops.gemm_rows(table, HW):
            if rows.key not in prof.fit_error or classes[rows.key].get("framework", "vllm") != framework:
                continue
            _, held = split(len(rows.seconds))
            got = mape(rows.predict(prof, held), rows.seconds[held])
            assert got == pytest.approx(prof.fit_error[rows.key], abs=0.1), rows.key
            checked.add(rows.key)
    assert checked == {k for k in prof.fit_error if k.startswith("gemm.")}


@pytest.mark.profile_data
def test_refit_of_a_real_class_is_deterministic(tables):
    """allreduce.tp8 refitted from the real table gives the shipped profile's held-out error."""
    prof = load_profile("gb300-nvl72-vllm")
    rows = next(r for r in opdb_ops.comm_rows(tables, HW) if r.key == "allreduce.tp8")
    fit, _ = fit_class(rows, load_profile("datasheet"))
    assert fit.mape_held == pytest.approx(prof.fit_error["allreduce.tp8"], abs=0.05)
    assert np.isfinite(fit.mape_fit) and fit.rows_held > 0


@pytest.mark.profile_data
def test_shipped_mla_decode_class_matches_the_module_rows_of_today(tables, monkeypatch):
    """The shipped gb300 attn.decode.mla.bf16 (refitted with the module's latent norms and RoPE taken out, as a step
    prices them: opdb_ops.module_elementwise_seconds) gives its held-out error on the module rows the importer
    builds today; rows that leave them in the core (as before the refit) miss by more than twice that."""
    prof = load_profile("gb300-nvl72-vllm")

    def held_mape():
        rows = next(r for r in opdb_ops.attention_rows(tables, HW, prof) if r.key == "attn.decode.mla.bf16")
        _, held = split(len(rows.seconds))
        return mape(rows.predict(prof, held), rows.seconds[held])
    assert held_mape() == pytest.approx(prof.fit_error["attn.decode.mla.bf16"], abs=0.1)
    monkeypatch.setattr(opdb_ops, "module_elementwise_seconds", lambda m, tokens, *_: np.zeros_like(tokens))
    assert held_mape() > 2 * prof.fit_error["attn.decode.mla.bf16"]


@pytest.mark.profile_data
def test_shipped_mxfp4_bf16_class_matches_its_kernel_rows():
    """h100's experts.mxfp4_bf16 (gpt-oss's Triton MXFP4 MoE, the w4a16_mxfp4 rows; benchmarks/opdb_per_kernel_splice.py
    --expert-class) prices today's held-out rows at its recorded error, on the kernel its provenance names."""
    hw = load_hardware("h100-sxm")
    prof = load_profile("h100-sxm-vllm")
    rows = next(r for r in opdb_ops.expert_rows(opdb.locate(opdb.data_root(), "h100_sxm", "vllm"), hw)
                if r.key == "experts.mxfp4_bf16")
    assert rows.kernel == prof.provenance["classes"]["experts.mxfp4_bf16"]["kernel"]
    _, held = split(len(rows.seconds))
    assert mape(rows.predict(prof, held), rows.seconds[held]) == pytest.approx(prof.fit_error["experts.mxfp4_bf16"],
                                                                              abs=0.1)


@pytest.mark.profile_data
@pytest.mark.parametrize("key", ["experts.fp8_block.deepgemm", "experts.fp8_block.deepgemm_masked"])
def test_shipped_deepgemm_classes_match_their_wideep_rows(key):
    """gb200's SGLang DeepEP MoE classes (benchmarks/opdb_per_kernel_splice.py --expert-class) price today's held-out
    rows of SGLang's wideep tables at their recorded error; the EP 4 row of 65,536 tokens (16,384 a rank) is 5.88 ms,
    131,072 pairs x 88.1 MFLOP = 1.96 PFLOP/s on the rank (39% of the FP8 peak), the rate the class stands for."""
    hw = load_hardware("gb200-nvl72")
    prof = load_profile("gb200-nvl72-vllm")
    tables = opdb.locate(opdb.data_root(), "gb200", "sglang", names=opdb.KERNEL_TABLES)
    rows = next(r for r in opdb_ops.deepep_expert_rows(tables, hw) if r.key == key)
    assert rows.kernel == prof.provenance["classes"][key]["kernel"] == "deepepmoe"
    _, held = split(len(rows.seconds))
    assert mape(rows.predict(prof, held), rows.seconds[held]) == pytest.approx(prof.fit_error[key], abs=0.1)
    c = opdb.read(tables["wideep_context_moe_perf"])
    sel = (c["distribution"] == "uniform") & (c["moe_ep_size"] == 4) & (c["num_tokens"] == 65536)
    assert c["seconds"][sel][0] == pytest.approx(5.877e-3, rel=1e-3)
    assert 65536 * 8 / 4 * 2 * 3 * 7168 * 2048 / 5.877e-3 == pytest.approx(1.96e15, rel=0.01)
