"""The op-database importer on small synthetic tables in aiconfigurator-core's schema (pyarrow only;
no aiconfigurator-core): finding tables and versions, bad input, and recovering known curves.

Synthetic latencies are made by pricing each row through the cost model under a known curve (with
a seeded 2% scatter), so a fit that works recovers that curve's efficiencies on held-out rows.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from rackplan.calibration import opdb, opdb_ops  # noqa: E402
from rackplan.calibration.opdb_command import PROGRESS_PREFIX  # noqa: E402
from rackplan.calibration.opdb_import import import_profile  # noqa: E402
from rackplan.cli import main  # noqa: E402
from rackplan.sim.cost import efficiency  # noqa: E402
from rackplan.specs import Curve, Profile, SpecError, load_hardware, load_profile  # noqa: E402

pytestmark = pytest.mark.unit
HW = load_hardware("gb300-nvl72")
TRUE_GEMM = Curve(eff_max=0.6, x_half=200.0, y_half=100.0, z_half=150.0, work_half=5e9, sharpness=1.5)
TRUE_ATTN = Curve(eff_max=0.05, x_half=150.0, y_half=1e6, work_half=8e8, sharpness=2.0)
TRUE_AR = Curve(eff_max=0.6, work_half=2e6)


def _write(root, system, op, version, table, cols: dict, framework="vllm"):
    path = root / system / op / framework / version / f"{table}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"framework": "VLLM", "version": version, "device": "NVIDIA GB300", "op_name": op}
    n = len(next(iter(cols.values())))
    pq.write_table(pa.table({**{k: [v] * n for k, v in meta.items()}, **cols}), path)
    return path


def _noisy(seconds, seed):
    return seconds * (1.0 + 0.02 * np.random.default_rng(seed).standard_normal(len(seconds)))


def _gemm_cols():
    m = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384], float)
    nk = [(256, 7168), (1024, 1024), (2048, 7168), (7168, 2048), (4096, 16384), (16384, 4096), (1536, 7168)]
    rows = [(mm, n, k) for mm in m for n, k in nk]
    m, n, k = (np.array(x, float) for x in zip(*rows))
    prof = Profile(name="truth", curves={"gemm.fp8": (TRUE_GEMM,)})
    sec = opdb_ops._gemm_predict("fp8", m, n, k, HW)(prof, np.arange(len(m)))
    return {"kernel_source": ["CutlassFP8ScaledMMLinearKernel"] * len(m), "gemm_dtype": ["fp8"] * len(m),
            "m": m.astype(int), "n": n.astype(int), "k": k.astype(int), "latency": _noisy(sec, 1) * 1e3}


def _attn_cols():
    batch = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256], float)
    ctx = np.array([16, 64, 256, 1024, 4096, 16384], float)
    b, s = (x.ravel() for x in np.meshgrid(batch, ctx))
    model, comp = opdb_ops._gqa(64, 4, 128, 2.0)
    shapes = opdb_ops._core_shapes(model, comp, "decode", b, s, 1, HW)
    prof = Profile(name="truth", curves={"attn.decode.gqa.bf16": (TRUE_ATTN,)})
    sec = opdb_ops._core_predict("gqa", "decode", shapes, HW)(prof, np.arange(len(b)))
    n = len(b)
    return {"kernel_source": ["vllm_flashinfer_trtllmdecode"] * n, "batch_size": b.astype(int),
            "step": s.astype(int), "num_heads": [64] * n, "num_key_value_heads": [4] * n, "head_dim": [128] * n,
            "kv_cache_dtype": ["bfloat16"] * n, "window_size": [0] * n, "latency": _noisy(sec, 2) * 1e3}


def _allreduce_cols():
    size = 128.0 * 2.0 ** np.arange(23)
    from rackplan.sim.cost.collective import allreduce_seconds

    sec = allreduce_seconds(HW, Profile(name="truth", curves={"allreduce.tp4": (TRUE_AR,)}), size * 2.0, 4)
    n = len(size)
    return {"num_gpus": [4] * n, "message_size": size.astype(int), "backend": ["vllm_graph"] * n,
            "latency": _noisy(sec, 3) * 1e3}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A database with one system ('synth'): GEMMs, decode attention and all-reduce across versions."""
    r = tmp_path_factory.mktemp("opdb")
    _write(r, "synth", "gemm", "0.24.0", "gemm_perf", _gemm_cols())
    _write(r, "synth", "attention", "0.24.0", "generation_attention_perf", _attn_cols())
    _write(r, "synth", "comm", "0.19.0", "custom_allreduce_perf", _allreduce_cols())
    old = _allreduce_cols()
    old["latency"] = old["latency"] * 3.0  # an older version that must not be chosen
    _write(r, "synth", "comm", "0.14.0", "custom_allreduce_perf", old)
    (r / "synth" / "comm" / "vllm" / "0.27.0").mkdir(parents=True)
    (r / "synth" / "comm" / "vllm" / "0.27.0" / "reuse.yaml").write_text(
        "reuse:\n- {table: custom_allreduce_perf, from_version: 0.19.0}\n")
    return r


@pytest.fixture(scope="module")
def imported(root):
    return import_profile("synth", "vllm", None, HW, load_profile("datasheet"), "synth-vllm", root)


def test_locate_takes_the_newest_version_per_table_and_follows_reuse(root):
    tables = opdb.locate(root, "synth")
    assert tables["gemm_perf"].version == "0.24.0"
    ar = tables["custom_allreduce_perf"]
    assert (ar.version, ar.reused_from) == ("0.27.0", "0.19.0")
    assert opdb.locate(root, "synth", version="0.14.0")["custom_allreduce_perf"].version == "0.14.0"
    assert opdb.version_key("0.1.dev19262") < opdb.version_key("0.14.0") < opdb.version_key("0.24.0")


def test_fitted_curves_recover_the_truth_on_held_out_rows(imported):
    prof, fits = imported
    by_key = {f.key: f for f in fits}
    for key in ("gemm.fp8", "attn.decode.gqa.bf16", "allreduce.tp4"):
        assert by_key[key].mape_held < 5.0, (key, by_key[key].mape_held)
        assert by_key[key].rows_held > 0 and by_key[key].rows_fit > by_key[key].rows_held
    for m in (4.0, 256.0, 8192.0):  # efficiency at decode- and prefill-sized GEMMs, within the scatter
        got = efficiency.gemm(prof, "fp8", m, 7168.0, 2048.0)
        want = efficiency.evaluate((TRUE_GEMM,), m, 7168.0, 2048.0, 2.0 * m * 7168 * 2048)
        assert got == pytest.approx(want, rel=0.08)
    assert prof.hardware == "gb300-nvl72" and prof.fit_error["gemm.fp8"] == pytest.approx(by_key["gemm.fp8"].mape_held,
                                                                                          abs=0.01)


def test_profile_records_provenance_and_fallbacks(imported):
    prof, _ = imported
    src = prof.provenance["source"]
    assert (src["system"], src["framework"]) == ("synth", "vllm")
    assert prof.provenance["classes"]["gemm.fp8"]["rows_held_out"] > 0
    assert "table.moe_perf" in prof.fallbacks  # no MoE table: where moe.experts comes from is written down
    assert "a2a" in prof.fallbacks and "host" in prof.fallbacks


def test_calibrate_cli_writes_a_loadable_compact_profile(root, tmp_path, capsys):
    out = tmp_path / "synth.yaml"
    rc = main(["calibrate", "--op-database", "synth", "--op-database-root", str(root), "--hardware", "gb300-nvl72",
               "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "gemm.fp8" in text and "held-out" in text
    prof = load_profile(out)
    # small YAML: one curve of 12-15 lines per kernel configuration (seven for SM100 fp8) and the provenance
    assert prof.name == "synth" and "gemm.fp8" in prof.curves and len(out.read_text().splitlines()) < 240


def _corrupt(path):
    path.write_bytes(b"PAR1 this is not a parquet file")


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _wrong_columns(path):
    cols = _gemm_cols()
    cols.pop("gemm_dtype")
    pq.write_table(pa.table(cols), path)


@pytest.mark.parametrize("damage, words", [(_corrupt, "parquet"), (_truncated, "parquet"),
                                           (_wrong_columns, "gemm_dtype")])
def test_bad_table_is_one_line_exit_2_no_profile(tmp_path, capsys, damage, words):
    path = _write(tmp_path, "bad", "gemm", "0.24.0", "gemm_perf", _gemm_cols())
    damage(path)
    out = tmp_path / "p.yaml"
    rc = main(["calibrate", "--op-database", "bad", "--op-database-root", str(tmp_path), "--hardware",
               "gb300-nvl72", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and words in err and str(path) in err


@pytest.mark.parametrize("extra, words", [(["--op-database", "nosuch"], "system"),
                                          (["--op-database", "synth", "--framework", "sglang"], "framework"),
                                          (["--op-database", "synth", "--version", "9.9.9"], "version")])
def test_unknown_system_framework_version_exit_2(root, tmp_path, capsys, extra, words):
    out = tmp_path / "p.yaml"
    rc = main(["calibrate", *extra, "--op-database-root", str(root), "--hardware", "gb300-nvl72", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists() and len(err.splitlines()) == 1 and words in err


def test_locate_errors_name_what_exists(root):
    with pytest.raises(SpecError, match="synth"):
        opdb.locate(root, "nosuch")
    with pytest.raises(SpecError, match="0.24.0"):
        opdb.locate(root, "synth", version="1.0")


def test_validate_op_database_side_by_side(root, capsys):
    prof_path = root.parent / "synth-prof.yaml"
    assert main(["calibrate", "--op-database", "synth", "--op-database-root", str(root), "--hardware", "gb300-nvl72",
                 "--out", str(prof_path)]) == 0
    capsys.readouterr()
    rc = main(["validate", "--op-database", "synth", "--op-database-root", str(root), "--hardware", "gb300-nvl72",
               "--profile", "datasheet", "--profile", str(prof_path)])
    text = capsys.readouterr().out
    assert rc == 0 and "datasheet" in text and "synth-prof" in text and "gemm.fp8" in text


def test_reprice_matches_attention_component(imported):
    """The importer's vectorised re-pricing of attention rows is attention.py's own decode price."""
    from rackplan.sim.cost import attention as attn

    prof, _ = imported
    model, comp = opdb_ops._gqa(64, 4, 128, 2.0)
    b, s = np.array([1.0, 32.0, 256.0]), np.array([64.0, 4096.0, 16384.0])
    shapes = opdb_ops._core_shapes(model, comp, "decode", b, s, 1, HW)
    fast = opdb_ops._core_predict("gqa", "decode", shapes, HW)(prof, np.arange(3))
    slow = [attn.decode_component(model, comp, bi, bi * si, 1.0, 1, 1, HW, prof)[0] for bi, si in zip(b, s)]
    assert np.allclose(fast, slow, rtol=1e-12)


def test_profile_with_curves_round_trips(imported, tmp_path):
    from rackplan.calibration.opdb_import import compact
    from rackplan.specs import dump_yaml

    prof, _ = imported
    dump_yaml(compact(prof), tmp_path / "p.yaml", flow_leaves=True)
    back = load_profile(tmp_path / "p.yaml")
    assert back.curves == prof.curves and back.fallbacks == prof.fallbacks
    assert dataclasses.replace(back, provenance={}) == dataclasses.replace(prof, provenance={})


def test_missing_package_says_how_to_install(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SpecError, match=r"rackplan\[opdb\]"):
        opdb.data_root(None)


def test_calibrate_op_database_needs_hardware(tmp_path, capsys):
    rc = main(["calibrate", "--op-database", "synth", "--out", str(tmp_path / "p.yaml")])
    assert rc == 2 and "--hardware" in capsys.readouterr().err and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("sites", [2, None])
def test_mhc_rows_are_priced_per_site(tmp_path, sites):
    """The mHC collector times every site of a layer in one graph (num_sites 2): a row of 0.020 ms
    is 0.010 ms per site, what the curve prices (layer.py runs two sites per layer); a table without
    the column is one site per row."""
    cols = {"op_name": ["pre", "post"], "num_tokens": [8, 8], "hc_mult": [4, 4], "hidden_size": [4096, 4096],
            "latency": [0.020, 0.008]}
    if sites is not None:
        cols["num_sites"] = [sites, sites]
    _write(tmp_path, "sys", "mhc", "0.24.0", "mhc_module_perf", cols)
    rows = {r.key: r for r in opdb_ops.stream_rows(opdb.locate(tmp_path, "sys", "vllm"), HW)}
    per_site = 1.0 / (sites or 1)
    assert rows["mhc.pre"].seconds == pytest.approx([0.020e-3 * per_site])
    assert rows["mhc.post"].seconds == pytest.approx([0.008e-3 * per_site])


def test_gemm_table_on_a_per_call_floor_is_not_written(tmp_path):
    """A GEMM table whose every row takes >= 0.3 ms (as gemm_dtype fp8_block on Blackwell: a 256 x 256
    GEMM at m = 1 as slow as a 7168 x 7168 one) times a per-call floor, not a kernel: not written, its
    dtype family's curve prices it and `fallbacks` says why; the per-tensor table beside it is kept."""
    fp8 = _gemm_cols()
    block = dict(fp8, gemm_dtype=["fp8_block"] * len(fp8["m"]),
                 kernel_source=["DeepGemmFp8BlockScaledMMKernel"] * len(fp8["m"]),
                 latency=0.3 + _noisy(np.full(len(fp8["m"]), 0.05), 4))  # ms
    _write(tmp_path, "floor", "gemm", "0.24.0", "gemm_perf", {k: list(fp8[k]) + list(block[k]) for k in fp8})
    prof, fits = import_profile("floor", "vllm", None, HW, load_profile("datasheet"), "floor-vllm", tmp_path)
    assert "gemm.fp8" in prof.curves and "gemm.fp8_block" not in prof.curves
    assert {f.key: f for f in fits}["gemm.fp8_block"].extra["fastest_row_us"] >= 300.0
    assert "per-call floor" in prof.fallbacks["gemm.fp8_block"] and "gemm.fp8 curve" in prof.fallbacks["gemm.fp8_block"]


def _block_tables(root, system, eager=True, graph="sglang", graph_floor=False, truth=TRUE_GEMM):
    """A system whose vLLM gemm_perf has per-tensor fp8 rows and (eager: a 0.3 ms floor) fp8_block rows, and
    (graph: that framework's) gemm_perf with graph-timed fp8_block rows priced under `truth` (graph_floor:
    on the floor too)."""
    fp8 = dict(_gemm_cols(), kernel_source=["vllm_default"] * len(_gemm_cols()["m"]))  # one curve on any GPU
    n = len(fp8["m"])
    floor = 0.3 + _noisy(np.full(n, 0.05), 4)  # ms
    block = dict(fp8, gemm_dtype=["fp8_block"] * n, kernel_source=["DeepGemmFp8BlockScaledMMKernel"] * n,
                 latency=floor if eager else fp8["latency"])
    _write(root, system, "gemm", "0.24.0", "gemm_perf", {k: list(fp8[k]) + list(block[k]) for k in fp8})
    if graph:
        m, nn, k = (np.asarray(fp8[x], float) for x in "mnk")
        sec = opdb_ops._gemm_predict("fp8_block", m, nn, k, HW)(Profile(name="t", curves={"gemm.fp8_block": (truth,)}),
                                                                  np.arange(n))
        other = dict(block, kernel_source=["sglang_deepgemm_gemm_nt_f8f8bf16"] * n,
                     latency=floor if graph_floor else _noisy(sec, 5) * 1e3)
        _write(root, system, "gemm", "0.5.14", "gemm_perf", other, framework=graph)


def test_eager_fp8_block_table_is_taken_from_the_graph_timed_framework(tmp_path):
    """vLLM's fp8_block table on a per-call floor (an eager timing) and SGLang's graph-timed DeepGEMM table of
    the same system beside it: on SM100 (gb300) the class is fitted from SGLang's rows, and the profile says so
    (provenance: framework and version; fallbacks: from where and why)."""
    truth = dataclasses.replace(TRUE_GEMM, eff_max=0.5, x_half=400.0)
    _block_tables(tmp_path, "blk", truth=truth)
    prof, fits = import_profile("blk", "vllm", None, HW, load_profile("datasheet"), "blk-vllm", tmp_path)
    fit = {f.key: f for f in fits}["gemm.fp8_block"]
    assert "gemm.fp8_block" in prof.curves and fit.mape_held < 5.0
    rec = prof.provenance["classes"]["gemm.fp8_block"]
    assert (rec["framework"], rec["version"]) == ("sglang", "0.5.14") and "written" not in rec
    assert rec["configs"] == opdb_ops.KERNEL_CONFIGS["sglang_deepgemm_gemm_nt_f8f8bf16"] == len(fit.curve)
    assert "eager" in rec["in_place_of"] and "0.24.0" in rec["in_place_of"]
    assert "measured from sglang 0.5.14" in prof.fallbacks["gemm.fp8_block"]
    assert prof.fit_error["gemm.fp8_block"] == pytest.approx(fit.mape_held, abs=0.01)
    for m in (4.0, 512.0):  # the block curve, not the per-tensor one it fell back to before
        want = efficiency.evaluate((truth,), m, 7168.0, 2048.0, 2.0 * m * 7168 * 2048)
        assert efficiency.gemm(prof, "fp8_block", m, 7168.0, 2048.0) == pytest.approx(want, rel=0.08)
        assert efficiency.gemm(prof, "fp8", m, 7168.0, 2048.0) != pytest.approx(want, rel=0.08)


def test_validate_scores_fp8_block_on_the_table_it_was_fitted_from(tmp_path, capsys):
    """`validate --op-database` on vLLM tables scores gemm.fp8_block also on the graph-timed SGLang rows the importer
    fitted it from (a row `gemm.fp8_block [sglang 0.5.14]`, whose held-out MAPE is the profile's fit_error), not
    only on vLLM's eager rows, where the same profile is off by the 0.3 ms floor."""
    truth = dataclasses.replace(TRUE_GEMM, eff_max=0.5, x_half=400.0)
    _block_tables(tmp_path, "blk", truth=truth)
    prof_path = tmp_path / "blk-vllm.yaml"
    argv = ["--op-database", "blk", "--op-database-root", str(tmp_path), "--hardware", "gb300-nvl72"]
    assert main(["calibrate", *argv, "--out", str(prof_path)]) == 0
    capsys.readouterr()
    assert main(["validate", *argv, "--profile", str(prof_path), "--json"]) == 0
    rows = {r["class"]: r for r in json.loads(capsys.readouterr().out)}
    graph = rows["gemm.fp8_block [sglang 0.5.14]"]["blk-vllm"]
    assert graph["held_out"] == pytest.approx(load_profile(prof_path).fit_error["gemm.fp8_block"], abs=0.01)
    assert graph["held_out"] < 5.0 and rows["gemm.fp8_block"]["blk-vllm"]["held_out"] > 50.0
    assert main(["validate", *argv, "--profile", str(prof_path)]) == 0
    assert "gemm.fp8_block [sglang 0.5.14]: the graph-timed table" in capsys.readouterr().out


@pytest.mark.parametrize("graph, graph_floor, hw, words", [
    (None, False, "gb300-nvl72", "no fp8_block rows"),  # the other framework's table missing
    ("sglang", True, "gb300-nvl72", "not taken either (every row >= "),  # on the floor too
])
def test_fp8_block_not_written_when_no_graph_timed_table_of_vllm_s_kernel(tmp_path, graph, graph_floor, hw, words):
    """Where no graph-timed table of the kernel vLLM runs is there (missing, or floor-bound too), the class is
    not written: its dtype family prices it and `fallbacks` says why."""
    _block_tables(tmp_path, "blk", graph=graph, graph_floor=graph_floor)
    prof, _ = import_profile("blk", "vllm", None, load_hardware(hw), load_profile("datasheet"), "blk-vllm", tmp_path)
    assert "gemm.fp8_block" not in prof.curves and "gemm.fp8" in prof.curves
    assert prof.provenance["classes"]["gemm.fp8_block"]["written"] is False
    note = prof.fallbacks["gemm.fp8_block"]
    assert "per-call floor" in note and words in note, note


def test_fp8_block_on_sm90_is_fitted_at_m_from_32_through_deepgemm_s_rule(tmp_path, monkeypatch):
    """On SM90 (h200) the SGLang DeepGEMM table gives gemm.fp8_block at m >= 32 only (vLLM runs FlashInfer's
    kernel below, untimed): curves per DeepGEMM SM90 configuration group with x_min 31, m < 32 priced by
    gemm.fp8, and `fallbacks` says both. (A denser table than _gemm_cols' so each group has rows; one
    configuration per group, to keep the test in seconds.)"""
    hw = load_hardware("h200-sxm")
    _block_tables(tmp_path, "blk", graph=None)
    m = np.unique(np.round(np.geomspace(32, 16384, 16)))
    nk = [(256, 7168), (1024, 1024), (2048, 7168), (7168, 2048), (4096, 16384), (16384, 4096), (1536, 7168)]
    m, n, k = (np.array(x, float) for x in zip(*[(a, b, c) for a in m for b, c in nk]))
    sec = opdb_ops._gemm_predict("fp8_block", m, n, k, hw)(Profile(name="t", curves={"gemm.fp8_block": (TRUE_GEMM,)}),
                                                           np.arange(len(m)))
    _write(tmp_path, "blk", "gemm", "0.5.14", "gemm_perf", {
        "kernel_source": ["sglang_deepgemm_gemm_nt_f8f8bf16"] * len(m), "gemm_dtype": ["fp8_block"] * len(m),
        "m": m.astype(int), "n": n.astype(int), "k": k.astype(int), "latency": _noisy(sec, 5) * 1e3}, "sglang")
    monkeypatch.setitem(opdb_ops.KERNEL_CONFIGS, "sglang_deepgemm_gemm_nt_f8f8bf16", 1)
    prof, fits = import_profile("blk", "vllm", None, hw, load_profile("datasheet"), "blk-vllm", tmp_path)
    curves = prof.curves["gemm.fp8_block"]
    assert {(c.tile_rule, c.x_min) for c in curves} == {("deepgemm_sm90", 31.0)}
    assert sorted(c.rule_group for c in curves) == [1, 2, 3] and prof.fit_error["gemm.fp8_block"] < 5.0
    rec = prof.provenance["classes"]["gemm.fp8_block"]
    assert rec["framework"] == "sglang" and rec["dispatch_by_rule_group"]["tile_rule"] == "deepgemm_sm90"
    note = prof.fallbacks["gemm.fp8_block"]
    assert "measured from sglang 0.5.14" in note and "m < 32: the gemm.fp8 curve" in note and "FlashInfer" in note
    assert efficiency.gemm(prof, "fp8_block", 8.0, 7168.0, 2048.0, hw.num_sms) == \
        efficiency.gemm(prof, "fp8", 8.0, 7168.0, 2048.0, hw.num_sms) > 0


def test_corrupt_graph_timed_table_is_one_line_exit_2(tmp_path, capsys):
    """A corrupt SGLang table read in place of the eager vLLM one: one line naming the file, exit 2, no profile."""
    _block_tables(tmp_path, "blk")
    bad = tmp_path / "blk" / "gemm" / "sglang" / "0.5.14" / "gemm_perf.parquet"
    bad.write_bytes(bad.read_bytes()[:200])
    out = tmp_path / "p.yaml"
    rc = main(["calibrate", "--op-database", "blk", "--op-database-root", str(tmp_path), "--hardware", "gb300-nvl72",
               "--out", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    err = [x for x in lines if not x.startswith(PROGRESS_PREFIX)]  # the classes fitted before the bad read
    assert rc == 2 and not out.exists() and len(err) == 1 and "sglang" in err[0] and lines[-1] == err[0], lines


def test_calibrate_off_a_terminal_names_each_class_as_it_fits(root, tmp_path, capsys):
    """stderr not a terminal (a log, CI): one progress line per class fitted, in order, each with the time so far;
    stdout keeps the table only."""
    rc = main(["calibrate", "--op-database", "synth", "--op-database-root", str(root), "--hardware", "gb300-nvl72",
               "--out", str(tmp_path / "p.yaml")])
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert rc == 0 and lines and all(x.startswith(PROGRESS_PREFIX) and x.endswith(" s so far") for x in lines)
    assert any(x.startswith(PROGRESS_PREFIX + "gemm.fp8 (") for x in lines)
    assert PROGRESS_PREFIX not in cap.out


def test_package_version_from_the_root_s_environment(tmp_path):
    """--op-database-root into another environment's site-packages: the version comes from the
    distribution beside it (provenance), not "not installed"."""
    from importlib import metadata

    from rackplan.calibration.opdb_import import _package_version

    try:
        metadata.version("aiconfigurator-core")
        pytest.skip("aiconfigurator-core is installed here: its version wins")
    except metadata.PackageNotFoundError:
        pass
    dist = tmp_path / "site-packages" / "aiconfigurator_core-0.12.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: aiconfigurator-core\nVersion: 0.12.0\n")
    root = tmp_path / "site-packages" / "aiconfigurator_core" / "systems" / "data"
    root.mkdir(parents=True)
    assert _package_version(root) == "0.12.0"
    assert _package_version(tmp_path / "elsewhere") == "not installed (--op-database-root)"


def test_fp8_gemm_curves_follow_the_cutlass_dispatch(imported):
    """The CUTLASS fp8 table on an SM100 GPU gets one curve per cutlass_scaled_mm configuration by m."""
    prof, _ = imported
    assert [(c.x_min, c.x_max, c.x_tile, c.y_min, c.y_max, c.z_min, c.z_max) for c in prof.curves["gemm.fp8"]] \
        == list(opdb_ops.FP8_DISPATCH["sm100"])
    rec = prof.provenance["classes"]["gemm.fp8"]
    assert rec["configs"] == 7 and rec["dispatch_by_rows"][:2] == [[0.0, 1.0, 32.0], [1.0, 16.0, 32.0]]
    assert rec["dispatch_by_rows"][-1] == [256.0, "inf", 256.0]
    assert rec["dispatch_by_k"] == "[0, inf) [0, inf) [0, inf) [4096, inf) [0, 4096) [0, inf) [0, inf)"
    assert "dispatch_by_n" not in rec and rec["rows_screened"] == 0  # SM100: by m alone; a smooth table


def test_dispatched_fit_recovers_a_kernel_switch():
    """Rows priced under two configurations switched at m = 64 (each padding m to its tile) are recovered on
    held-out rows by a fit given that dispatch; two undispatched configurations (best of) cannot follow it."""
    from pathlib import Path

    from rackplan.calibration.opdb_fit import ClassRows, fit_class

    truth = (Curve(eff_max=0.3, x_half=50.0, y_half=100.0, x_tile=64.0, x_max=64.0),
             Curve(eff_max=0.7, x_half=300.0, y_half=300.0, z_half=150.0, x_tile=256.0, x_min=64.0))
    m = np.array([1, 4, 16, 33, 64, 65, 96, 128, 129, 256, 257, 512, 513, 1024, 1025, 4096, 4097, 16384], float)
    nk = [(1024, 1024), (2048, 7168), (7168, 2048), (4096, 16384), (16384, 4096), (1536, 7168), (7168, 7168)]
    m, n, k = (np.array(x, float) for x in zip(*[(mm, a, b) for mm in m for a, b in nk]))
    predict = opdb_ops._gemm_predict("fp8", m, n, k, HW)
    sec = _noisy(predict(Profile(name="truth", curves={"gemm.fp8": truth}), np.arange(len(m))), 4)
    table = opdb.Table("gemm_perf", "gemm", "0", Path("synthetic"))
    rows = ClassRows("gemm.fp8", table, sec, predict, opdb_ops.GEMM_START, opdb_ops.ALL_FIELDS, "synthetic",
                     ranges=((0.0, 64.0, 64.0), (64.0, 0.0, 256.0)), x=m)
    fit, prof = fit_class(rows, Profile(name="p"))
    plain, _ = fit_class(dataclasses.replace(rows, ranges=(), configs=2), Profile(name="p"))
    assert fit.mape_held < 3.0 < plain.mape_held and fit.extra["configs"] == 2
    assert [(c.x_min, c.x_max, c.x_tile) for c in prof.curves["gemm.fp8"]] == [(0.0, 64.0, 64.0), (64.0, 0.0, 256.0)]


def test_dispatched_fit_recovers_a_padded_row_cost():
    """Rows whose partly empty tiles cost more than their padded share (padded rows at 3 real rows, as the
    Hopper fp8 table's m = 129 rows are slower than its m = 256 rows) are recovered on held-out rows by a
    fit with pad_cost free, as gemm_rows fits the cutlass_scaled_mm dispatch; with padded rows priced as
    real ones (pad_cost 0) the m = 257-type rows stay far off."""
    from pathlib import Path

    from rackplan.calibration.opdb_fit import ClassRows, fit_class

    truth = (Curve(eff_max=0.3, x_half=50.0, y_half=100.0, x_tile=64.0, x_max=64.0, pad_cost=0.5),
             Curve(eff_max=0.7, x_half=300.0, y_half=300.0, z_half=150.0, x_tile=256.0, x_min=64.0, pad_cost=2.0))
    m = np.array([1, 4, 16, 33, 64, 65, 96, 128, 129, 160, 192, 256, 257, 512, 513, 1024, 1025, 4096, 4097], float)
    nk = [(1024, 1024), (2048, 7168), (7168, 2048), (4096, 16384), (16384, 4096), (1536, 7168), (7168, 7168)]
    m, n, k = (np.array(x, float) for x in zip(*[(mm, a, b) for mm in m for a, b in nk]))
    predict = opdb_ops._gemm_predict("fp8", m, n, k, HW)
    sec = _noisy(predict(Profile(name="truth", curves={"gemm.fp8": truth}), np.arange(len(m))), 4)
    table = opdb.Table("gemm_perf", "gemm", "0", Path("synthetic"))
    rows = ClassRows("gemm.fp8", table, sec, predict, dataclasses.replace(opdb_ops.GEMM_START, pad_cost=1.0),
                     opdb_ops.ALL_FIELDS + ("pad_cost",), "synthetic", ranges=((0.0, 64.0, 64.0), (64.0, 0.0, 256.0)),
                     x=m)
    fit, prof = fit_class(rows, Profile(name="p"))
    free = dataclasses.replace(rows, start=opdb_ops.GEMM_START, free=opdb_ops.ALL_FIELDS)
    plain, _ = fit_class(free, Profile(name="p"))
    assert fit.mape_held < 3.0 < plain.mape_held
    assert prof.curves["gemm.fp8"][1].pad_cost == pytest.approx(2.0, rel=0.25)


def test_dispatched_fit_recovers_a_switch_by_n():
    """Rows whose m <= 16 kernel switches at n = 1280 (SM90's M16_N1280 / M16_N8192 configurations, a 32-row
    cluster and a 16-row tile) are recovered on held-out rows by a fit given the dispatch by m and n, as
    FP8_DISPATCH gives it; the same rows dispatched by m alone (one curve for every n) are not."""
    from pathlib import Path

    from rackplan.calibration.opdb_fit import ClassRows, fit_class

    truth = (Curve(eff_max=0.1, x_half=5.0, z_half=8000.0, x_tile=32.0, x_max=16.0, y_max=1280.0),
             Curve(eff_max=0.5, x_half=60.0, y_half=100.0, x_tile=16.0, x_max=16.0, y_min=1280.0),
             Curve(eff_max=0.7, x_half=300.0, y_half=300.0, z_half=150.0, x_tile=256.0, x_min=16.0))
    mm = np.array([1, 2, 4, 8, 12, 16, 17, 64, 129, 256, 257, 1024, 4096], float)
    nk = [(n, k) for n in (256, 512, 1024, 1280, 1536, 2048, 7168, 16384) for k in (1024, 4096, 7168)]
    m, n, k = (np.array(x, float) for x in zip(*[(a, b, c) for a in mm for b, c in nk]))
    predict = opdb_ops._gemm_predict("fp8", m, n, k, HW)
    sec = _noisy(predict(Profile(name="truth", curves={"gemm.fp8": truth}), np.arange(len(m))), 4)
    table = opdb.Table("gemm_perf", "gemm", "0", Path("synthetic"))
    by_n = ((0.0, 16.0, 32.0, 0.0, 1280.0), (0.0, 16.0, 16.0, 1280.0, 0.0), (16.0, 0.0, 256.0, 0.0, 0.0))
    rows = ClassRows("gemm.fp8", table, sec, predict, opdb_ops.GEMM_START, opdb_ops.ALL_FIELDS, "synthetic",
                     ranges=by_n, x=m, y=n)
    fit, prof = fit_class(rows, Profile(name="p"))
    by_m, _ = fit_class(dataclasses.replace(rows, ranges=((0.0, 16.0, 16.0), (16.0, 0.0, 256.0))), Profile(name="p"))
    assert fit.mape_held < 3.0 < by_m.mape_held
    assert [(c.y_min, c.y_max) for c in prof.curves["gemm.fp8"]] == [(0.0, 1280.0), (1280.0, 0.0), (0.0, 0.0)]
    assert fit.extra["dispatch_by_n"] == [[0.0, 1280.0], [1280.0, "inf"], [0.0, "inf"]]


def test_screen_takes_out_rows_slow_against_their_same_configuration_neighbours():
    """opdb_ops.screen: in m 2..16 at one (n, k) a row over SCREEN_RATIO x the median of the others is
    screened; m = 1 and rows within the ratio are not. fit_class keeps screened rows out of both sides of
    the same seeded split (no other row changes side) and scores the fit on every held-out row too."""
    from pathlib import Path

    from rackplan.calibration.opdb_fit import ClassRows, fit_class, split

    m = np.tile(np.arange(1.0, 17.0), 2)  # [32]: m 1..16 at two (n, k)
    n, k = np.repeat([1024.0, 7168.0], 16), np.repeat([2048.0, 4096.0], 16)
    t = np.where(n == 1024.0, 10e-6, 20e-6) * (1.0 + 0.01 * (m % 3))  # within 2% of each other
    t[0] *= 3.0  # m = 1: not in the screen's range
    t[5] *= 1.3  # m = 6 at (1024, 2048): over 1.25x its neighbours' median
    t[20] *= 1.2  # m = 5 at (7168, 4096): within the ratio
    out = opdb_ops.screen(m, n, k, t)
    assert np.flatnonzero(out).tolist() == [5]
    assert opdb_ops.SCREEN_RATIO == 1.25 and opdb_ops.SCREEN_M == (2.0, 16.0)
    predict = opdb_ops._gemm_predict("fp8", m, n, k, HW)
    table = opdb.Table("gemm_perf", "gemm", "0", Path("synthetic"))
    screened = np.zeros(32, bool)
    screened[[3, 9, 30]] = True
    rows = ClassRows("gemm.fp8", table, t, predict, opdb_ops.GEMM_START, ("eff_max",), "synthetic",
                     ranges=((0.0, 0.0, 16.0),), x=m, y=n, screened=screened)
    fit, _ = fit_class(rows, Profile(name="p"))
    fit_idx, held_idx = split(32)
    assert fit.rows_fit == int(np.sum(~screened[fit_idx])) and fit.rows_held == int(np.sum(~screened[held_idx]))
    assert fit.extra["rows_screened"] == 3 and "mape_held_out_unscreened_pct" in fit.extra


def test_prefill_reprice_matches_attention_component_with_a_per_head_cost():
    """Prefill rows re-priced by the importer (heads per rank in the shapes) are attention.py's own price
    under a curve with the per-(sequence, head) term."""
    from rackplan.sim.cost import attention as attn

    prof = Profile(name="p", curves={"attn.prefill.gqa.bf16": (dataclasses.replace(TRUE_ATTN, z_half=3e6),)})
    model, comp = opdb_ops._gqa(16, 1, 128, 2.0)
    b, s = np.array([1.0, 32.0, 256.0]), np.array([16.0, 512.0, 4096.0])
    shapes = opdb_ops._core_shapes(model, comp, "prefill", b, s, 1, HW)
    fast = opdb_ops._core_predict("gqa", "prefill", shapes, HW)(prof, np.arange(3))
    slow = [attn.prefill_component(model, comp, ((bi, si, 0.0),), 1, 1, HW, prof)[0] for bi, si in zip(b, s)]
    without = Profile(name="p", curves={"attn.prefill.gqa.bf16": (TRUE_ATTN,)})
    no_head = [attn.prefill_component(model, comp, ((bi, si, 0.0),), 1, 1, HW, without)[0] for bi, si in zip(b, s)]
    assert np.allclose(fast, slow, rtol=1e-12) and shapes[0, 4] == 16.0 and np.all(np.array(slow) > no_head)

def test_a_regime_with_fewer_fit_rows_than_parameters_fits_only_what_its_rows_determine(imported):
    """The synthetic gb300 TP4 all-reduce (23 sizes, 256 B .. 1 GiB) splits at 512 KiB, 4 MiB and 32 MiB
    (opdb_ops.allreduce_regimes): the two middle regimes hold three sizes each, so at most three fit rows for
    four parameters. Such a regime starts from the regime below and fits eff_max, and with two rows also its
    work_half (the alpha-beta pair), its other parameters that regime's exactly, so its optimum is unique (a
    four-parameter fit on three rows is not, and which of its optima the optimiser finds differs between
    machines: 11.2% held out on one, < 5% on another)."""
    from rackplan.calibration.opdb_fit import split
    from rackplan.calibration.opdb_ops import MIB

    prof, _ = imported
    curves = prof.curves["allreduce.tp4"]
    nbytes = 256.0 * 2.0 ** np.arange(23)
    fit_idx, _ = split(len(nbytes))
    assert [(c.work_min, c.work_max) for c in curves] == [(0.0, 512 * 1024.0), (512 * 1024.0, 4 * MIB),
                                                          (4 * MIB, 32 * MIB), (32 * MIB, 0.0)]
    for below, c in zip(curves, curves[1:]):
        rows = np.sum((nbytes[fit_idx] >= c.work_min) & ((nbytes[fit_idx] < c.work_max) | (c.work_max == 0.0)))
        if rows < 4:  # eff_max, then with two rows work_half too (opdb_ops.comm_rows sparse_free), the rest below's
            assert (c.x_half, c.sharpness) == (below.x_half, below.sharpness)
            assert (c.work_half == below.work_half) == (rows < 2)
    assert sum(np.sum((nbytes[fit_idx] >= c.work_min) & (nbytes[fit_idx] < (c.work_max or np.inf))) < 4
               for c in curves) >= 1  # the case this test is about occurs


def test_allreduce_regimes_recover_a_dispatch_switch(tmp_path):
    """B200 all-reduce over 8 GPUs timed from three kernels switched by size as vLLM dispatches them
    (custom below 1 MiB, symmetric memory to 128 MiB, NCCL above; opdb_ops.allreduce_regimes): the
    faster symmetric-memory kernel from 1 MiB makes the time drop where the size grows, which one curve
    cannot follow. The fit writes one curve per regime and prices held-out rows within the scatter."""
    from rackplan.calibration.opdb_ops import MIB
    from rackplan.sim.cost.collective import allreduce_seconds

    hw = load_hardware("b200")
    truth = (Curve(eff_max=0.05, work_half=2e4, work_max=MIB), Curve(eff_max=0.5, work_half=5e5, work_min=MIB,
                                                                     work_max=128 * MIB),
             Curve(eff_max=0.6, work_half=1e6, work_min=128 * MIB))
    size = 128.0 * 2.0 ** np.arange(23)
    sec = allreduce_seconds(hw, Profile(name="truth", curves={"allreduce.tp8": truth}), size * 2.0, 8)
    assert sec[12] < sec[11]  # 1 MiB is faster than 512 KiB
    n = len(size)
    _write(tmp_path, "sw", "comm", "0.24.0", "custom_allreduce_perf",
           {"num_gpus": [8] * n, "message_size": size.astype(int), "backend": ["vllm_graph"] * n,
            "latency": _noisy(sec, 5) * 1e3})
    prof, fits = import_profile("sw", "vllm", None, hw, load_profile("datasheet"), "sw-vllm", tmp_path)
    fit = {f.key: f for f in fits}["allreduce.tp8"]
    assert fit.mape_held < 5.0, fit.mape_held
    assert [(c.work_min, c.work_max) for c in prof.curves["allreduce.tp8"]] == [
        (0.0, MIB), (MIB, 128 * MIB), (128 * MIB, 0.0)]


def test_quantize_in_and_out_of_l2(tmp_path):
    """H100 quantize rows whose working set fits the 50 MB L2 run at 1.25x the HBM peak, those above
    at 0.85 (the shape of h100_sxm's scale_matrix_perf): the in-L2 regime's curve may exceed 1, and
    the fit prices held-out rows within the scatter on both sides of the edge."""
    from rackplan.sim.cost.elementwise import quantize_bytes, stream_seconds

    hw = load_hardware("h100-sxm")
    truth = (Curve(eff_max=1.25, work_half=2e6, work_max=50e6), Curve(eff_max=0.85, work_half=2e6, work_min=50e6))
    m, k = (x.ravel() for x in np.meshgrid(2.0 ** np.arange(0, 16), [512.0, 2048.0, 7168.0, 16384.0]))
    nbytes = quantize_bytes(m, k, "fp8")
    sec = stream_seconds(hw, Profile(name="truth", curves={"quantize.fp8": truth}), "quantize.fp8", nbytes, m, k)
    _write(tmp_path, "l2", "quantize", "0.24.0", "scale_matrix_perf",
           {"m": m.astype(int), "k": k.astype(int), "quant_dtype": ["fp8"] * len(m), "latency": _noisy(sec, 6) * 1e3})
    prof, fits = import_profile("l2", "vllm", None, hw, load_profile("datasheet"), "l2-vllm", tmp_path)
    assert {f.key: f for f in fits}["quantize.fp8"].mape_held < 5.0
    inside, outside = prof.curves["quantize.fp8"]
    assert (inside.work_max, outside.work_min) == (50e6, 50e6) and inside.eff_max > 1.0


def test_mxfp4_experts_follow_flashinfer_s_tile_by_load(tmp_path):
    """MXFP4 MoE rows of the TRT-LLM modular kernel timed under a different curve per range of its load
    (tokens x top-k / local experts: FlashInfer's fallback tile_N, opdb_ops.FLASHINFER_TILE_LOADS) are
    recovered on held-out rows by the per-range fit, which writes the ranges' bounds; the class fitted
    without them (one pair of curves over every load) cannot follow the jumps."""
    from rackplan.calibration.opdb_fit import fit_class

    kernel = "vllm_mxfp4moe_flashinfer_trtllm_mxfp4_mxfp8_trtllmmxfp4expertsmodular"
    # odd multiples of powers of two up to 8192 at EP 1, 4, 16: 24 rows or more in each load range
    tokens = np.array(sorted({a * 2 ** i for a in range(1, 16, 2) for i in range(14) if a * 2 ** i <= 8192}), float)
    t, ep = (x.ravel() for x in np.meshgrid(tokens, [1.0, 4.0, 16.0]))
    n = len(t)
    cols = {"kernel_source": [kernel] * n, "moe_dtype": ["w4a8_mxfp4_mxfp8"] * n, "num_tokens": t.astype(int),
            "hidden_size": [4096] * n, "inter_size": [2048] * n, "topk": [6] * n, "num_experts": [256] * n,
            "moe_tp_size": [1] * n, "moe_ep_size": ep.astype(int), "distribution": ["balanced"] * n,
            "latency": [100.0] * n}
    _write(tmp_path, "mx", "moe", "0.24.0", "moe_perf", cols)
    hw, base = load_hardware("gb200-nvl72"), load_profile("gb200-nvl72-vllm")
    rows = [r for r in opdb_ops.expert_rows(opdb.locate(tmp_path, "mx"), hw) if r.key == "experts.mxfp4"][0]
    assert len(rows.seconds) == n and rows.load_ranges == opdb_ops.FLASHINFER_TILE_LOADS
    truth = tuple(Curve(eff_max=e, x_half=300.0, y_half=500.0, z_half=400.0, load_min=lo, load_max=_open(hi))
                  for e, (lo, hi) in zip((0.35, 0.7, 0.4, 0.65, 0.3), opdb_ops.FLASHINFER_TILE_LOADS))
    # (the routing stream and memory side as gb200's measured profile has them: from the datasheet's, and
    # from gb300's, the fit of these rows stays near its start, a local minimum where the weights' read binds)
    prof = dataclasses.replace(base, curves={"experts.mxfp4": truth, "moe.route.mxfp4": (Curve(eff_max=0.08),)})
    _write(tmp_path, "mx", "moe", "0.24.0", "moe_perf",
           {**cols, "latency": _noisy(rows.predict(prof, np.arange(n)), 7) * 1e3})
    got, fits = import_profile("mx", "vllm", None, hw, base, "mx-vllm", tmp_path)
    fit = {f.key: f for f in fits}["experts.mxfp4"]
    assert fit.mape_held < 5.0, fit.mape_held
    assert {(c.load_min, c.load_max) for c in got.curves["experts.mxfp4"]} == {
        (lo, _open(hi)) for lo, hi in opdb_ops.FLASHINFER_TILE_LOADS}
    assert got.provenance["classes"]["experts.mxfp4"]["dispatch_by_load"][-1] == [128.0, "inf"]
    rows = [r for r in opdb_ops.expert_rows(opdb.locate(tmp_path, "mx"), hw) if r.key == "experts.mxfp4"][0]
    plain, _ = fit_class(dataclasses.replace(rows, load_ranges=()), base)
    assert plain.mape_held > 3 * fit.mape_held, (plain.mape_held, fit.mape_held)


def _open(hi: float) -> float:
    return 0.0 if np.isinf(hi) else hi


def test_block_fp8_weight_gemms_are_priced_by_the_fp8_block_curve_where_the_profile_has_it():
    """A dense GEMM of 128x128 block-scaled FP8 weights (DeepSeek-V3's projections) runs vLLM's block-FP8 kernel:
    priced by gemm.fp8_block where the profile holds it (here at half gemm.fp8's efficiency: twice the time), by
    gemm.fp8 (its dtype family) where not; a per-tensor FP8 GEMM stays on gemm.fp8."""
    from rackplan.sim.cost.layer import GemmOp
    from rackplan.specs.ops import Gemm, ModelOp

    fp8_only = Profile(name="a", curves={"gemm.fp8": (TRUE_GEMM,)})
    both = Profile(name="b", curves={"gemm.fp8": (TRUE_GEMM,),
                                     "gemm.fp8_block": (dataclasses.replace(TRUE_GEMM, eff_max=0.3),)})

    def sec(prof, weights):
        op = ModelOp("attn.proj", 1, (Gemm("q_a", 7168.0, 1536.0, weights, "fp8"),))
        return GemmOp(op, HW, prof, 2.0).at(64.0)[0]

    flops, peak = 2.0 * 64 * 7168 * 1536, HW.flops_for("fp8")
    compute = [flops / (peak * efficiency.gemm(both, dt, 64.0, 1536.0, 7168.0)) for dt in ("fp8_block", "fp8")]
    assert compute[0] == pytest.approx(2.0 * compute[1])  # the same curve at half the peak
    assert sec(both, "fp8_block") - sec(fp8_only, "fp8_block") == pytest.approx(compute[0] - compute[1], rel=1e-6)
    assert sec(both, "fp8") == sec(fp8_only, "fp8") == pytest.approx(sec(fp8_only, "fp8_block"), rel=1e-2)


@pytest.mark.parametrize("listing", [sorted, lambda names: sorted(names, reverse=True)])
def test_versions_whose_numbers_tie_do_not_take_the_listing_order(tmp_path, monkeypatch, listing):
    """1.3.0rc1 and 1.3.0.dev1 have the same numbers: the newest is the same whatever order the folder lists
    them in (the filesystem's; a set's under another PYTHONHASHSEED)."""
    for v in ("1.3.0rc1", "1.3.0.dev1", "1.2.0"):
        (tmp_path / v).mkdir()
    real = type(tmp_path).iterdir
    monkeypatch.setattr(type(tmp_path), "iterdir", lambda self: iter(listing(list(real(self)))))
    assert opdb._versions(tmp_path) == ["1.2.0", "1.3.0.dev1", "1.3.0rc1"]


def test_expert_rows_take_the_kernel_with_most_rows_unless_picked(tmp_path):
    """A moe_perf table holding two kernels of one dtype: the class takes the kernel with most rows (20 of
    32 here), and `pick` (benchmarks/investigations/opdb_dropped_kernels.py) selects the other one's 12 rows
    instead."""
    t = np.array([2.0 ** i for i in range(4, 20)])  # [16] tokens
    n = len(t)
    cols = {"kernel_source": ["a_trtllm"] * 20 + ["b_cutlass"] * 12, "moe_dtype": ["fp8"] * 32,
            "num_tokens": np.concatenate([t, t[:4], t[:12]]).astype(int), "hidden_size": [4096] * 32,
            "inter_size": [1536] * 32, "topk": [8] * 32, "num_experts": [128] * 32, "moe_tp_size": [1] * 32,
            "moe_ep_size": [1] * (n + 4) + [8] * 12, "distribution": ["balanced"] * 32, "latency": [50.0] * 32}
    _write(tmp_path, "k2", "moe", "0.24.0", "moe_perf", cols)
    hw, tables = load_hardware("b200"), opdb.locate(tmp_path, "k2")
    kept = [r for r in opdb_ops.expert_rows(tables, hw) if r.key == "experts.fp8"][0]
    assert (kept.kernel, len(kept.seconds)) == ("a_trtllm", 20)
    other = [r for r in opdb_ops.expert_rows(tables, hw, lambda values: "b_cutlass") if r.key == "experts.fp8"][0]
    assert (other.kernel, len(other.seconds)) == ("b_cutlass", 12)


def test_a_vllm_backend_class_takes_its_kernel_s_rows_without_shape_terms(tmp_path):
    """A moe_perf table holding vLLM's default MXFP4 kernel (Triton, 20 rows) and Marlin's (12 rows, one expert shape:
    hidden 3584, inter 3072, so n = 2 x 3072 = 6144, k = 3584): experts.mxfp4_bf16 takes Triton's rows, and
    backend="marlin" gives experts.mxfp4_bf16.marlin from Marlin's 12 alone, its y and z terms held at 0 (one shape does
    not tell them from eff_max) and named in its selection; a backend with no kernel in the table gives nothing."""
    t = np.array([2.0 ** i for i in range(20)])  # [20] tokens, 1 to 524,288
    cols = {"kernel_source": ["vllm_gptossmxfp4moe_triton_oaitritonmxfp4experts"] * 20
            + ["vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts"] * 12,
            "moe_dtype": ["w4a16_mxfp4"] * 32, "num_tokens": np.concatenate([t, t[:12]]).astype(int),
            "hidden_size": [2880] * 20 + [3584] * 12, "inter_size": [2880] * 20 + [3072] * 12,
            "topk": [4] * 20 + [16] * 12, "num_experts": [128] * 20 + [896] * 12, "moe_tp_size": [1] * 32,
            "moe_ep_size": [1] * 32, "distribution": ["balanced"] * 32, "latency": [1000.0] * 32}
    _write(tmp_path, "mb", "moe", "0.24.0", "moe_perf", cols)
    hw, tables = load_hardware("h100-sxm"), opdb.locate(tmp_path, "mb")
    triton = [r for r in opdb_ops.expert_rows(tables, hw) if r.key.startswith("experts.mxfp4_bf16")]
    assert [(r.key, len(r.seconds)) for r in triton] == [("experts.mxfp4_bf16", 20)]
    assert "y_half" in triton[0].free
    (marlin,) = opdb_ops.expert_rows(tables, hw, backend="marlin")
    assert (marlin.key, len(marlin.seconds)) == ("experts.mxfp4_bf16.marlin", 12)
    assert marlin.also[0][0] == "moe.route.mxfp4_bf16.marlin"
    assert "y_half" not in marlin.free and "z_half" not in marlin.free
    assert (marlin.start.y_half, marlin.start.z_half) == (0.0, 0.0)
    assert "one expert shape (n 6144, k 3584)" in marlin.selection
    assert opdb_ops.expert_rows(tables, hw, backend="deepgemm") == []
