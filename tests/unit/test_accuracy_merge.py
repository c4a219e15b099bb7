"""benchmarks helpers of the accuracy benchmark: model_overrides merging (accuracy_cases.deep_merge), the sweep CLI."""
import pytest
from bench_scripts import script

from rackplan.accuracy.cases import deep_merge

pytestmark = pytest.mark.unit


def test_named_list_items_merge_by_name():
    base = {"attention": {"kind": "mla", "kv": [{"name": "a", "topk": 2048}, {"name": "b", "topk": 512}]}}
    out = deep_merge(base, {"attention": {"kv": [{"name": "b", "scans_full_topk": True}]}})
    assert out["attention"]["kv"] == [{"name": "a", "topk": 2048}, {"name": "b", "topk": 512, "scans_full_topk": True}]
    assert out["attention"]["kind"] == "mla" and base["attention"]["kv"][1] == {"name": "b", "topk": 512}


def test_other_lists_are_replaced():
    assert deep_merge({"x": [1, 2], "y": {"z": 1}}, {"x": [3]}) == {"x": [3], "y": {"z": 1}}


def test_sweep_rejects_an_unknown_case(capsys):
    accuracy_sweep = script("accuracy_sweep.py")

    assert accuracy_sweep.main(["--case", "no-such-case", "--concurrency", "1"]) == 2
    assert "--case" in capsys.readouterr().err


def test_bench_rates_closed_loop_whole_run_open_loop_window():
    from rackplan.accuracy.predict import rates_per_gpu

    # 1000 requests of 2048 in / 1024 out on 4 GPUs over 200 s: 2,048,000 / 800 = 2,560 and 1,280 per GPU
    m = {"input_tokens": 2_048_000.0, "output_tokens": 1_024_000.0, "duration_s": 200.0, "num_gpus": 4.0,
         "input_tps_per_gpu": 1000.0, "output_tps_per_gpu": 800.0}
    assert rates_per_gpu(m, closed_loop=True) == {"input": 2560.0, "output": 1280.0, "total": 3840.0}
    assert rates_per_gpu(m, closed_loop=False) == {"input": 1000.0, "output": 800.0, "total": 1800.0}


def test_kv_capacity_replicates_the_latent_over_tp():
    """V3.2 FP8 at TP4 on GB300 (vLLM v0.14.1's `auto`: a BF16 latent): every rank holds 61 x (1,152
    latent + 132 indexer) = 78,324 B per token (TP does not divide it), in the HBM (279 GB) its weights
    and reserve leave; with vLLM's fp8_ds_mla latent (--latent-bytes 656): 61 x 788 = 48,068."""
    kv_capacity = script("kv_capacity.py")

    from rackplan.accuracy import cases as accuracy_cases

    (case,) = [c for c in accuracy_cases.load_cases() if c.id == "v32-gb300-mixed-tp4-fp8"]
    r = kv_capacity.row(case, 0.9, None, simulate=False)
    assert r["kv_bytes_per_token"] == 61 * (1152 + 132)
    assert r["reserve_gb"] == pytest.approx(0.1 * 279 + 8192 * 7168 * 32 / 1e9)  # 10% + one step's activations
    assert r["kv_tokens"] * 78_324 / 1e9 + r["weights_gb"] + r["reserve_gb"] == pytest.approx(279.0)
    assert r["sequences"] == pytest.approx(r["kv_tokens"] / 3072)
    assert kv_capacity.row(case, 0.9, 656, simulate=False)["kv_bytes_per_token"] == 61 * (656 + 132)


def test_sweep_override_merges_case_fields():
    # --override deep-merges into the case: the named KV component gets the new field, the rest stays
    accuracy_sweep = script("accuracy_sweep.py")

    from rackplan.accuracy.cases import load_cases

    case = next(c for c in load_cases() if c.id == "v32-gb300-mixed-tp4-fp8")
    out = accuracy_sweep.overridden(case, {"model_overrides": {"attention": {"kv": [
        {"name": "mla_latent_sparse", "padded_heads": False}]}}, "plan": {"num_gpus": 4}})
    assert out.model_overrides["attention"]["kv"] == [
        {"name": "mla_latent_sparse", "scans_full_topk": True, "entry_bytes": 1152, "padded_heads": False}]
    assert out.plan == case.plan and out.workload == case.workload


@pytest.mark.parametrize("override, field", [('{"workload": {}}', "workload"), ("[1]", "JSON mapping"),
                                             ("{oops", "JSON mapping")])
def test_sweep_rejects_bad_overrides(capsys, override, field):
    accuracy_sweep = script("accuracy_sweep.py")

    assert accuracy_sweep.main(["--case", "v32-gb300-mixed-tp2", "--concurrency", "1", "--override", override]) == 2
    assert field in capsys.readouterr().err


def test_decode_ops_prices_cases_side_by_side(capsys):
    # the V3.2 GB300 TP2 and TP4 instances at one sequence per rank: every op of both steps printed
    decode_ops = script("decode_ops.py")

    assert decode_ops.main(["--case", "v32-gb300-mixed-tp2", "--case", "v32-gb300-mixed-tp4-fp8", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "v32-gb300-mixed-tp2 (tp2 dp1) | v32-gb300-mixed-tp4-fp8 (tp4 dp1)" in out
    assert "attn.allreduce" in out and "moe.experts" in out
    assert decode_ops.main(["--case", "no-such-case"]) == 2



def test_decode_ops_prices_a_decode_step_case_at_its_context(capsys):
    # a decode_step case (no plan): its instance at its own context_tokens, the step the accuracy benchmark
    # prices (the case's batch: 1024 per rank, output tok/s per GPU = 1024 / step)
    from rackplan.accuracy.cases import load_cases
    from rackplan.accuracy.predict import predict
    from rackplan.specs import load_profile

    decode_ops = script("decode_ops.py")
    assert decode_ops.main(["--case", "vllm-gb200-decode-dep8", "--batch", "1024"]) == 0
    out = capsys.readouterr().out
    step_ms = float(out.split("/rank: step ")[1].split(" ms")[0])
    case = next(c for c in load_cases() if c.id == "vllm-gb200-decode-dep8")
    assert 1024 / (step_ms / 1e3) == pytest.approx(predict(case, load_profile("gb200-nvl72-vllm"), 0), rel=1e-3)

def test_decode_ops_prices_a_plan_at_several_nvlink_bandwidths(capsys):
    # the reference plan's DEP64 decode at 450 and 900 GB/s: the all-to-all moves with the link, the experts do not
    decode_ops = script("decode_ops.py")

    assert decode_ops.main(["--plan", "v41-flash-gb300-nvl72", "--scaleup-gbps", "450", "900", "--batch", "8"]) == 0
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("   ")}
    assert rows["moe.dispatch"][0] > rows["moe.dispatch"][1]
    assert rows["moe.experts"][0] == rows["moe.experts"][1]
    assert decode_ops.main(["--scaleup-gbps", "450"]) == 2


def test_moe_tp_check_runs_on_the_op_database(capsys):
    pytest.importorskip("aiconfigurator_core")
    moe_tp_check = script("investigations/moe_tp_check.py")

    assert moe_tp_check.main(["--dtype", "nvfp4", "--tokens", "512", "--moe-tp", "4"]) == 0
    assert "moe_tp 4" in capsys.readouterr().out


def test_admission_whatif_rules_agree_with_room_and_differ_without():
    # 4 requests of 2,048 + 1,024 tokens (48 blocks of 64 each at the end). With room for all
    # (4 x 48 blocks) neither rule preempts and both run the same steps. With 96 blocks (two
    # requests' worth) the reserve rule runs two at a time and never preempts; vLLM's admits a third
    # prompt (3 x 32 blocks) and must preempt once the three grow past 96 blocks.
    from dataclasses import replace

    admission_whatif = script("investigations/admission_whatif.py")

    from rackplan.accuracy.cases import load_cases

    case = replace(next(c for c in load_cases() if c.id == "v32-gb300-mixed-tp4-fp4"), num_requests=4)
    roomy = [admission_whatif.run(case, 4 * 3072, rule) for rule in ("reserve", "vllm")]
    assert roomy[0]["steps"] == roomy[1]["steps"] and roomy[0]["preemptions"] == roomy[1]["preemptions"] == 0
    assert roomy[0]["out_tps_per_gpu"] == pytest.approx(roomy[1]["out_tps_per_gpu"])
    tight = {rule: admission_whatif.run(case, 2 * 3072, rule) for rule in ("reserve", "vllm")}
    assert tight["reserve"]["preemptions"] == 0 and tight["vllm"]["preemptions"] > 0
    assert tight["vllm"]["recomputed_tokens"] >= 2048 * tight["vllm"]["preemptions"]
    assert tight["reserve"]["seconds"] > roomy[0]["seconds"]  # two at a time: more steps


@pytest.mark.parametrize("case_id, entry, heads", [
    ("v32-gb300-mixed-tp4-fp8", 1152, 128), ("v32-gb300-prefill-tp4-fp8", 1152, 128),  # FP8 checkpoint: BF16 cache
    ("v32-gb300-mixed-tp4-fp4", 656, 64), ("v32-gb300-mixed-tp2", 656, 64),  # NVFP4 checkpoint: fp8_ds_mla
])
def test_v32_cases_decode_on_the_cache_vllm_0141_gives_them(case_id, entry, heads):
    """vLLM v0.14.1 resolves `--kv-cache-dtype auto` to BF16 for the FP8 checkpoint (cases' header):
    8 sequences at context 4,096 read 2,048 latents of 1,152 B (576 BF16) and run the sparse prefill
    kernel's 128 heads at TP4; the NVFP4 rows' fp8_ds_mla reads 656 B on the decode kernel's 64. The
    indexer adds 4,096 keys x 132 B and 64 x 128 x 4,096 MACs per sequence either way."""
    from rackplan.accuracy.cases import load_cases, resolve
    from rackplan.sim.cost import attention as attn
    from rackplan.specs import load_profile

    case = next(c for c in load_cases() if c.id == case_id)
    sc = resolve(case)
    comp = sc.model.attention.kv[0]
    tp = sc.plan.aggregated[0].tp
    _, flops, nbytes = attn.decode_component(sc.model, comp, 8.0, 8.0 * 4096, 1.0, tp, 1, sc.hw,
                                             load_profile("datasheet"))
    assert nbytes == pytest.approx(8 * 2048 * entry + 8 * 4096 * 132)
    assert flops == pytest.approx(2 * 8 * heads * 2048 * 1088 + 2 * 8 * 64 * 128 * 4096)
