"""`rackplan execute --workload` (serving mode) end to end on tiny-cpu: every request finishes with
osl tokens equal to a single-process reference (so the KV really moved from the prefill rank to
the decode rank), records are valid, and a fault during serving fails the run naming the rank."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rackplan.executor.model import Batch, Model, layer_ids
from rackplan.executor.parallel import make_ep_group
from rackplan.executor.schema import read_measurements
from rackplan.executor.serve import prompt_tokens
from rackplan.executor.timing import NullTimer
from rackplan.sim.routing import read_expert_trace
from rackplan.specs import load_model

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "configs" / "plans" / "tiny-cpu.yaml"
SPEC = load_model("tiny-moe")


def _serve(out: Path, workload: str, *extra, env=None, timeout=90):
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(PLAN), "--device", "cpu",
           "--workload", workload, "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _reference(rid: int, isl: int, osl: int, first: bool = False) -> list[int]:
    """Greedy tokens of one request in one process holding every expert (prompt at once): the osl
    after the prompt's own sampled token (`first`: that token alone)."""
    model = Model(SPEC, 0, "cpu", torch.float32, make_ep_group(None, 0, 1, SPEC.moe.num_experts),
                  layer_ids(SPEC, "decode"))
    cache = model.kv_cache(1, isl + osl + 1)
    logits = model.forward(Batch.prefill(prompt_tokens(0, rid, isl, SPEC.vocab_size), [isl]), cache, NullTimer())
    tok, out = int(logits.argmax(-1)), []
    if first:
        return [tok]
    for i in range(osl):
        tok = int(model.forward(Batch.decode(torch.tensor([tok]), [isl + i]), cache, NullTimer()).argmax(-1))
        out.append(tok)
    return out


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    out = tmp_path_factory.mktemp("serve")
    res = _serve(out, "tiny-chat", "--requests", "10")
    assert res.returncode == 0, res.stderr
    return out, read_measurements(out / "measurements.jsonl")


def test_every_request_finishes_with_valid_latencies(chat):
    _, recs = chat
    reqs = sorted((r for r in recs if r["op"] == "request"), key=lambda r: r["step"])
    assert [r["step"] for r in reqs] == list(range(10))
    for r in reqs:
        assert r["role"] == "serve" and 0 < r["ttft_s"] <= r["e2e_s"] and r["tpot_s"] >= 0
        assert len(r["output_tokens"]) == r["osl"]
        assert r["first_token_s"] >= r["prefill_done_s"] >= r["arrival_s"]  # TTFT includes the hand-off
    arrivals = [r["arrival_s"] for r in reqs]
    assert arrivals == sorted(arrivals) and arrivals[-1] > 0.1  # wall-clock arrivals, not all at once


def test_kv_moved_between_processes(chat):
    """Checksums of the sent and received KV agree, some hand-offs cross ranks, and the decode
    ranks' tokens equal the single-process reference."""
    _, recs = chat
    reqs = [r for r in recs if r["op"] == "request"]
    assert all(r["kv_checksum_sent"] == r["kv_checksum_recv"] for r in reqs)
    assert all(r["kv_bytes"] == 4 * r["isl"] * 80 * 4 for r in reqs)  # layers x tokens x (64+16) x fp32
    assert any(r["shape"]["prefill_rank"] != r["shape"]["decode_rank"] for r in reqs)
    for r in reqs[:4]:
        assert r["output_tokens"] == _reference(r["step"], r["isl"], r["osl"])


def test_step_records_carry_the_calibration_shape(chat):
    out, recs = chat
    steps = [r for r in recs if r["op"] != "request" and r["role"] != "serve"]
    assert {r["role"] for r in steps} == {"prefill", "decode"}
    ticks = [r for r in recs if r["role"] == "serve" and r["op"] == "host"]  # engine-loop time per tick
    assert ticks and all(r["shape"]["prefill_steps"] + r["shape"]["decode_steps"] >= 1 for r in ticks)
    keys = {"batch", "tokens", "ctx_sum", "tokens_global", "expert_tokens", "budget", "max_batch"}
    assert all(keys <= r["shape"].keys() for r in steps)
    pre = [r for r in steps if r["role"] == "prefill"]
    assert all(sum(r["shape"]["prefill_new"]) == r["shape"]["tokens"] <= r["shape"]["budget"] == 256 for r in pre)
    assert all(len(r["shape"]["prefill_prefix"]) == r["shape"]["batch"] for r in pre)
    dec = [r for r in steps if r["role"] == "decode"]
    assert all(r["shape"]["batch"] <= r["shape"]["max_batch"] == 16 for r in dec)
    assert read_expert_trace(out / "expert_counts.jsonl").shape[1:] == (3, SPEC.moe.num_experts)


def test_long_prompts_are_chunked_and_still_match_the_reference(tmp_path):
    res = _serve(tmp_path, "tiny-chunked")
    assert res.returncode == 0, res.stderr
    recs = read_measurements(tmp_path)
    assert any(any(r["shape"]["prefill_prefix"]) for r in recs if r["role"] == "prefill")
    reqs = [r for r in recs if r["op"] == "request"]
    assert len(reqs) == 6
    for r in reqs[:2]:
        assert r["output_tokens"] == _reference(r["step"], r["isl"], r["osl"])


def test_fault_during_serving_fails_naming_the_rank(tmp_path):
    env = dict(os.environ, RACKPLAN_EXEC_FAULT="raise:1")
    res = _serve(tmp_path, "tiny-chat", "--requests", "4", "--timeout", "30", env=env)
    assert res.returncode != 0 and "rank 1" in res.stderr, res.stderr
    assert not (tmp_path / "measurements.jsonl").exists()


def test_too_few_ranks_for_serving_is_one_line_exit_2(tmp_path):
    res = _serve(tmp_path, "tiny-chat", "--ranks", "1")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr


AGGREGATED = """name: tiny-agg
model: tiny-moe
hardware: cpu-local
num_gpus: 2
aggregated:
  - {role: both, dp: 2, max_tokens_per_step: 64, max_batch_per_rank: 8, cuda_graphs: false,
     async_scheduling: false}
"""


def test_an_aggregated_plan_serves_and_matches_the_reference(tmp_path):
    """An aggregated plan in serving mode: each rank's prompts in chunks next to its decodes, on one
    instance; a request's tokens (its first from the last prefill chunk, then osl - 1 decodes) equal
    the single-process reference; ran.json says what ran."""
    plan = tmp_path / "agg.yaml"
    plan.write_text(AGGREGATED)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(plan), "--device", "cpu",
           "--workload", "tiny-chunked", "--requests", "4", "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    recs = read_measurements(out)
    reqs = [r for r in recs if r["op"] == "request"]
    assert len(reqs) == 4
    for r in reqs[:2]:
        first = _reference(r["step"], r["isl"], 0, first=True)
        assert r["output_tokens"] == first + _reference(r["step"], r["isl"], r["osl"] - 1)
    ran = json.loads((out / "ran.json").read_text())
    assert ran["mode"] == "aggregated" and ran["router"] == "least_loaded"
