"""The hostile-input sweep of 2026-12-02 (benchmarks/RESULTS.md, badin): flags that would do nothing
in the mode that runs are refused as one line naming the flag, exit 2, before any work or file;
an error printed after triton loaded stays one line (no nanobind leak report at exit)."""
import gc
import subprocess
import sys

import pytest

from rackplan.cli import freeze_at_exit

from .test_reliability_inputs import CALIB, EXEC, PLAN_FAST, VALID, _records, assert_refused_in_one_line

pytestmark = pytest.mark.unit
OPDB = ["--op-database", "h200_sxm", "--hardware", "h200-sxm", "--op-database-root", "nowhere"]
A2A = {"t.csv": "system,kernel,ep,phase,tokens,latency_us,dtype\nh800,low_latency,8,dispatch,128,77,fp8\n"}
WL = "name: w\narrival: {kind: poisson, rate: 8}\nisl: {kind: fixed, value: 16}\nosl: {kind: fixed, value: 4}\n"
TRACED = "name: w\narrival: {kind: trace}\nisl: {kind: trace}\nosl: {kind: trace}\n"
SIM_W = ["simulate", "--plan", "tiny-cpu", "--requests", "4", "--workload", "w.yaml"]
SERVE = ["execute", "--plan", "tiny-cpu", "--workload", "tiny-chat", "--requests", "2", "--out", "run"]

CASES = [
    # execute: each mode's flags only in that mode, and something left to run
    ("execute --requests without --workload", {}, EXEC + ["--requests", "3"], "--requests"),
    ("execute --paced without --workload", {}, EXEC + ["--paced"], "--paced"),
    ("execute skips both roles", {}, EXEC + ["--skip-prefill", "--skip-decode"], "--skip-decode"),
    ("execute --skip-decode when serving", {}, SERVE + ["--skip-decode"], "--skip-decode"),
    ("execute --step-gap when serving", {}, SERVE + ["--step-gap", "0.5"], "--step-gap"),
    ("execute --acceptance-rate without speculation", {}, EXEC + ["--acceptance-rate", "0.5"], "--acceptance-rate"),
    ("execute --model that does not fit the plan's hardware", {}, EXEC + ["--model", "deepseek-v3"], "--model"),
    # the knob audit (reliab10): flags with a default that did nothing in the mode that ran
    ("execute --steps when serving", {}, SERVE + ["--steps", "3"], "--steps"),
    ("execute --no-cuda-graphs on cpu", {}, EXEC + ["--no-cuda-graphs"], "--no-cuda-graphs"),
    ("execute --no-fp8 on cpu", {}, EXEC + ["--no-fp8"], "--no-fp8"),
    ("calibrate --framework without --op-database", {"m.jsonl": _records()},
     CALIB + ["--measurements", "m.jsonl", "--framework", "sglang"], "--framework"),
    ("calibrate --device without --microbench", {"m.jsonl": _records()},
     CALIB + ["--measurements", "m.jsonl", "--device", "cuda"], "--device"),
    ("validate --framework without --op-database", {"m.jsonl": _records()},
     VALID + ["--measurements", "m.jsonl", "--framework", "vllm"], "--framework"),
    # calibrate: every input feeds the fit that runs
    ("calibrate --op-database with --measurements", {"m.jsonl": _records()},
     ["calibrate", "--out", "fit.yaml", "--measurements", "m.jsonl"] + OPDB, "--measurements"),
    ("calibrate --op-database with --plan", {}, ["calibrate", "--plan", "tiny-cpu", "--out", "fit.yaml"] + OPDB,
     "--plan"),
    ("calibrate --version without --op-database", {"m.jsonl": _records()},
     CALIB + ["--measurements", "m.jsonl", "--version", "0.14.0"], "--version"),
    ("calibrate --host-probe without --host-sweep", {"m.jsonl": _records()},
     CALIB + ["--measurements", "m.jsonl", "--host-probe"], "--host-probe"),
    ("calibrate --host-sweep without --measurements", A2A,
     CALIB + ["--a2a-table", "t.csv", "--host-sweep"], "--host-sweep"),
    ("calibrate --holdout without --measurements", A2A, CALIB + ["--a2a-table", "t.csv", "--holdout", "decode:4"],
     "--holdout"),
    ("calibrate --out-hardware without --microbench", {"m.jsonl": _records()},
     CALIB + ["--measurements", "m.jsonl", "--out-hardware", "hw.yaml"], "--out-hardware"),
    # validate: --op-database compares profiles with tables; a plan's inputs do nothing there
    ("validate --op-database with --measurements", {"m.jsonl": _records()},
     ["validate", "--measurements", "m.jsonl"] + OPDB, "--measurements"),
    ("validate --op-database with --raw-ops", {}, ["validate", "--raw-ops"] + OPDB, "--raw-ops"),
    ("validate --op-database with --max-mape", {}, ["validate", "--max-mape", "5"] + OPDB, "--max-mape"),
    ("validate --hardware without --op-database", {"m.jsonl": _records()},
     VALID + ["--measurements", "m.jsonl", "--hardware", "h200-sxm"], "--hardware"),
    # plan: simulator knobs without the simulator
    ("plan --no-simulate with --sim-requests", {}, PLAN_FAST + ["--no-simulate"], "--sim-requests"),
    ("plan --no-simulate with --seed", {}, PLAN_FAST[:-2] + ["--no-simulate", "--seed", "3"], "--seed"),
    # workload: a field its kind does not read; an empty trace path (was an AttributeError)
    ("fixed lengths with low", {"w.yaml": WL.replace("value: 16}", "value: 16, low: 3}")}, SIM_W, "isl.low"),
    ("uniform lengths with mean", {"w.yaml": WL.replace("{kind: fixed, value: 4}", "{kind: uniform, low: 2, high: 6, "
                                                       "mean: 4}")}, SIM_W, "osl.mean"),
    ("trace lengths with max", {"w.yaml": TRACED.replace("isl: {kind: trace}", "isl: {kind: trace, max: 9}") +
                                "trace: t.jsonl\n"}, SIM_W, "isl.max"),
    ("poisson with concurrency", {"w.yaml": WL.replace("rate: 8}", "rate: 8, concurrency: 4}")}, SIM_W,
     "arrival.concurrency"),
    ("poisson with time_scale", {"w.yaml": WL.replace("rate: 8}", "rate: 8, time_scale: 0.5}")}, SIM_W,
     "arrival.time_scale"),
    ("trace path empty", {"w.yaml": TRACED + "trace: ''\n"}, SIM_W, "trace"),
    ("trace that nothing reads", {"w.yaml": WL + "trace: t.jsonl\n"}, SIM_W, "field 'trace'"),
    ("calibrate --holdout -4", {"m.jsonl": _records()}, CALIB + ["--measurements", "m.jsonl", "--holdout", "decode:-4"],
     "--holdout"),
    ("whatif unknown hardware key lists the aliases", {}, ["whatif", "--plan", "tiny-cpu", "--set",
                                                          "hardware.nvlink_gb=1"], "nvlink_gbps"),
    # outputs: an empty path is not the working folder; --report and --out apart (was IsADirectoryError)
    ("execute --out ''", {}, EXEC[:-1] + [""], "--out"),
    ("simulate --profile ''", {}, ["simulate", "--plan", "tiny-cpu", "--profile", ""], "--profile"),
    ("validate --measurements ''", {}, VALID + ["--measurements", ""], "--measurements"),
    ("plan --report at the --out file", {}, PLAN_FAST + ["--out", "p.yaml", "--report", "p.yaml"], "--report"),
    # whatif: a key set twice would silently drop the first --set's values
    ("whatif key set twice", {}, ["whatif", "--plan", "tiny-cpu", "--set", "hardware.hbm_bw=1e10",
                                  "--set", "hardware.hbm_bw=2e10"], "hardware.hbm_bw"),
]


@pytest.mark.parametrize("files,argv,needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_unused_flag_is_one_line(tmp_path, capsys, monkeypatch, files, argv, needle):
    assert_refused_in_one_line(tmp_path, capsys, monkeypatch, files, argv, needle)


@pytest.mark.parametrize("triton_loaded,frozen", [(False, True), (True, False)])
def test_freeze_at_exit_skips_triton(monkeypatch, triton_loaded, frozen):
    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))
    if triton_loaded:
        monkeypatch.setitem(sys.modules, "triton", object())
    else:
        monkeypatch.delitem(sys.modules, "triton", raising=False)
    freeze_at_exit()
    assert bool(calls) == frozen


def test_exit_after_triton_is_quiet():
    """The process-level symptom: the CLI's exit hook with triton loaded prints nothing."""
    pytest.importorskip("triton")
    code = ("import atexit, triton.language\nfrom rackplan.cli import freeze_at_exit\n"
            "atexit.register(freeze_at_exit)\n")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stderr
    assert "nanobind" not in err, err


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_outputs_follow_the_umask(tmp_path, umask):
    """Outputs staged through mkstemp / mkdtemp get the modes a plain write would (were 0600 / 0700)."""
    import os

    from rackplan.executor.records import write_jsonl
    from rackplan.outputs import Outputs
    from rackplan.specs import dump_yaml, load_workload

    old = os.umask(umask)
    try:
        with Outputs() as out:
            write_jsonl([{"a": 1}], out.folder(tmp_path / "run") / "measurements.jsonl")
        dump_yaml(load_workload("tiny-chat"), tmp_path / "w.yaml")
    finally:
        os.umask(old)
    mode = {p.name: p.stat().st_mode & 0o777 for p in [tmp_path / "run", tmp_path / "run/measurements.jsonl",
                                                        tmp_path / "w.yaml"]}
    assert mode == {"run": 0o777 & ~umask, "measurements.jsonl": 0o666 & ~umask, "w.yaml": 0o666 & ~umask}


def test_trace_workload_rate_replaced_in_process():
    """The loader's rule only: the planner's verification swaps a trace workload's arrival for Poisson
    in-process (sim/search/verify.py at_rate) and keeps its trace lengths."""
    import dataclasses

    from rackplan.specs import Arrival, LengthDist, Workload

    wl = Workload("w", Arrival("trace"), LengthDist("trace"), LengthDist("fixed", value=4), trace="t.jsonl")
    swapped = dataclasses.replace(wl, arrival=Arrival("poisson", rate=2.0), isl=LengthDist("fixed", value=8))
    assert swapped.trace == "t.jsonl"  # no trace reader left; still a valid Workload


def test_execute_rendezvous_timeout_is_one_line(tmp_path):
    """--timeout shorter than the c10d store takes to set up: one line naming --timeout (was a 33-line
    C++ backtrace), non-zero exit, nothing written. A subprocess: c10d logs to fd 2, past capsys."""
    argv = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", "tiny-cpu", "--device", "cpu",
            "--timeout", "0.001", "--out", "run"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "--timeout 0.001" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_full_size_plan_on_cpu_needs_model(tmp_path, capsys, monkeypatch):
    """A rack plan's real shapes on CPU ranks: refused naming --model when their weights exceed the
    machine's memory (was: ranks swapping until --timeout). The machine's size is fixed at 64 GB here
    so the case does not depend on the host that runs the tests."""
    from rackplan.executor import hostmem

    monkeypatch.setattr(hostmem, "physical_memory_bytes", lambda: 64e9)
    argv = ["execute", "--plan", "v41-flash-gb300-nvl72", "--device", "cpu", "--ranks", "2", "--out", "run"]
    assert_refused_in_one_line(tmp_path, capsys, monkeypatch, {}, argv, "--model tiny-moe")


def test_tiny_model_fits_host_memory():
    from rackplan.executor.hostmem import check_host_memory, rank_weight_bytes
    from rackplan.executor.topology import benchmark_instances
    from rackplan.specs import load_model, load_plan

    plan = load_plan("v41-flash-gb300-nvl72")
    insts = benchmark_instances(plan)
    tiny, full = load_model("tiny-moe"), load_model(plan.model)
    check_host_memory(tiny, insts, 2, None, None)  # the README's rack plan on CPU with --model tiny-moe
    capped = rank_weight_bytes(full, insts[-1].layout, None, 1)
    assert capped < rank_weight_bytes(full, insts[-1].layout, None, None)  # --max-moe-layers builds fewer


@pytest.mark.parametrize("command,field", [("models", "source"), ("hardware", "host_cpu")])
def test_listing_json(capsys, command, field):
    """`rackplan models|hardware --json` printed the table (the flag did nothing); now every spec's fields."""
    import json

    from rackplan.cli import main
    from rackplan.specs import available

    assert main([command, "--json"]) == 0
    specs = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in specs] == available(command) and all(field in s for s in specs)

