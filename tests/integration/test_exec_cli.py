"""`rackplan execute` end to end on tiny-cpu, and its fault handling (raise, SIGKILL)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rackplan.executor.schema import read_measurements

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "configs" / "plans" / "tiny-cpu.yaml"


def _execute(out: Path, *extra, env=None, timeout=90):
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(PLAN), "--device", "cpu",
           "--out", str(out), *extra]
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    return res, time.monotonic() - t0


def _tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment carries `tag` (forked ranks inherit it)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if tag.encode() in (d / "environ").read_bytes():
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def test_execute_tiny_cpu_writes_valid_measurements(tmp_path):
    res, wall_s = _execute(tmp_path, "--steps", "3")
    assert res.returncode == 0, res.stderr
    recs = read_measurements(tmp_path / "measurements.jsonl")
    assert wall_s < 60
    assert {r["role"] for r in recs if r["op"] != "host.probe"} == {"prefill", "decode"}
    assert {r["rank"] for r in recs} == {0, 1}
    # the rig's CPU speed probed in place (executor/probe.py): with 3 timed steps, before step 0 and after
    # the last, on each rank for each of its two instances (prefill, decode): 4 probes a rank, numbered from 2
    probes = [r for r in recs if r["op"] == "host.probe"]
    assert sorted((r["rank"], r["shape"]["before_step"]) for r in probes) == [(k, s) for k in (0, 1)
                                                                               for s in (0, 0, 3, 3)]
    assert all(r["shape"]["in_place"] and r["shape"]["probe_reps"] == 3 and r["step"] >= 2 and r["cpu_s"] > 0
               for r in probes)
    assert {"moe.dispatch", "moe.experts", "moe.combine", "attn.core", "host", "step"} <= {r["op"] for r in recs}
    pre = [r for r in recs if r["role"] == "prefill" and r["op"] == "moe.experts"]
    assert all(sum(r["shape"]["prefill_new"]) == r["shape"]["tokens"] <= 256 for r in pre)
    assert all(r["source"] == "measured" for r in recs)
    assert not list(tmp_path.glob(".measurements*"))  # no temp file left


@pytest.mark.parametrize("fault", ["raise:1", "kill:1"])
def test_rank_fault_fails_run_naming_rank_and_leaves_no_process(tmp_path, fault):
    tag = f"RACKPLAN_TEST_TAG={uuid.uuid4().hex}"
    env = dict(os.environ, RACKPLAN_EXEC_FAULT=fault, RACKPLAN_TEST_TAG=tag.split("=")[1])
    res, _ = _execute(tmp_path, "--timeout", "300", env=env, timeout=600)
    assert res.returncode != 0
    assert "rank 1" in res.stderr, res.stderr
    assert "passed: rank(s)" not in res.stderr  # the fault was found, not outlasted by the run's --timeout
    assert not (tmp_path / "measurements.jsonl").exists()
    time.sleep(0.2)
    assert _tagged_pids(tag.split("=")[1]) == []


def test_bad_plan_is_one_line_exit_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "rackplan.cli", "execute", "--plan", "nope", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("ranks,a2a", [(1, "modelled"), (2, "measured")])
def test_replay_of_a_plan_bigger_than_the_machine(tmp_path, ranks, a2a):
    """One rank: dispatch/combine priced by the simulator; two or more: the plan's per-rank bytes
    exchanged among the real ranks and measured."""
    plan = ROOT / "configs" / "plans" / "tiny-cpu-replay.yaml"
    cmd = [sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(plan), "--out", str(tmp_path),
           "--steps", "2", "--ranks", str(ranks)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    recs = read_measurements(tmp_path)
    dec = [r for r in recs if r["role"] == "decode"]
    comm = [r for r in dec if r["op"] in ("moe.dispatch", "moe.combine")]
    assert {r["source"] for r in comm} == {a2a} and all(r["shape"]["a2a_world"] == ranks for r in comm)
    assert {r["rank"] for r in dec} == set(range(ranks))
    assert {r["source"] for r in dec if r["op"] == "moe.experts"} == {"measured"}
    exp = [r for r in dec if r["op"] == "moe.experts"]
    assert all(r["ep"] == 8 and r["shape"]["ep_plan"] == 8 and r["shape"]["tokens_global"] == 8 * 16 for r in exp)
    assert all(0 < r["shape"]["expert_tokens"] <= 8 * 16 * 4 for r in exp)
