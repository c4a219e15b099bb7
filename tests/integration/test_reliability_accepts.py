"""Issue 36, causes 2 (the plan's name from --out), 5 (bounds), 6 (unused flags), 7 (bench JSON),
9 (error wording), 10 (decode batch) and 11 (microbench on a CPU-only torch): what was accepted
silently, or failed with a traceback or the wrong file's name, is one line naming the user's file
or flag and the field, exit 2, nothing written.
"""
import json
import re
from pathlib import Path

import pytest
import yaml

from rackplan.cli import main

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BENCH = json.loads((ROOT / "tests/data/vllm_bench_detailed.json").read_text())
PLAN = ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
        "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "1", "--quiet", "--sim-requests", "8"]
FIT = ["calibrate", "--plan", "tiny-cpu", "--out", "fit.yaml", "--vllm-bench", "b.json"]
CHECK = ["validate", "--plan", "tiny-cpu", "--vllm-bench", "b.json"]


def _bench(**changes) -> str:
    """The detailed bench of tests/data with request 0's `key` set to `value` in each per-request list."""
    data = json.loads(json.dumps(BENCH))
    for key, value in changes.items():
        data[key][0] = value
    return json.dumps(data)


def _plan(**predicted) -> str:
    doc = yaml.safe_load((ROOT / "configs/plans/tiny-cpu.yaml").read_text())
    doc["predicted"] = predicted
    return yaml.safe_dump(doc)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


ONE_MILLION = ["--set", "hardware.nvlink_gbps=" + ",".join(map(str, range(1, 1001))),
               "--set", "cpu.overhead_scale=" + ",".join(str(x / 1000) for x in range(1, 1001))]
CASES = [  # (cause, files, argv, what the one line must name)
    ("5 plan --gpus 100000", {}, PLAN[:5] + ["--gpus", "100000"] + PLAN[7:], "65,536"),
    ("5 plan --gpus 2^63", {}, PLAN[:5] + ["--gpus", str(2**63)] + PLAN[7:], "--gpus"),
    ("5 whatif 10^6 combinations", {}, ["whatif", "--plan", "tiny-cpu"] + ONE_MILLION, "1,024 combinations"),
    ("5 whatif 1,025 combinations", {}, ["whatif", "--plan", "tiny-cpu", "--set", "hardware.nvlink_gbps="
                                         + ",".join(map(str, range(1, 1026)))], "1,025 combinations"),
    ("10 whatif --decode-batch 100000000", {}, ["whatif", "--plan", "tiny-cpu", "--decode-batch", "100000000"],
     "at most 16"),
    ("10 whatif --decode-batch 17", {}, ["whatif", "--plan", "tiny-cpu", "--decode-batch", "17"], "at most 16"),
    ("6 plan --objective throughput --rate", {}, PLAN + ["--objective", "throughput", "--rate", "3"], "--rate"),
    ("6 plan --rate (throughput by default)", {}, PLAN + ["--rate", "3"], "--rate"),
    ("6 whatif --replan --rate", {}, ["whatif", "--plan", "tiny-cpu", "--replan", "--rate", "3"], "--rate"),
    ("7 negative TTFT (calibrate)", {"b.json": _bench(ttfts=-0.05)}, FIT, "b.json: field 'ttfts[0]'"),
    ("7 negative TTFT (validate)", {"b.json": _bench(ttfts=-0.05)}, CHECK, "b.json: field 'ttfts[0]'"),
    ("7 latency before the first token", {"b.json": _bench(latencies=0.01)}, FIT, "b.json: field 'latencies[0]'"),
    ("7 NaN start time", {"b.json": _bench(start_times=float("nan"))}, FIT, "b.json: field 'start_times[0]'"),
    ("7 input length 1e15", {"b.json": _bench(input_lens=10**15)}, FIT, "b.json: field 'input_lens[0]'"),
    ("7 prompt beyond the KV capacity", {"b.json": _bench(input_lens=10**8)}, FIT,
     "b.json: field 'input_lens + output_lens'"),
    ("9 negative predicted.request_rate (whatif)", {"p.yaml": _plan(request_rate=-5.0)},
     ["whatif", "--plan", "p.yaml"], "p.yaml: field 'predicted.request_rate'"),
    ("9 negative predicted.request_rate (simulate)", {"p.yaml": _plan(request_rate=-5.0)},
     ["simulate", "--plan", "p.yaml"], "p.yaml: field 'predicted.request_rate'"),
    ("9 zero predicted.sim_requests", {"p.yaml": _plan(request_rate=2.0, sim_requests=0.0)},
     ["whatif", "--plan", "p.yaml"], "p.yaml: field 'predicted.sim_requests'"),
    pytest.param("11 microbench --device cuda", {}, ["calibrate", "--microbench", "--device", "cuda"], "--device",
                 marks=pytest.mark.skipif(_cuda(), reason="this torch sees a CUDA device")),
]


def _case(c):
    return c if not hasattr(c, "values") else c.values


@pytest.mark.parametrize("name,files,argv,needle", CASES, ids=[_case(c)[0] for c in CASES])
def test_refused_in_one_line(tmp_path, capsys, monkeypatch, name, files, argv, needle):
    monkeypatch.setenv("RACKPLAN_CACHE_DIR", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    monkeypatch.chdir(tmp_path)
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("rackplan: error:") and needle in err, err
    assert "rackplan-bench-" not in err and ".tmp-" not in err  # never a temporary's name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)  # nothing written


@pytest.mark.parametrize("out", ["x" * 200 + ".yaml", "my plan\n; rm -rf ~.yaml", "--.yaml"],
                         ids=["200-character file name", "newline and shell", "dashes only"])
def test_plan_name_from_the_out_file_is_safe_and_bounded(tmp_path, capsys, monkeypatch, out):
    from rackplan.sim.search.command import NAME_MAX
    from rackplan.specs import load_plan

    monkeypatch.setenv("RACKPLAN_CACHE_DIR", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    monkeypatch.chdir(tmp_path)
    assert main(PLAN + [f"--out={out}"]) == 0, capsys.readouterr().err
    name = load_plan(tmp_path / out).name
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) and len(name) <= NAME_MAX, name
    if len(out) > NAME_MAX + 5:  # cut with a stable hash of the whole stem: other long names stay apart
        assert name.startswith("x" * 20) and re.search(r"-[0-9a-f]{8}$", name), name
