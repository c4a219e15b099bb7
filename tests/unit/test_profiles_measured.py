"""Measured profiles: efficiency curves (scalar = array, fallbacks, kernel configurations), the
profile-vs-hardware check, the hardware default profiles, and the shipped op-database profiles."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rackplan.cli import main
from rackplan.sim.cost import efficiency
from rackplan.sim.cost.moe import distinct_experts_per_rank, expert_work
from rackplan.sim.cost.roofline import price, price_gemm
from rackplan.sim.cost.step import CostContext, decode_step
from rackplan.specs import (
    Curve,
    Layout,
    Profile,
    SpecError,
    available,
    check_hardware,
    load_hardware,
    load_model,
    load_profile,
    resolve_profile,
)

pytestmark = pytest.mark.unit
SHIPPED = {"gb300-nvl72": "gb300-nvl72-vllm", "gb200-nvl72": "gb200-nvl72-vllm", "h200-sxm": "h200-sxm-vllm",
           "h100-sxm": "h100-sxm-vllm", "b200": "b200-vllm"}
C = Curve(eff_max=0.6, x_half=200.0, y_half=100.0, z_half=150.0, work_half=5e9, sharpness=1.5, tiles_half=4.0)


def test_curve_by_hand():
    """q = 1, no occupancy: eff = eff_max / (1 + x_half/x + y_half/y + work_half/work)."""
    c = Curve(eff_max=0.8, x_half=100.0, y_half=50.0, work_half=1e9)
    assert efficiency.evaluate((c,), 100.0, 50.0, 0.0, 1e9) == pytest.approx(0.8 / 4.0)
    assert efficiency.evaluate((c,), 100.0, 0.0, 0.0, 0.0) == pytest.approx(0.8 / 2.0)  # unknown y, work: dropped


def test_curve_scalar_equals_array_and_best_config_wins():
    m = np.array([1.0, 7.0, 64.0, 1000.0, 30000.0])
    arr = efficiency.evaluate((C,), m, 7168.0, 2048.0, 2 * m * 7168 * 2048)
    one = [efficiency.evaluate((C,), float(x), 7168.0, 2048.0, 2 * x * 7168 * 2048) for x in m]
    assert np.allclose(arr, one) and all(isinstance(v, float) for v in one)
    small = dataclasses.replace(C, x_half=5.0, eff_max=0.3)
    both = efficiency.evaluate((C, small), m, 7168.0, 2048.0, 2 * m * 7168 * 2048)
    alone = efficiency.evaluate((small,), m, 7168.0, 2048.0, 2 * m * 7168 * 2048)
    assert np.allclose(both, np.maximum(arr, alone)) and both[0] > arr[0] and both[-1] == pytest.approx(arr[-1])


def test_dispatched_configurations_and_tile_padding_by_hand():
    """Curves with x ranges are a dispatch: each prices only its own x (x_min < x <= x_max); x_tile pads
    the compute term to whole tiles. q = 1: eff = eff_max / (pad + x_half / x), pad = ceil(x / t) t / x."""
    small = Curve(eff_max=0.5, x_half=10.0, x_tile=16.0, x_max=16.0)
    big = Curve(eff_max=0.8, x_half=100.0, x_tile=128.0, x_min=16.0)
    assert efficiency.evaluate((small, big), 8.0) == pytest.approx(0.5 / (2.0 + 10.0 / 8.0))  # 8 rows in a 16-row tile
    assert efficiency.evaluate((small, big), 16.0) == pytest.approx(0.5 / (1.0 + 10.0 / 16.0))
    assert efficiency.evaluate((small, big), 200.0) == pytest.approx(0.8 / (256.0 / 200.0 + 0.5))  # only `big`
    assert efficiency.evaluate((big,), 8.0) == 0.0  # outside its range it does not run
    m = np.array([1.0, 8.0, 16.0, 17.0, 200.0, 4097.0])
    arr = efficiency.evaluate((small, big), m, 7168.0, 2048.0, 2 * m * 7168 * 2048)
    one = [efficiency.evaluate((small, big), float(x), 7168.0, 2048.0, 2 * x * 7168 * 2048) for x in m]
    assert np.allclose(arr, one) and np.all(arr > 0)
    with pytest.raises(SpecError, match="x_max"):
        Curve(eff_max=0.5, x_min=64.0, x_max=16.0)


def test_padded_rows_priced_apart_by_hand():
    """pad_cost: each padded row of a tile costs 1 + pad_cost real rows; pad = (x_pad + c (x_pad - x)) / x,
    x_pad = ceil(x / x_tile) x_tile; 0 (the default) prices padded rows as real ones, as before."""
    c = Curve(eff_max=0.8, x_half=100.0, x_tile=256.0, x_min=128.0, pad_cost=1.5)
    # m = 129 in a 256-row cluster tile: 127 padded rows at 2.5 real rows each
    assert efficiency.evaluate((c,), 129.0) == pytest.approx(0.8 / ((256.0 + 1.5 * 127.0) / 129.0 + 100.0 / 129.0))
    assert efficiency.evaluate((c,), 256.0) == pytest.approx(0.8 / (1.0 + 100.0 / 256.0))  # no padding: no cost
    plain = dataclasses.replace(c, pad_cost=0.0)
    assert efficiency.evaluate((plain,), 129.0) == pytest.approx(0.8 / (256.0 / 129.0 + 100.0 / 129.0))
    m = np.array([129.0, 200.0, 256.0, 257.0, 4097.0])
    arr = efficiency.evaluate((c,), m, 7168.0, 2048.0, 2 * m * 7168 * 2048)
    one = [efficiency.evaluate((c,), float(x), 7168.0, 2048.0, 2 * x * 7168 * 2048) for x in m]
    assert np.allclose(arr, one)
    with pytest.raises(SpecError, match="pad_cost"):
        Curve(eff_max=0.5, x_tile=16.0, pad_cost=-1.0)


def test_dispatch_by_n_by_hand():
    """y_min < y <= y_max: SM90's fp8 tiles by n (n <= 1280 and above) within one m range; the GEMM's n is
    y, so efficiency.gemm picks the configuration by m and n; an unknown n (0) lies in every y range."""
    small_n = Curve(eff_max=0.4, x_half=10.0, x_tile=32.0, x_max=16.0, y_max=1280.0)
    big_n = Curve(eff_max=0.6, x_half=20.0, x_tile=16.0, x_max=16.0, y_min=1280.0)
    prof = Profile(name="p", curves={"gemm.fp8": (small_n, big_n)})
    # m = 8, n = 1024: only small_n runs, 8 rows in its 32-row cluster (pad 4)
    assert efficiency.gemm(prof, "fp8", 8.0, 1024.0, 0.0) == pytest.approx(0.4 / (4.0 + 10.0 / 8.0))
    assert efficiency.gemm(prof, "fp8", 8.0, 1280.0, 0.0) == pytest.approx(0.4 / (4.0 + 10.0 / 8.0))  # n <= 1280
    # n = 1536: only big_n, 8 rows in a 16-row tile (pad 2)
    assert efficiency.gemm(prof, "fp8", 8.0, 1536.0, 0.0) == pytest.approx(0.6 / (2.0 + 20.0 / 8.0))
    assert efficiency.evaluate((small_n,), 8.0, 1536.0) == 0.0 and efficiency.evaluate((big_n,), 8.0, 1024.0) == 0.0
    assert efficiency.evaluate((small_n, big_n), 8.0) == pytest.approx(max(0.4 / 5.25, 0.6 / 4.5))  # n unknown
    assert efficiency.evaluate((small_n, big_n), 17.0, 1024.0) == 0.0  # outside every x range
    n = np.array([256.0, 1024.0, 1280.0, 1281.0, 7168.0])
    arr = efficiency.evaluate((small_n, big_n), 8.0, n, 2048.0, 2 * 8.0 * n * 2048)
    one = [efficiency.evaluate((small_n, big_n), 8.0, float(y), 2048.0, 2 * 8.0 * y * 2048) for y in n]
    assert np.allclose(arr, one) and np.all(arr > 0)
    assert efficiency.in_ranges(big_n, 8.0, 0.0, 1281.0) and not efficiency.in_ranges(big_n, 8.0, 0.0, 1280.0)
    with pytest.raises(SpecError, match="y_max"):
        Curve(eff_max=0.5, y_min=1280.0, y_max=256.0)


def test_attention_cost_per_sequence_and_head_by_hand():
    """The attention curve's z-term is a cost per (sequence, query head): z = FLOPs / (batch x heads);
    heads unknown (0) drops it, as every curve fitted without it."""
    prof = Profile(name="p", curves={"attn.prefill.gqa.bf16": (Curve(eff_max=0.5, y_half=4e6, z_half=1e6),)})
    # 2 sequences x 2 heads, 8 MFLOP: y = 4e6 per sequence (term 1), z = 2e6 per sequence-head (term 0.5)
    assert efficiency.attention(prof, "prefill", "gqa", "bf16", 2.0, 100.0, 8e6, 2.0) == pytest.approx(0.5 / 2.5)
    assert efficiency.attention(prof, "prefill", "gqa", "bf16", 2.0, 100.0, 8e6) == pytest.approx(0.5 / 2.0)


@pytest.mark.profile_data
def test_datasheet_profile_prices_as_before():
    """No curves: the saturating datasheet form, exactly as before curves existed."""
    ds = load_profile("datasheet")
    assert efficiency.gemm(ds, "fp8", 64.0, 7168.0, 2048.0) == pytest.approx(0.70 * 64 / (64 + 32))
    assert efficiency.experts(ds, "fp4", 8.0, 4096.0, 7168.0, flops=1e12) == pytest.approx(0.70 * 8 / 40)
    assert efficiency.attention(ds, "decode", "mla", "bf16", 64.0, 4096.0, 1e9) == pytest.approx(0.45)


def test_gemm_under_a_curve_is_the_curve_alone_by_hand():
    """A measured GEMM curve is the whole kernel (roofline.price_gemm): its x-term is the weight read,
    and the profile's streaming side (mem_eff) is not added on top. bf16 on GB300 (2.5 PF dense):
    eff = 0.8 / (1 + 300 / m); a 4096 x 4096 GEMM at m = 1 takes 2 m n k / (P 0.8) = 16.8 ns of
    compute plus 2 n k 300 / (P 0.8) = 5.033 us of weight read (32 MiB at 6.67 TB/s), plus op_fixed_s."""
    hw = load_hardware("gb300-nvl72")
    prof = Profile(name="p", hardware=hw.name, curves={"gemm.bf16": (Curve(eff_max=0.8, x_half=300.0),)},
                   mem_eff=0.3)
    flops, nbytes = 2.0 * 4096 * 4096, 4096 * 4096 * 2.0 + 2 * 4096 * 2.0
    got = price_gemm(flops, nbytes, hw.flops_for("bf16"), "bf16", 1.0, 4096.0, 4096.0, hw, prof)
    assert hw.flops_for("bf16") == 2.5e15
    assert got == pytest.approx(16.777e-9 + 5.0332e-6 + prof.op_fixed_s, rel=1e-4)
    # no curve (datasheet scalars): the roofline, here bound by the 0.3 x HBM streaming side
    ds = dataclasses.replace(prof, curves={})
    roof = price(flops, nbytes, hw.flops_for("bf16"), efficiency.gemm(ds, "bf16", 1.0), hw, ds)
    assert price_gemm(flops, nbytes, hw.flops_for("bf16"), "bf16", 1.0, 4096.0, 4096.0, hw, ds) == roof
    assert roof > nbytes / (0.3 * hw.hbm_bw)


def test_fallback_chain():
    prof = Profile(name="p", hardware="x", curves={"gemm.fp8": (C,), "attn.decode.mla.bf16": (C,)},
                   fallbacks={"attn.decode.csa.bf16": "attn.decode.mla.bf16", "gemm.fp4": "not a curve"})
    assert efficiency.gemm(prof, "fp8_block", 64.0, 7168.0, 2048.0) == efficiency.gemm(prof, "fp8", 64.0, 7168.0,
                                                                                        2048.0)  # dtype family
    assert efficiency.gemm(prof, "fp4", 64.0) == pytest.approx(0.7 * 64 / 96)  # a description: scalar fields
    csa = efficiency.attention(prof, "decode", "csa", "bf16", 8.0, 1000.0, 1e9)
    assert csa == efficiency.attention(prof, "decode", "mla", "bf16", 8.0, 1000.0, 1e9)
    assert efficiency.attention(prof, "prefill", "gqa", "bf16", 8.0, 1000.0, 1e9) == prof.attn_eff


def test_allreduce_nearest_size_then_datasheet():
    prof = Profile(name="p", curves={"allreduce.tp4": (Curve(eff_max=0.5, work_half=1e6),)})
    assert efficiency.allreduce(prof, 8, 1e6) == pytest.approx(0.25)  # nearest fitted size
    assert efficiency.allreduce(Profile(name="d"), 8, 1e6) == pytest.approx(0.35)  # datasheet 0.7 / (1 + 1)


def test_expert_work_is_what_step_prices():
    """moe.expert_work (the importer's row pricing) gives the FLOPs and bytes of step.py's moe.experts."""
    model, hw, prof = load_model("deepseek-v3"), load_hardware("h200-sxm"), load_profile("datasheet")
    lay = Layout(role="decode", dp=8)
    step = decode_step(CostContext(model, hw, lay, prof), 64.0, 64 * 2000.0)
    op = next(o for o in step.ops if o.name == "moe.experts")
    t_global = 64.0 * 8
    from rackplan.sim.cost.imbalance import imbalance_factor

    f = imbalance_factor(t_global, model.moe.top_k, model.moe.num_experts, lay.ep_size, 0.0,
                         lay.eplb.redundant_experts, lay.eplb.policy, lay.moe_imbalance,
                         gpus_per_node=hw.gpus_per_node, num_groups=model.moe.num_groups)
    busiest = t_global * model.moe.top_k / lay.ep_size * f
    flops, nbytes, *_ = expert_work(model, busiest, max(distinct_experts_per_rank(model, lay, t_global), 1.0))
    n_moe = model.num_layers - model.num_dense_layers
    assert op.flops == pytest.approx(flops * n_moe) and op.bytes == pytest.approx(nbytes * n_moe)


def test_profile_on_other_hardware_is_an_error_naming_both():
    prof = load_profile("h200-sxm-vllm")
    with pytest.raises(SpecError) as e:
        check_hardware(prof, "gb300-nvl72")
    assert "h200-sxm" in str(e.value) and "gb300-nvl72" in str(e.value) and "--profile-any-hardware" in str(e.value)
    check_hardware(prof, "gb300-nvl72", any_hardware=True)
    check_hardware(load_profile("datasheet"), "gb300-nvl72")  # hardware "*": anywhere


@pytest.mark.parametrize("hardware, profile", sorted(SHIPPED.items()))
def test_hardware_defaults_to_its_shipped_measured_profile(hardware, profile):
    prof = resolve_profile(None, None, hardware)
    assert prof.name == profile and prof.hardware == hardware and load_hardware(hardware).default_profile == profile
    src = prof.provenance["source"]
    assert src["package"] == "aiconfigurator-core" and src["framework"] == "vllm"
    assert prof.fit_error and all(v >= 0 for v in prof.fit_error.values())
    assert any(k.startswith("gemm.") for k in prof.curves) and any(k.startswith("experts.") for k in prof.curves)
    assert "a2a" in prof.fallbacks and "host" in prof.fallbacks


def test_hardware_without_tables_keeps_datasheet():
    assert resolve_profile(None, None, "h800").name == "datasheet"
    assert resolve_profile("datasheet", "cpu-local", "cpu-local").name == "datasheet"  # --profile wins
    assert set(SHIPPED.values()) <= set(available("profiles"))


def test_simulate_rejects_a_profile_of_other_hardware(capsys):
    rc = main(["simulate", "--profile", "h200-sxm-vllm", "--requests", "5"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "h200-sxm" in err and "gb300-nvl72" in err
    assert main(["simulate", "--profile", "h200-sxm-vllm", "--profile-any-hardware", "--requests", "5",
                 "--json"]) == 0
    assert '"profile": "h200-sxm-vllm"' in capsys.readouterr().out


# fp8 GEMM rows (m, n, k, microseconds) of aiconfigurator-core 0.12.0 gb300/gemm/vllm/0.24.0/gemm_perf.parquet,
# copied by hand (tests/integration/test_opdb_real.py reads them from the package when it is installed)
GB300_FP8_ROWS = [(16384, 7168, 2048, 226.78), (16384, 2048, 7168, 383.16), (64, 7168, 2048, 7.63),
                  (8, 16384, 1536, 10.55), (4096, 7168, 16384, 399.33), (256, 4096, 7168, 17.16)]


def gemm_seconds(prof: Profile, dtype: str, rows) -> np.ndarray:
    from rackplan.calibration.opdb_ops import _gemm_predict

    m, n, k = (np.array([r[i] for r in rows], float) for i in range(3))
    return _gemm_predict(dtype, m, n, k, load_hardware("gb300-nvl72"))(prof, np.arange(len(rows)))


@pytest.mark.profile_data
def test_measured_profile_prices_fp8_gemms_near_their_table_rows():
    """The first row is the issue's example: 2 x 16384 x 7168 x 2048 FLOPs in 226.8 us is 2.12 PFLOP/s,
    42% of the 5 PF fp8 peak; the datasheet's 70% of peak prices it at 140 us. The measured profile is
    within 25% on every row (12% on average) where the datasheet is 30-64% optimistic on every one, and
    within 10% on the issue's example (its m > 256 configuration: 128 x 56 tiles of 256 x 128, no padding;
    before the curves followed the kernel's dispatch by m: 15.8% slow)."""
    table = np.array([r[3] for r in GB300_FP8_ROWS]) * 1e-6
    measured = gemm_seconds(load_profile("gb300-nvl72-vllm"), "fp8", GB300_FP8_ROWS) / table - 1
    datasheet = gemm_seconds(load_profile("datasheet"), "fp8", GB300_FP8_ROWS) / table - 1
    eff = 0.7 * 16384 / (16384 + 32)  # datasheet gemm_eff_max, gemm_m_half
    assert datasheet[0] == pytest.approx((2 * 16384 * 7168 * 2048 / (eff * 5e15) + 2e-6) / 226.78e-6 - 1, abs=1e-4)
    assert np.all(np.abs(measured) < 0.25) and np.mean(np.abs(measured)) < 0.12 and abs(measured[0]) < 0.10
    assert np.all(datasheet < -0.25)


def test_simulate_on_a_measured_profile_never_imports_pyarrow_or_pandas():
    import subprocess
    import sys

    code = ("import sys; from rackplan.cli import main; assert main(['simulate', '--requests', '20', '--json']) == 0; "
            "bad = [m for m in ('pyarrow', 'pandas', 'aiconfigurator_core') if m in sys.modules]; "
            "assert not bad, bad")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("argv", [
    ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "2", "--workload", "tiny-chat",
     "--profile", "b200-vllm", "--quiet"],
    ["whatif", "--plan", "tiny-cpu", "--set", "cpu.overhead_scale=1", "--profile", "b200-vllm", "--workers", "1"],
])
def test_plan_and_whatif_reject_a_profile_of_other_hardware(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "b200" in err and "cpu-local" in err
    assert not list(tmp_path.iterdir())  # no plan or what-if output written


def test_expert_curves_follow_the_kernel_that_runs():
    """Block-scaled FP8 experts (DeepSeek-V3) run the fp8_block MoE kernel, MXFP4 experts (DeepSeek-V4) the
    MXFP4 x MXFP8 one (the tables' w4a8_mxfp4_mxfp8 rows, TrtLlmMxfp4ExpertsModular: not the NVFP4 kernel of
    the fp4 curves); other formats their compute dtype."""
    assert efficiency.kernel_dtype("fp8_block", "fp8") == "fp8_block"
    assert efficiency.kernel_dtype("fp8", "fp8") == "fp8"
    assert efficiency.kernel_dtype("mxfp4", "fp4") == "mxfp4"
    assert efficiency.kernel_dtype("bf16", "bf16") == "bf16"


def test_v3_experts_on_h200_match_the_table_row():
    """DeepSeek-V3 decode on DEP16, 8 sequences per rank (128 tokens over the EP group, balanced):
    aiconfigurator-core 0.12.0 h200_sxm/moe/vllm/0.24.0/moe_perf.parquet, moe_dtype fp8_block,
    kernel vllm_fp8moe_flashinfer_cutlass_flashinferexperts, hidden 7168, inter 2048, 256 experts,
    top-8, ep 16, balanced, num_tokens 128: 0.2575 ms per layer (64 pairs over the rank's 16
    experts). Priced with the per-tensor fp8 curve (moe_dtype fp8, a ModelOpt kernel never measured
    at hidden 7168) it was 1.11 ms, 4.3x the row. Since the MoE rows are priced with the collector's
    balanced routing (opdb_ops.balanced_routing) the refitted fp8_block curve prices it 0.215 ms, 16%
    fast (0.233 ms, 10% fast, before; the class's held-out MAPE 9.5 -> 9.3%): one row of the class's
    scatter, 20% allowed; the wrong-kernel pricing this guards against is 4.3x."""
    model, hw = load_model("deepseek-v3"), load_hardware("h200-sxm")
    lay = Layout(role="decode", dp=16, moe_imbalance=1.0)
    step = decode_step(CostContext(model, hw, lay, load_profile("h200-sxm-vllm")), 8.0, 8.0 * 4608.0)
    per_layer = step.breakdown()["moe.experts"] / model.num_moe_layers
    assert per_layer == pytest.approx(0.2575e-3, rel=0.2)


def test_v4_mhc_on_gb300_matches_the_table_rows():
    """aiconfigurator-core 0.12.0 gb300/mhc/vllm/0.24.0/mhc_module_perf.parquet, hidden 4096, hc_mult 4,
    8 tokens: pre 0.0190 ms, post 0.0086 ms, each row timing both sites of a layer (num_sites 2;
    the collector runs the kernel of every site in one CUDA graph). A V4-Flash decode layer at 8
    tokens runs pre + post at both sites: 0.0276 ms, not twice that."""
    model, hw = load_model("deepseek-v4-flash"), load_hardware("gb300-nvl72")
    step = decode_step(CostContext(model, hw, Layout(role="decode", dp=4), load_profile("gb300-nvl72-vllm")),
                       8.0, 8.0 * 4096.0)
    per_layer = step.breakdown()["mhc"] / model.num_layers
    assert per_layer == pytest.approx(0.0190e-3 + 0.0086e-3, rel=0.15)


def test_describe_counts_op_classes_apart_from_a_bench_fits_latency_errors():
    """A `calibrate --vllm-bench` profile's fit_error holds the op classes' MAPE and the bench's
    |simulated / measured - 1| per latency percentile: the one line names each for what it is."""
    prof = dataclasses.replace(load_profile("datasheet"), hardware="h200-sxm", fit_error={
        "gemm.fp8": 5.0, "attn.core": 7.5, "vllm.ttft_p50": 16.2, "vllm.tpot_p50": 6.4})
    line = prof.describe()
    assert "fit error (MAPE) 5.0-7.5% over 2 op classes" in line
    assert "vllm bench error 6.4-16.2% over 2 latency percentiles" in line
    only_ops = dataclasses.replace(prof, fit_error={"gemm.fp8": 5.0})
    assert "over 1 op classes" in only_ops.describe() and "bench" not in only_ops.describe()
