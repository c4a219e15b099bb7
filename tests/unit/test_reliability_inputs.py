"""Issue 18: every bad input named in the probe is one line naming the field, exit 2, no file left.

Each case is (name, files to write, argv, what the one-line error must mention). Files are written
into the test's folder, whose contents must be unchanged afterwards (no partial output).
"""
import json
from pathlib import Path

import pytest
from conftest import main_in

from rackplan.calibration.synthetic import synth_records
from rackplan.specs import load_plan, load_profile

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PLAN_TEXT = (ROOT / "configs/plans/tiny-cpu.yaml").read_text()
HW_TEXT = (ROOT / "configs/hardware/cpu-local.yaml").read_text()
PROFILE_TEXT = (ROOT / "configs/profiles/datasheet.yaml").read_text()
BENCH = json.loads((ROOT / "tests/data/vllm_bench_summary.json").read_text())
A2A_HEAD = "system,kernel,ep,phase,tokens,latency_us,dtype\n"


def _records(mutate=None, cut=None) -> str:
    recs = synth_records(load_plan("tiny-cpu"), load_profile("cpu-local"), repeats=1)
    if mutate:
        mutate(recs)
    lines = [json.dumps(r) for r in recs]
    return "\n".join(lines[:cut] if cut else lines) + "\n"


def _nan_ctx(recs):
    recs[0]["shape"]["ctx_sum"] = float("nan")


def _neg_batch(recs):
    recs[0]["shape"]["batch"] = -4


def _deep(n: int) -> str:
    return "name: p\nx: " + "[" * n + "]" * n + "\n"


CALIB = ["calibrate", "--plan", "tiny-cpu", "--out", "fit.yaml"]
VALID = ["validate", "--plan", "tiny-cpu"]
PLAN_FAST = ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
             "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "1", "--quiet", "--sim-requests", "8"]
EXEC = ["execute", "--plan", "tiny-cpu", "--steps", "1", "--out", "run"]

CASES = [
    # tracebacks where a one-line error is promised
    ("random bytes plan", {"p.yaml": bytes(range(256)) * 4}, ["simulate", "--plan", "p.yaml"], "encoding"),
    ("latin-1 plan", {"p.yaml": "name: caf\xe9\n".encode("latin-1")}, ["simulate", "--plan", "p.yaml"], "UTF-8"),
    ("plan nested 3000 deep", {"p.yaml": _deep(3000)}, ["simulate", "--plan", "p.yaml"], "nesting"),
    ("profile just a name", {"prof.yaml": "name: p\n"},
     ["simulate", "--plan", "tiny-cpu", "--profile", "prof.yaml", "--requests", "4"], "a2a"),
    ("profile op_fixed_s inf", {"prof.yaml": PROFILE_TEXT.replace("name: datasheet", "name: p\nop_fixed_s: .inf")},
     ["simulate", "--plan", "tiny-cpu", "--profile", "prof.yaml", "--requests", "4"], "op_fixed_s"),
    ("hardware hbm_bytes inf", {"hw.yaml": HW_TEXT.replace("hbm_bytes: 8.0e9", "hbm_bytes: .inf"),
                                "p.yaml": PLAN_TEXT.replace("hardware: cpu-local", "hardware: hw.yaml")},
     ["simulate", "--plan", "p.yaml", "--requests", "4"], "hbm_bytes"),
    ("prompt longer than KV capacity", {"w.yaml": "name: w\narrival: {kind: poisson, rate: 1}\n"
                                        "isl: {kind: fixed, value: 100000000}\nosl: {kind: fixed, value: 4}\n"},
     ["simulate", "--plan", "tiny-cpu", "--workload", "w.yaml", "--requests", "2"], "isl"),
    ("simulate --requests -5", {}, ["simulate", "--plan", "tiny-cpu", "--requests", "-5"], "--requests"),
    ("simulate --seed -1", {}, ["simulate", "--plan", "tiny-cpu", "--seed", "-1"], "--seed"),
    ("plan --rate -5", {}, PLAN_FAST + ["--rate", "-5"], "--rate"),
    ("plan --sim-requests -5", {}, PLAN_FAST + ["--sim-requests", "-5"], "--sim-requests"),
    ("plan --out under a file", {"FILE": "x"}, PLAN_FAST + ["--out", "FILE/p.yaml"], "--out"),
    ("plan --report under a file", {"FILE": "x"}, PLAN_FAST + ["--out", "p.yaml", "--report", "FILE/rep"],
     "--report"),
    ("whatif value fast", {}, ["whatif", "--plan", "tiny-cpu", "--set", "hardware.nvlink_gbps=fast"],
     "nvlink_gbps"),
    ("whatif empty value", {}, ["whatif", "--plan", "tiny-cpu", "--set", "hardware.nvlink_gbps=900,,1800"],
     "nvlink_gbps"),
    ("whatif top_k many", {}, ["whatif", "--plan", "tiny-cpu", "--set", "model.moe.top_k=many"], "top_k"),
    ("whatif a whole section", {}, ["whatif", "--plan", "tiny-cpu", "--set", "model.moe=4"], "moe"),
    ("calibrate NaN ctx_sum", {"m.jsonl": _records(_nan_ctx)}, CALIB + ["--measurements", "m.jsonl"], "ctx_sum"),
    ("calibrate negative batch", {"m.jsonl": _records(_neg_batch)}, CALIB + ["--measurements", "m.jsonl"],
     "batch"),
    ("vllm bench holding 5", {"b.json": "5"}, CALIB + ["--vllm-bench", "b.json"], "b.json"),
    ("bench num_prompts many", {"b.json": json.dumps({**BENCH, "num_prompts": "many"})},
     CALIB + ["--vllm-bench", "b.json"], "num_prompts"),
    ("bench num_prompts -5", {"b.json": json.dumps({**BENCH, "num_prompts": -5})},
     CALIB + ["--vllm-bench", "b.json"], "num_prompts"),
    ("a2a row ep=eight", {"t.csv": A2A_HEAD + "h800,low_latency,eight,dispatch,128,77,fp8\n"},
     ["calibrate", "--a2a-table", "t.csv", "--hardware", "h800", "--out", "fit.yaml"], "ep"),
    ("calibrate --out under a file", {"FILE": "x", "t.csv": A2A_HEAD + "h800,low_latency,8,dispatch,128,77,fp8\n"},
     ["calibrate", "--a2a-table", "t.csv", "--hardware", "h800", "--out", "FILE/fit.yaml"], "--out"),
    ("microbench on a tpu", {}, ["calibrate", "--microbench", "--device", "tpu"], "--device"),
    ("execute --timeout nan", {}, EXEC + ["--timeout", "nan"], "--timeout"),
    ("execute --timeout inf", {}, EXEC + ["--timeout", "inf"], "--timeout"),
    ("execute --out under a file", {"FILE": "x"}, EXEC[:-1] + ["FILE/run"], "--out"),
    # accepted silently before
    ("duplicate YAML keys", {"p.yaml": PLAN_TEXT + "num_gpus: 8\n"}, ["simulate", "--plan", "p.yaml"], "num_gpus"),
    ("ttft_p90_s inf", {"p.yaml": PLAN_TEXT.replace("ttft_p90_s: 1.0", "ttft_p90_s: .inf")},
     ["simulate", "--plan", "p.yaml", "--requests", "4"], "ttft_p90_s"),
    ("plan --ttft-p90 1e999s", {}, PLAN_FAST + ["--ttft-p90", "1e999s"], "--ttft-p90"),
    ("simulate --requests 0", {}, ["simulate", "--plan", "tiny-cpu", "--requests", "0"], "--requests"),
    ("trace with zero lengths", {"t.jsonl": '{"timestamp": 0, "input_length": 0, "output_length": 3}\n',
                                 "w.yaml": "name: w\narrival: {kind: trace}\nisl: {kind: trace}\nosl: {kind: trace}"
                                 "\ntrace: t.jsonl\n"},
     ["simulate", "--plan", "tiny-cpu", "--workload", "w.yaml"], "input_length"),
    ("trace with negative lengths", {"t.jsonl": '{"timestamp": 0, "input_length": 5, "output_length": -3}\n',
                                     "w.yaml": "name: w\narrival: {kind: trace}\nisl: {kind: trace}\n"
                                     "osl: {kind: trace}\ntrace: t.jsonl\n"},
     ["simulate", "--plan", "tiny-cpu", "--workload", "w.yaml"], "output_length"),
    ("a2a kernel sideways", {"t.csv": A2A_HEAD + "h800,sideways,8,dispatch,128,77,fp8\n"
                             "h800,sideways,8,dispatch,256,99,fp8\n"},
     ["calibrate", "--a2a-table", "t.csv", "--hardware", "h800", "--out", "fit.yaml"], "kernel"),
    ("measurements cut mid-step (calibrate)", {"m.jsonl": _records(cut=-3)}, CALIB + ["--measurements", "m.jsonl"],
     "step"),
    ("measurements cut mid-step (validate)", {"m.jsonl": _records(cut=-3)}, VALID + ["--measurements", "m.jsonl"],
     "step"),
    ("validate NaN field under --max-mape 1000", {"m.jsonl": _records(_nan_ctx)},
     VALID + ["--measurements", "m.jsonl", "--max-mape", "1000"], "ctx_sum"),
    ("validate --max-mape nan", {"m.jsonl": _records()}, VALID + ["--measurements", "m.jsonl", "--max-mape", "nan"],
     "--max-mape"),
    ("execute --ranks 12 on a 4-GPU plan", {}, EXEC + ["--ranks", "12"], "--ranks"),
    ("execute --max-moe-layers -1", {}, EXEC + ["--max-moe-layers", "-1"], "--max-moe-layers"),
    ("16 experts on DEP3", {"p.yaml": PLAN_TEXT.replace("dp: 2\n    max_tokens_per_step: 256",
                                                          "dp: 3\n    max_tokens_per_step: 256")
                           .replace("num_gpus: 4", "num_gpus: 5")}, EXEC[:2] + ["p.yaml"] + EXEC[3:],
     "redundant_experts"),
    ("simulate 10 million requests", {}, ["simulate", "--plan", "tiny-cpu", "--requests", "10000000"],
     "--memory-gib"),
    ("whatif 10 million requests", {}, ["whatif", "--plan", "tiny-cpu", "--num-requests", "10000000"], "--memory-gib"),
    ("plan 10 million requests", {}, PLAN_FAST + ["--sim-requests", "10000000"], "--memory-gib"),
    # checked too late
    ("execute an HBM misfit", {"p.yaml": PLAN_TEXT.replace("model: tiny-moe", "model: deepseek-v3")},
     EXEC[:2] + ["p.yaml"] + EXEC[3:], "fits in HBM"),
    ("execute --warmup -3", {}, EXEC + ["--warmup", "-3"], "--warmup"),
]


def _run(tmp_path, capsys, files, argv):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    code = main_in(tmp_path, argv)
    after = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    return code, capsys.readouterr().err.strip(), before, after


def assert_refused_in_one_line(tmp_path, capsys, monkeypatch, files, argv, needle):
    """`rackplan argv` in a folder holding `files`: exit 2, one stderr line naming `needle`, no file touched."""
    monkeypatch.setenv("RACKPLAN_CACHE_DIR", str(tmp_path.parent / "cache"))
    code, err, before, after = _run(tmp_path, capsys, files, argv)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("rackplan: error:"), err
    assert needle in err, err
    assert after == before  # nothing written, nothing changed


@pytest.mark.parametrize("files,argv,needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, files, argv, needle):
    assert_refused_in_one_line(tmp_path, capsys, monkeypatch, files, argv, needle)


def test_validate_gate_fails_on_nan():
    from rackplan.calibration.validate_command import gate

    nan = float("nan")
    assert list(gate({"step decode": nan}, 1000.0)) == ["step decode"]  # a NaN MAPE fails, never passes
    assert gate({"step decode": 5.0}, 10.0) == {}
    assert list(gate({"step decode": 12.0, "x": 1.0, "y": nan}, 10.0)) == ["step decode", "y"]


def test_request_budget_scales_with_memory():
    from rackplan.sim.simulator import BYTES_PER_REQUEST, check_request_budget
    from rackplan.specs import SpecError

    check_request_budget(1_000_000)  # 1.1 GB: inside the default 4 GiB
    with pytest.raises(SpecError, match="--memory-gib"):
        check_request_budget(10_000_000)
    check_request_budget(10_000_000, memory_gib=10_000_000 * BYTES_PER_REQUEST / 2**30 + 1)
