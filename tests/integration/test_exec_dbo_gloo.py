"""DBO on CPU ranks: tiny-cpu's DEP2 instances with dual-batch overlap over gloo (each half's
all-to-all on gloo's own thread), split at the plan's token thresholds (executor/dbo.py)."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rackplan.specs import dump_yaml, load_plan

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_dbo_on_cpu_splits_the_steps_at_its_thresholds(tmp_path):
    plan = load_plan("tiny-cpu")
    # decode: 16 sequences per rank, threshold 16 (splits); prefill: 256 tokens per rank, threshold 512 (does not)
    dec = dataclasses.replace(plan.decode[0], dbo=True, dbo_decode_token_threshold=16)
    pre = dataclasses.replace(plan.prefill[0], dbo=True, dbo_prefill_token_threshold=512)
    path = tmp_path / "dbo.yaml"
    dump_yaml(dataclasses.replace(plan, decode=(dec,), prefill=(pre,)), path)
    res = subprocess.run([sys.executable, "-m", "rackplan.cli", "execute", "--plan", str(path), "--device", "cpu",
                          "--out", str(tmp_path / "run"), "--steps", "3"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    recs = [json.loads(line) for line in (tmp_path / "run/measurements.jsonl").read_text().splitlines()]
    steps = [r for r in recs if r["op"] == "step"]
    split = {(r["role"], r["shape"]["dbo"]) for r in steps}
    assert split == {("decode", True), ("prefill", False)}
    ran = json.loads((tmp_path / "run/ran.json").read_text())
    assert ran["decode[0]"]["dbo"] is True and ran["decode[0]"]["dbo_token_thresholds"] is True
